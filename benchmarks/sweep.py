"""Capacity of one running vLLM server, measured with vLLM's own benchmark client
(benchmarks/bench_client.py: the load models, one call and a point's verdict).

Shared by ``tuned_vs_default.py``, ``grid.py`` and the others (benchmarks/ is not a package: the
scripts put this folder on ``sys.path``). It owns:

- the capacity search (``find_capacity``): step up a ladder of loads until the first point that
  breaks, then bisect between the last load that held and the first that broke (at most
  ``bisect_steps`` extra points, fewer once the two are within ``resolution``, 5 %). With a
  ``start`` instead of a ladder, it steps from there by ``step`` (x1.2), up while points hold and
  down while they break, to the first bracket, then bisects: near a good guess that is 3-4
  points where a ladder from the bottom spends one on every rung (claim-size points at low rates
  are the longest of all). Capacity is
  the highest load that held; its score is vLLM's ``output_throughput`` (output tokens / window)
  there. Loads are whole numbers for concurrency, 3 significant figures for rates. A point sends
  ``max(min_prompts, prompts_per_load x load)`` prompts: for a rate, ``prompts_per_load`` is
  seconds of arrivals, so a rate point lasts about 25 s or more;
- ``measure_config``: one fresh server start (its process group stopped on every exit path),
  throw-away warm-up requests, the capacity search, and an optional extra measurement (the claim
  check) on the same running server.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import sample_rule
from bench_client import (
    HEADER,
    LOAD_MODELS,
    LoadModel,
    Result,
    VLLMClient,
    fmt,
    model_of,
    show_point,
)

from tuner.engines.base import EngineStartError, LaunchSpec, ServerProcess, free_port
from tuner.engines.vllm import VLLMEngine


@dataclass
class SweepOptions:
    """The capacity search's ladder and sizes (see the module docstring)."""

    ladder: list[float]
    min_prompts: int
    prompts_per_load: float
    bisect_steps: int = 3
    resolution: float = 0.05  # stop bisecting once first broken / last held - 1 <= this
    start: float | None = None  # the first load; None: climb the ladder instead
    step: float = 1.2  # from ``start``: the factor between loads until the first bracket
    max_steps: int = 8  # from ``start``: the most points before a bracket
    # Where the ladder's first load breaks, the bisection's lower end: a load held elsewhere
    # (seeds.py: the claim, which its ladder steps up from); None: zero.
    floor: float | None = None
    # MLPerf's sample-size rule with the over-limit count (benchmarks/sample_rule.py): a point
    # whose percentiles held on too few samples for its count over the limit is measured again
    # with as many prompts as the rule asks for (fresh calls, at most ``max_prompts`` each,
    # ``max_calls`` in all); one that stays provisional has not held. False: vLLM's
    # percentiles alone decide, as before 2026-12-04.
    sample_rule: bool = True
    max_prompts: int = 1200
    max_calls: int = 3

    def prompts(self, x: float) -> int:
        return max(self.min_prompts, math.ceil(self.prompts_per_load * x))


def _positive(text: str) -> float:
    x = float(text)
    if not x > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return x


def _above_one(text: str) -> float:
    x = float(text)
    if not x > 1:
        raise argparse.ArgumentTypeError(f"must be above 1, got {text}")
    return x


