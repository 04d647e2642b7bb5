"""Several runs' recommendations re-measured side by side with vLLM's own client (a benchmark).

For the repeatability and tightness of autotune's claims: given the report.json of N runs (the
README's command with different seeds, say), each repeat starts every run's recommended config
fresh, in turn (interleaved, so a shared machine's noise hits them alike), and on each:

1. steps the load up from the claim with ``vllm bench serve`` (random prompts of the report's
   lengths, ``--ignore-eos``, a fresh seed per call, at least ``--min-prompts`` per point):
   claim x (1 + step), (1 + 2 step), ... until a point breaks an SLO, then one bisection: the
   highest that held is the config's capacity as vLLM's client finds it, at the sample size
   MLPerf's rule asks for with the requests over the limit counted (p99: 459 with none over,
   662 with one; a point with fewer is measured again with as many; ``--no-sample-rule``:
   vLLM's percentile alone, as before 2026-12-04);
2. checks the claim: ``--claim-prompts`` prompts at the recommended load, PASS when every SLO
   holds and output tokens/s is within ``--tolerance`` of the claim.

With ``--baseline``, the first report's baseline is measured the same way from its confirmed
load (unconfirmed: its search capacity less the run's load margin), for the gain. The summary
prints, per run, the claim, vLLM's capacity (median over the repeats), the tightness (claimed
tok/s / capacity tok/s) and the claims passed; then the spread of the capacities across runs
(max / min - 1) and each gain over the baseline.

    .venv/bin/python benchmarks/seeds.py results/A/report.json results/B/report.json \\
        results/C/report.json [--baseline] [--repeats 1]

It writes ``<out>/seeds.json`` (default ``results/bench-seeds-<timestamp>/``). It measures; it
does not assert (exit 0 whatever the verdicts).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

# benchmarks/ is not a package: its folder (for sweep) and the repository root (for tuner).
sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from bench_client import (  # noqa: E402
    LOAD_MODELS,
    ROOT,
    VLLMClient,
    fmt,
    model_of,
    read_report,
    report_load_model,
)
from sweep import SweepOptions, add_rule_args, measure_config  # noqa: E402
from tuned_vs_default import claim_check  # noqa: E402

from tuner.engines.base import LaunchSpec  # noqa: E402
from tuner.report.schema import write_atomic  # noqa: E402

Result = dict[str, Any]


def ladder_from(x: float, step: float, n: int) -> list[float]:
    return [round(x * (1 + step * k), 2) for k in range(1, n + 1)]


def capacity_tok_s(m: Result, claimed_load: float, rule: bool = True) -> float | None:
    """vLLM's tokens/s at the highest load that held: the sweep's, or the claim's. None where
    neither the claim nor any step above it held: the steps only go up from the claim, so the
    one bisection below it (half-way to zero) says nothing of where the capacity lies. With
    the sample-size ``rule``, the claim check counts as held only where it is not provisional
    under it too (its pass, vLLM's percentile on --claim-prompts, is the issue's check)."""
    cap = m.get("capacity") or {}
    claim = m.get("then") or {}
    held_load = cap.get("capacity")
    below = held_load is None or held_load < claimed_load  # no step above the claim held
    claim_held = claim.get("slo_pass") and not (rule and claim.get("sample_rule_provisional"))
    if below and claim_held and claim.get("measured_tokens_per_s") is not None:
        return float(claim["measured_tokens_per_s"])  # the claim is the edge
    return None if below else cap.get("score_tokens_per_s")


def baseline_of(rep: Result) -> Result | None:
    """The run's baseline as a config to measure: its confirmation, or where the time budget
    left it unconfirmed, its search capacity less the run's load margin (short open-loop
    points are optimistic) as the load to start from."""
    b = rep.get("baseline") or {}
    if rep.get("baseline_confirmation"):
        return {**rep["baseline_confirmation"], "launch_command": b["launch_command"]}
    if not (b.get("load") and b.get("metrics") and b.get("launch_command")):
        return None
    margin = float((rep.get("options") or {}).get("load_margin", 0.15))
    key, x = next(iter(b["load"].items()))
    start = round(float(x) * (1 - margin), 2) if key == "rate_rps" else int(x)
    return {**b, "load": {key: start}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add("reports", type=Path, nargs="+", help="finished runs' report.json (or run folders)")
    add("--baseline", action="store_true", help="measure the first report's baseline too")
    add("--repeats", type=int, default=1, help="interleaved rounds over the runs (1)")
    add("--step", type=float, default=0.05, help="load step above the claim (0.05)")
    add("--steps", type=int, default=6, help="most steps up (6)")
    add("--min-prompts", type=int, default=460, help="prompts per point, at least (460)")
    add("--claim-prompts", type=int, default=500, help="prompts of the claim check (500)")
    add_rule_args(p)
    add("--tolerance", type=float, default=0.10, help="claim's throughput tolerance (0.10)")
    add("--warmup-prompts", type=int, default=32, help="thrown away after each start (32)")
    add("--client-timeout", type=float, default=1800.0)
    add("--startup-timeout", type=float, default=400.0)
    add("--out", type=Path)
    args = p.parse_args()

    reports = [read_report(p, r) for r in args.reports]
    for path, rep in zip(args.reports, reports, strict=True):
        if not rep.get("recommended") or not rep["recommended"].get("launch_command"):
            print(f"{path}: no launched recommendation", file=sys.stderr)
            return 2
    lm = LOAD_MODELS[report_load_model(reports[0])]
    client = VLLMClient.from_report(reports[0], timeout_s=args.client_timeout)
    out = args.out or ROOT / "results" / f"bench-seeds-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    print(f"{len(reports)} runs; {client.describe()}; load model {lm.name}; output in {out}")

    jobs: list[tuple[str, Result, Result]] = []  # (name, config record, report for the claim)
    if args.baseline and (base := baseline_of(reports[0])) is not None:
        jobs.append(("baseline", base, {**reports[0], "recommended": base}))
    for rep in reports:
        jobs.append((rep["run_id"], rep["recommended"], rep))

    doc: Result = {"reports": [str(r) for r in args.reports], "repeats": []}
    for i in range(1, args.repeats + 1):
        rnd: Result = {}
        doc["repeats"].append(rnd)
        for name, rec, rep in jobs:
            _, x = model_of(rec["load"])
            opts = SweepOptions(
                ladder=ladder_from(x, args.step, args.steps),
                min_prompts=args.min_prompts,
                prompts_per_load=0.0,
                bisect_steps=1,
                resolution=args.step / 2,
                floor=x,  # a first step that breaks is bisected back towards the claim
                sample_rule=args.sample_rule,
                max_prompts=args.max_prompts,
            )
            spec = LaunchSpec(list(rec["launch_command"]), dict(rec.get("env") or {}))
            m = measure_config(
                f"r{i} {name}", spec, out / f"r{i}-{name}", client, lm, opts,
                warmup_prompts=args.warmup_prompts, startup_timeout_s=args.startup_timeout,
                then=claim_check(client, rep, args),
            )  # fmt: skip
            m["claimed_load"] = x
            m["claimed_tokens_per_s"] = float(rec["metrics"]["output_tokens_per_s"])
            m["vllm_capacity_tokens_per_s"] = capacity_tok_s(m, x, args.sample_rule)
            m["percentile_only_tokens_per_s"] = (m.get("capacity") or {}).get(
                "percentile_only_tokens_per_s"
            )
            rnd[name] = m
            write_atomic(out / "seeds.json", json.dumps(doc, indent=2, default=str).encode())

    print("\n=== per run (medians over the repeats; vLLM's client)")
    caps: dict[str, float] = {}
    for name, _rec, _ in jobs:
        runs = [r[name] for r in doc["repeats"] if name in r]
        vals = [c for c in (m["vllm_capacity_tokens_per_s"] for m in runs) if c is not None]
        cap = statistics.median(vals) if vals else None
        claimed = runs[0]["claimed_tokens_per_s"]
        passed = sum(bool((m.get("then") or {}).get("pass")) for m in runs)
        if cap is not None:
            caps[name] = cap
        tight = claimed / cap if cap else None
        loose = [c for c in (m.get("percentile_only_tokens_per_s") for m in runs) if c]
        lcap = statistics.median(loose) if loose else None
        print(
            f"  {name}: claim {lm.show(runs[0]['claimed_load'])} {lm.unit}, {claimed:.0f} tok/s;"
            f" vLLM capacity {fmt(cap, '.0f')} tok/s; tightness {fmt(tight, '.3f')};"
            f" claim passed {passed}/{len(runs)}; by vLLM's percentile alone (no sample-size"
            f" rule; the highest load held on a first call) {fmt(lcap, '.0f')} tok/s,"
            f" tightness {fmt(claimed / lcap if lcap else None, '.3f')}"
        )
    recs = {k: v for k, v in caps.items() if k != "baseline"}
    if len(recs) > 1:
        spread = max(recs.values()) / min(recs.values()) - 1
        print(f"  spread of the recommendations' capacities: {100 * spread:.1f} %")
        doc["spread"] = spread
    if "baseline" in caps:
        for k, v in recs.items():
            print(f"  gain {k} / baseline: {v / caps['baseline']:.3f}")
    doc["capacities"] = caps
    write_atomic(out / "seeds.json", json.dumps(doc, indent=2, default=str).encode())
    print(f"\nwrote {out / 'seeds.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
