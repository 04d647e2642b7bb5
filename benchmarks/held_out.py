"""A run's recommendation against vLLM's defaults on traffic it was not tuned for, measured with
vLLM's own client (a benchmark; issue 32).

A configuration tuned for one workload can lose on another. This starts the tuner's baseline
(vLLM's defaults, as the run launched them) and the run's recommendation (its launch command
from report.json), once each, and on each server finds the capacity of every workload shape
below with ``vllm bench serve`` (benchmarks/sweep.py: step from a start by x1.2 to the first
bracket, then bisect; from the configuration's own capacity on the shape where an
``--objective robust`` run searched it there, else from the run's recommendation's there, else
from the defaults', else from its tuned capacity: ``starts``), then prints each shape's gain:
the recommendation's output tokens/s at its capacity over the defaults'. The tuned workload
itself comes first, so its gain is printed beside the others.

Each shape is an autotune workload (probes/workload.py) whose requests autotune builds with
exact token counts (fresh prompts and salts every call), written as vLLM's ``custom`` dataset,
one JSONL line per request with its prompt and its output tokens, and sent by vLLM's client
(``--dataset-name custom --custom-output-len -1 --skip-chat-template --disable-shuffle
--ignore-eos``). Arrivals are vLLM's own: Poisson, or gamma with ``--burstiness`` = 1 / cv²
where the shape asks for bursts. Default shapes, for the README's 128-in/64-out workload:

- ``heavy``: lognormal lengths of the same means, p99 512 prompt and 256 output tokens;
- ``prefix``: 4 system prompts of 256 tokens, 80 % of the requests starting with one, 384
  prompt tokens in all (the prefix cache decides TTFT);
- ``bursty``: the tuned lengths, gamma arrivals of coefficient of variation 2.

Run it from the repository root on an idle machine, soon after the run (the boxes drift):

    .venv/bin/python benchmarks/held_out.py --report results/<run-id>/report.json
    .venv/bin/python benchmarks/held_out.py --report R \
        --shape long=synthetic:input=128,output=64,in_p99=1024
    .venv/bin/python benchmarks/held_out.py --report TUNED_ON_MIXED --against README_RUN \
        --no-tuned --shape mixed=synthetic:input=384,output=64,in_p99=1536,prefix_groups=4,\
    prefix_len=256,prefix_share=0.8

With ``--against``, a second run's recommendation is measured on the same shapes beside the
first's (three starts), and both gains over the same defaults are printed: a run tuned on one
shape against the README command's on that shape (issue 32).

It writes ``<out>/held_out.json`` (default ``results/held-out-<timestamp>/``) with every point,
and vLLM's client logs and results per configuration and shape.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

import orjson

# benchmarks/ is not a package: its folder (for sweep) and the repository root (for tuner).
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from bench_client import LOAD_MODELS, ROOT, VLLMClient, fmt, read_report  # noqa: E402
from sweep import SweepOptions, capacity, describe_capacity, measure_config  # noqa: E402

from probes.workload import SyntheticWorkload, parse_workload, prepare_requests  # noqa: E402
from tuner.engines.base import LaunchSpec  # noqa: E402
from tuner.engines.models import load_tokenizer  # noqa: E402
from tuner.report.schema import write_atomic  # noqa: E402

Result = dict[str, Any]
SHAPES = {
    "heavy": "synthetic:input=128,output=64,in_p99=512,out_p99=256",
    "prefix": "synthetic:input=384,output=64,prefix_groups=4,prefix_len=256,prefix_share=0.8",
    "bursty": "synthetic:input=128,output=64,arrivals=gamma,cv=2",
}


class ShapedClient(VLLMClient):
    """vLLM's client sending an autotune workload as its ``custom`` dataset (module docstring)."""

    def __init__(self, workload: SyntheticWorkload, tok: Any, **kw: Any) -> None:
        super().__init__(**kw)
        self.workload, self.tok = workload, tok
        self.burstiness = workload.arrivals.burstiness if workload.arrivals else None

    def dataset_args(self, n: int, seed: int, d: Path, name: str) -> list[str]:
        reqs = prepare_requests(self.workload, n, model="m", tokenizer=self.tok, seed=seed)
        path = d / f"{name}.prompts.jsonl"
        with path.open("wb") as f:
            for r in reqs:
                body = orjson.loads(r.body)
                line = {"prompt": body["prompt"], "output_tokens": r.max_tokens}
                f.write(orjson.dumps(line) + b"\n")
        args = ["--dataset-name", "custom", "--dataset-path", str(path)]
        args += ["--custom-output-len", "-1", "--skip-chat-template", "--disable-shuffle"]
        if self.burstiness is not None:
            args += ["--burstiness", f"{self.burstiness:g}"]
        return args