def add_sweep_args(p: argparse.ArgumentParser, load_default: str | None) -> None:
    """The options both scripts share: load model, ladder, sizes, warm-up, client timeout."""
    ladders = "; ".join(
        f"{m.name} {','.join(f'{x:g}' for x in m.ladder)}" for m in LOAD_MODELS.values()
    )
    c, r = LOAD_MODELS["concurrency"], LOAD_MODELS["rate"]
    add = p.add_argument
    load_help = f" ({load_default})" if load_default else " (default: the report's)"
    add(
        "--load",
        choices=sorted(LOAD_MODELS),
        default=load_default,
        help="closed-loop concurrency or open-loop Poisson rate" + load_help,
    )
    add("--ladder", help=f"loads to step up, comma-separated (default {ladders})")
    add(
        "--min-prompts",
        type=int,
        help=f"prompts per point, at least (default: concurrency {c.min_prompts},"
        f" rate {r.min_prompts})",
    )
    add(
        "--prompts-per-load",
        type=float,
        help="prompts per point = max(min, this x load) (default: concurrency"
        f" {c.prompts_per_load:g}, rate {r.prompts_per_load:g}: seconds of arrivals)",
    )
    add(
        "--bisect-steps",
        type=int,
        default=3,
        help="most extra points between the last held and the first broken load (3)",
    )
    add(
        "--resolution",
        type=float,
        default=0.05,
        help="stop bisecting once first broken / last held - 1 <= this (0.05)",
    )
    add(
        "--start",
        type=_positive,
        help="instead of the ladder: the first load, then steps of --step up or down to the"
        " first bracket (grid.py: later configs start at the previous one's capacity)",
    )
    add("--step", type=_above_one, default=1.2, help="with --start: the factor between loads (1.2)")
    add_rule_args(p)
    add("--warmup-prompts", type=int, default=32, help="thrown away after each start (32; 0 off)")
    add("--client-timeout", type=float, default=1800.0, help="seconds per client call (1800)")
    add("--startup-timeout", type=float, default=400.0, help="seconds a start may take (400)")


def add_rule_args(p: argparse.ArgumentParser) -> None:
    """``--sample-rule``/``--no-sample-rule`` and ``--max-prompts`` (SweepOptions')."""
    p.add_argument(
        "--sample-rule",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="a point holds only with the samples MLPerf's rule asks for given its count over"
        " the limit (p99: 459 with none over, 662 with one); a provisional one is measured"
        " again with that many prompts (default on; off: vLLM's percentiles alone)",
    )
    p.add_argument(
        "--max-prompts",
        type=int,
        default=1200,
        help="the most prompts of a point measured again for the rule (1200: enough for p99"
        " with 4 over the limit)",
    )


def sweep_options(lm: LoadModel, args: argparse.Namespace) -> SweepOptions:
    """SweepOptions from the shared options; unset ones take the load model's defaults."""
    ladder = (
        [float(x) for x in args.ladder.split(",") if x.strip()] if args.ladder else list(lm.ladder)
    )
    return SweepOptions(
        ladder=sorted({lm.rounded(x) for x in ladder}),
        min_prompts=args.min_prompts if args.min_prompts is not None else lm.min_prompts,
        prompts_per_load=(
            args.prompts_per_load if args.prompts_per_load is not None else lm.prompts_per_load
        ),
        bisect_steps=args.bisect_steps,
        resolution=args.resolution,
        start=lm.rounded(args.start) if args.start else None,
        step=args.step,
        sample_rule=args.sample_rule,
        max_prompts=args.max_prompts,
    )


def find_capacity(
    measure: Callable[[float, str], tuple[bool, Result]], lm: LoadModel, opts: SweepOptions
) -> Result:
    """The highest load that held: the ladder up to the first break, then bisection.

    Args:
        measure: ``(load, phase) -> (held, point)``; phase is "ladder" or "bisect".
    Returns:
        ``capacity`` (the load, None when nothing held), ``held``/``broke`` (the final bracket;
        ``broke`` None when the whole ladder held, so capacity is a lower bound), ``points``.
    """
    points: list[Result] = []
    held: float | None = None
    broke: float | None = None
    if opts.start is not None:
        held, broke = _bracket(measure, lm, opts, opts.start, points)
    else:
        for x in opts.ladder:
            ok, point = measure(x, "ladder")
            points.append(point)
            if not ok:
                broke = x
                break
            held = x
    for _ in range(opts.bisect_steps if broke is not None else 0):
        assert broke is not None
        lo = held if held is not None else (opts.floor or 0.0)
        if held and broke / held - 1 <= opts.resolution:
            break
        mid = lm.rounded((lo + broke) / 2)
        if mid in (held, broke) or mid >= broke:
            break  # the bracket is as narrow as the load's rounding allows
        ok, point = measure(mid, "bisect")
        points.append(point)
        held, broke = (mid, broke) if ok else (held, mid)
    return {"capacity": held, "held": held, "broke": broke, "points": points}


def _bracket(
    measure: Callable[[float, str], tuple[bool, Result]],
    lm: LoadModel,
    opts: SweepOptions,
    x: float,
    points: list[Result],
) -> tuple[float | None, float | None]:
    """From ``x``, step by ``opts.step``: up while loads hold, down while they break, until a
    held load lies next to a broken one (or ``max_steps`` points, or the axis's lowest load).
    Returns (the highest held load, the lowest broken one), either None if not found."""
    held: float | None = None
    broke: float | None = None
    x = lm.rounded(x)
    for _ in range(opts.max_steps):
        ok, point = measure(x, "step")
        points.append(point)
        if ok:
            held = x
        else:
            broke = x
        if held is not None and broke is not None:
            break
        nxt = lm.rounded(x * opts.step if ok else x / opts.step)
        if nxt == x:
            # Rounding stalls the step (a concurrency of 1 or 2): move by one unit of the axis.
            nxt = lm.rounded(x + 1 if ok else x - 1)
        if nxt <= 0 or nxt == x:
            break
        x = nxt
    return held, broke


def capacity(
    client: VLLMClient, url: str, model: str, lm: LoadModel, opts: SweepOptions, d: Path
) -> Result:
    """``find_capacity`` with vLLM's client on a running server; prints every point.

    Returns find_capacity's fields plus ``load_model``, ``score_tokens_per_s`` (vLLM's
    output_throughput at the capacity load), ``score_requests_per_s`` and ``bracket_pct``.
    """
    results: dict[float, Result] = {}

    def measure(x: float, phase: str) -> tuple[bool, Result]:
        n = opts.prompts(x)
        name = f"{lm.name}-{lm.show(x).replace('.', 'p')}"
        calls: list[Result] = []
        first_held = False  # vLLM's percentiles on the first call alone
        while True:
            tag = f"-again{len(calls)}" if calls else ""
            res = client.run(url, model, lm.load(x), n, d, name + tag)
            calls.append(res)
            broken = client.verdict(res)  # vLLM's percentiles, call by call
            if len(calls) == 1:
                first_held = not broken
            # The rule on every sample at this load so far: one measured again keeps the
            # requests that went over the limit before.
            counts = sample_rule.pool([c.get("samples") or {} for c in calls])
            why = sample_rule.provisional(counts) if opts.sample_rule and not broken else []
            sent = sum(c.get("completed", 0) + c.get("failed", 0) for c in calls)
            more = sample_rule.prompts_for(counts, sent, n, opts.max_prompts) if why else None
            last = not why or not more or len(calls) >= opts.max_calls
            if why and last:  # still provisional: not shown to hold
                if more:
                    stop = f"{len(calls)} calls made"
                elif all(c["n"] for c in counts.values()):
                    stop = f"the rule needs more than {opts.max_prompts} prompts more"
                else:
                    stop = "no samples to size a call from"
                broken = [*why, f"not measured again: {stop}"]
            shown = f"held ({sample_rule.describe(counts)})" if counts else "held"
            label = phase if len(calls) == 1 else "again"
            show_point(label, lm.show(x), res, broken or why, verdict=shown)
            if last:
                break
            assert more  # not the last call: the rule sized the next one
            print(f"  {'':>7} {'':>6} measured again with {more} prompts (MLPerf's rule)")
            n = more
        results[x] = res  # the score: the last call, the longest window
        point = {"load": lm.load(x), "phase": phase, "prompts": n, "held": not broken}
        point["percentile_held"] = first_held
        keys = ("completed", "failed", "output_throughput", "p99_ttft_ms", "samples")
        point["calls"] = [{k: c.get(k) for k in keys} for c in calls]
        return not broken, {**point, "broken": broken, "result": res}

    found = find_capacity(measure, lm, opts)
    top, broke = found["capacity"], found["broke"]
    at = results.get(top) if top is not None else None
    # Without the sample-size rule: the highest load whose first call's percentiles held (a
    # lower bound of that search's capacity where the rule stopped this one lower).
    lenient = [p for p in found["points"] if p.get("percentile_held")]
    top_p = max(lenient, key=lambda p: model_of(p["load"])[1], default=None)
    found.update(
        load_model=lm.name,
        unit=lm.unit,
        score_tokens_per_s=at.get("output_throughput") if at else None,
        score_requests_per_s=at.get("request_throughput") if at else None,
        bracket_pct=100 * (broke / top - 1) if top and broke else None,
        percentile_only=model_of(top_p["load"])[1] if top_p else None,
        percentile_only_tokens_per_s=top_p["calls"][0].get("output_throughput") if top_p else None,
    )
    return found