def parse_shapes(given: list[str] | None) -> dict[str, SyntheticWorkload]:
    """``NAME=SPEC`` pairs (default ``SHAPES``), each parsed as ``--workload`` is.

    Raises:
        ValueError: a pair without ``=``, or a workload autotune cannot parse, or one whose
            requests are not sent to /v1/completions (vLLM's custom dataset takes prompts).
    """
    pairs = dict(SHAPES) if not given else {}
    for g in given or []:
        name, sep, spec = g.partition("=")
        if not sep or not name:
            raise ValueError(f"--shape takes NAME=WORKLOAD, got {g!r}")
        pairs[name] = spec
    out = {}
    for name, spec in pairs.items():
        wl = parse_workload(spec)
        if not isinstance(wl, SyntheticWorkload):
            raise ValueError(f"--shape {name}: a synthetic workload is needed, got {spec!r}")
        if wl.sessions is not None:
            raise ValueError(f"--shape {name}: a session's turns need an order vLLM's client lacks")
        out[name] = wl
    return out


def across_load(report: Result, number: int, wl: SyntheticWorkload) -> float | None:
    """The request rate at which trial ``number`` of an ``--objective robust`` run held on the
    workload ``wl`` (its ``across`` entry there), or None where it was not searched on it."""
    trials = [report.get("baseline") or {}, *(report.get("trials") or [])]
    t: Result = next((x for x in trials if int(x.get("number") or 0) == number), {})
    for a in t.get("across") or []:
        try:
            same = parse_workload(str(a.get("workload"))) == wl
        except ValueError:
            continue
        if same and a.get("score_tokens_per_s") and (a.get("load") or {}).get("rate_rps"):
            return float(a["load"]["rate_rps"])
    return None


def starts(
    report: Result, config: Result, own: Result, clients: dict[str, VLLMClient], tuned_x: float
) -> dict[str, float]:
    """Where each shape's search starts for one configuration (``config``, of the run whose
    report is ``own``): its own capacity there, where its run searched it (``--objective
    robust``); else the first run's (``report``) recommendation's capacity there, the other
    configuration compared; else the first run's defaults' there; else its tuned capacity
    (``tuned_x``). A shape far from the tuned one (512-token prompts hold a seventh of 128's
    rate) would otherwise start far above its capacity, where 250 prompts take minutes to
    drain."""
    number = int(config.get("from_trial") or 0)  # a baseline has none: 0
    rec = int((report.get("recommended") or {}).get("from_trial") or 0)
    out = {}
    for name, client in clients.items():
        wl = getattr(client, "workload", None)
        x = None
        if isinstance(wl, SyntheticWorkload):
            x = across_load(own, number, wl) or across_load(report, rec, wl)
            x = x or across_load(report, 0, wl)
        out[name] = x or tuned_x
    return out