def describe_capacity(lm: LoadModel, cap: Result | None) -> str:
    """``312.4 tok/s at 4.5 requests/s (broke at 4.75, +5.6 %)``, or why there is none."""
    if not cap or cap.get("capacity") is None:
        return "no load held" if cap else "not measured"
    broke = cap.get("broke")
    edge = (
        f"broke at {lm.show(broke)}, +{cap['bracket_pct']:.1f} %"
        if broke is not None
        else "the whole ladder held: a lower bound"
    )
    alone = cap.get("percentile_only")
    besides = (
        f"; by vLLM's percentile alone {fmt(cap.get('percentile_only_tokens_per_s'), '.1f')}"
        f" tok/s at {lm.show(alone)}"
        if alone is not None and alone != cap["capacity"]
        else ""
    )
    return (
        f"{fmt(cap['score_tokens_per_s'], '.1f')} tok/s at {lm.show(cap['capacity'])}"
        f" {lm.unit} ({edge}{besides})"
    )


def measure_config(
    label: str,
    spec: LaunchSpec,
    d: Path,
    client: VLLMClient,
    lm: LoadModel,
    opts: SweepOptions,
    *,
    warmup_prompts: int = 32,
    startup_timeout_s: float = 400.0,
    then: Callable[[str, str, Path], Result] | None = None,
    sweep: bool = True,
) -> Result:
    """Start one config fresh, warm it up, find its capacity (unless ``sweep`` is False), then
    run ``then`` on it.

    Args:
        label: the config's name in prints.
        spec: its launch command and environment (a free port is put in).
        then: ``(url, served_model, d) -> result``, measured on the same server after the sweep
            (the claim check); its result is stored under ``then``.
    Returns:
        ``startup_s``, ``capacity`` (see ``capacity``), ``then``; ``error`` where it did not start.
    """
    spec = spec.with_port(free_port())
    out: Result = {"label": label, "launch_command": spec.argv, "env": spec.env}
    print(f"\n[{label}] starting: env {spec.env}\n  log {d / 'server.log'}", flush=True)
    try:
        with ServerProcess(
            spec,
            d / "server.log",
            startup_timeout_s=startup_timeout_s,
            classify=VLLMEngine().classify_failure,
        ) as server:
            tokenizer = client.tokenizer
            out["startup_s"] = server.wait_ready(served_model=tokenizer)
            url, model = server.base_url, server.served_model or tokenizer
            print(f"  ready in {out['startup_s']:.0f} s, serving {model}\n{HEADER}", flush=True)
            if warmup_prompts > 0:
                # Thrown away: compilation, batching and cache warm-up after the start. Open
                # loop: arrivals at the ladder's first rate (about 8 s of them, as the tuner
                # warms up), so the batch sizes the first point reaches have been run once; a
                # closed loop of 8 leaves a rate point's first seconds to compile larger ones.
                if lm.name == "rate":
                    x0 = opts.start or opts.ladder[0]
                    w0: Result = {"rate_rps": x0}
                    n0 = max(warmup_prompts, min(64, math.ceil(8 * x0)))
                    shown = lm.show(x0)
                else:
                    w0 = {"concurrency": min(8, warmup_prompts)}
                    n0, shown = warmup_prompts, f"c{w0['concurrency']}"
                t0 = time.monotonic()
                res = client.run(url, model, w0, n0, d, "warmup")
                out["warmup_s"] = time.monotonic() - t0
                show_point("warmup", shown, res, [])
            if sweep:
                out["capacity"] = capacity(client, url, model, lm, opts, d)
            if then is not None:
                out["then"] = then(url, model, d)
    except EngineStartError as exc:
        out["error"] = f"failed to start: {exc}"
        print(f"  FAIL: {label} {out['error']}")
    if sweep:
        print(f"  {label}: capacity {describe_capacity(lm, out.get('capacity'))}", flush=True)
    return out