def search(args: argparse.Namespace, start: float, bisect: bool = True) -> SweepOptions:
    """A capacity search from ``start`` with points of ``--min-prompts`` prompts (vLLM's
    percentiles alone decide: these are comparisons, not claims)."""
    lm = LOAD_MODELS["rate"]
    return SweepOptions(
        ladder=list(lm.ladder),
        min_prompts=args.min_prompts,
        prompts_per_load=0,
        bisect_steps=args.bisect_steps if bisect else 0,
        resolution=args.resolution,
        start=lm.rounded(start),
        step=args.step,
        sample_rule=False,
    )


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--report", type=Path, required=True, help="the run's report.json (or folder)")
    p.add_argument("--shape", action="append", help="NAME=WORKLOAD, repeatable (default: 3)")
    p.add_argument(
        "--no-tuned", action="store_true", help="leave the tuned workload out (measured elsewhere)"
    )
    p.add_argument(
        "--against",
        type=Path,
        help="another run's report.json (or folder): its recommendation measured on the same "
        "shapes beside this run's, with its gain over the same defaults (a run tuned on one "
        "shape against the README command's)",
    )
    p.add_argument("--out", type=Path, help="output folder (default results/held-out-<ts>/)")
    p.add_argument("--min-prompts", type=int, default=250, help="prompts per point (250)")
    p.add_argument("--bisect-steps", type=int, default=1, help="points after the bracket (1)")
    p.add_argument("--resolution", type=float, default=0.1, help="bisect to this (0.1)")
    p.add_argument("--step", type=float, default=1.2, help="the factor between loads (1.2)")
    p.add_argument("--warmup-prompts", type=int, default=32)
    p.add_argument("--startup-timeout", type=float, default=400.0)
    p.add_argument("--client-timeout", type=float, default=1800.0)
    args = p.parse_args()
    if importlib.util.find_spec("pandas") is None:
        # vLLM's client reads a custom dataset with pandas, an optional dependency of vLLM's:
        # without it every call exits with no result (2026-12-06).
        p.error(
            "vLLM's client reads its custom dataset with pandas: scripts/setup.sh --dev, "
            "or .venv/bin/pip install 'autotune[bench]'"
        )
    report = read_report(p, args.report)
    if report.get("load", {}).get("model") != "rate":
        p.error("the run's load model must be the open loop (rate): a shape's bursts are arrivals")
    rec = report.get("recommended") or {}
    if not rec.get("launch_command") or not report.get("baseline"):
        p.error(f"{args.report}: no recommendation or no baseline to compare")
    try:
        shapes = parse_shapes(args.shape)
    except ValueError as exc:
        p.error(str(exc))
    tok = load_tokenizer(report["model_path"])
    lm = LOAD_MODELS["rate"]
    tuned = VLLMClient.from_report(report, timeout_s=args.client_timeout)
    kw = {
        "slos": tuned.slos,
        "tokenizer": tuned.tokenizer,
        "input_len": tuned.input_len,
        "output_len": tuned.output_len,
        "max_error_rate": tuned.max_err,
        "timeout_s": args.client_timeout,
    }
    clients: dict[str, VLLMClient] = {} if args.no_tuned else {"tuned": tuned}
    clients |= {name: ShapedClient(wl, tok, **kw) for name, wl in shapes.items()}
    out = args.out or ROOT / "results" / f"held-out-{time.strftime('%Y%m%d-%H%M%S')}"
    base = report["baseline"]
    configs = {
        "defaults": (base, float(base["load"]["rate_rps"]), report),
        "recommended": (rec, float(rec["load"]["rate_rps"]), report),
    }
    if args.against is not None:
        against = read_report(p, args.against)
        other = against.get("recommended") or {}
        if not other.get("launch_command") or (other.get("load") or {}).get("rate_rps") is None:
            p.error(f"{args.against}: no recommendation at a request rate to measure against")
        configs["against"] = (other, float(other["load"]["rate_rps"]), against)
    print(f"{len(clients)} workloads: " + "; ".join(f"{n}" for n in clients), flush=True)
    found: dict[str, Result] = {}
    for label, (t, start, own) in configs.items():
        spec = LaunchSpec(argv=list(t["launch_command"]), env=dict(t["env"]))
        at = starts(report, t, own, clients, start)

        def each(
            url: str, model: str, d: Path, label: str = label, at: dict[str, float] = at
        ) -> Result:
            res = {}
            for name, client in clients.items():
                print(f"  {label}, {name}: from {at[name]:.3g} requests/s", flush=True)
                res[name] = capacity(client, url, model, lm, search(args, at[name]), d / name)
                print(f"  {label}, {name}: {describe_capacity(lm, res[name])}", flush=True)
            return res

        found[label] = measure_config(
            label,
            spec,
            out / label,
            tuned,
            lm,
            search(args, start, bisect=False),
            warmup_prompts=args.warmup_prompts,
            startup_timeout_s=args.startup_timeout,
            then=each,
            sweep=False,
        )
    summary = summarize(found, list(clients))
    text = json.dumps({"report": str(args.report), **summary}, indent=1)
    write_atomic(out / "held_out.json", text.encode())
    return 0


def summarize(found: dict[str, Result], names: list[str]) -> Result:
    """Each workload's capacities and the gain (recommended / defaults, output tokens/s); with
    ``against`` (another run's recommendation), its gain too, and whether this run's is at
    least as high."""
    rows: dict[str, Result] = {}
    gains: dict[str, float | None] = {}
    other = "against" in found
    head = f"\n{'workload':>9} {'defaults tok/s':>15} {'recommended':>12} {'gain':>6}"
    print(head + (f" {'against':>9} {'gain':>6}" if other else ""))

    def score(label: str, name: str) -> tuple[Result, float | None]:
        got = (found.get(label, {}).get("then") or {}).get(name) or {}
        return got, got.get("score_tokens_per_s")

    for name in names:
        (d, a), (r, b) = score("defaults", name), score("recommended", name)
        gain = b / a if a and b else None
        rows[name] = {"defaults": d, "recommended": r, "gain": gain}
        gains[name] = gain
        line = f"{name:>9} {fmt(a, '.1f'):>15} {fmt(b, '.1f'):>12} {fmt(gain, '.2f'):>6}"
        if other:
            o, c = score("against", name)
            rows[name] |= {"against": o, "against_gain": c / a if a and c else None}
            line += f" {fmt(c, '.1f'):>9} {fmt(rows[name]['against_gain'], '.2f'):>6}"
        print(line)
    losses = [n for n, g in gains.items() if g is not None and g < 1]
    if losses:
        print(f"the recommendation loses to vLLM's defaults on: {', '.join(losses)}")
    if other:
        behind = [
            n
            for n, row in rows.items()
            if row["gain"] is not None
            and row["against_gain"] is not None
            and row["gain"] < row["against_gain"]
        ]
        print(
            "this run's recommendation gains less than the other's on: " + ", ".join(behind)
            if behind
            else "this run's recommendation gains at least as much as the other's on every shape"
        )
    return {"workloads": rows, "starts": {k: v.get("startup_s") for k, v in found.items()}}


if __name__ == "__main__":
    sys.exit(main())
