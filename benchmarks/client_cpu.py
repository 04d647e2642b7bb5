"""What a co-located client's CPU does to the server it measures (a benchmark, not a test).

On a 2-core machine the load client shares the cores with the engine. autotune's client uses
3-5 % of a core; vLLM's ``vllm bench serve`` 15-20 %. An engine whose OpenMP threads are bound
to every core stalls at each parallel region when one of its cores is taken, so the heavier
client may cost the server more than its own share. This script separates the two causes:
how the client times and counts (its code) from how much CPU it takes (its weight).

On one fresh start of a run's recommended configuration (launch command and environment from
report.json), warmed up, it measures at the recommended load (or ``--rate``), per repeat and in
a rotating order, ``--prompts`` requests with:

- ``ours``: autotune's load client alone;
- ``ours+B%``: autotune's client beside a ballast process that burns B % of one core, for each
  B in ``--ballast-pct`` (default 8 and 16; probes/neighbour.py; comma-separated, to find the
  ballast that costs the server what vLLM's client does);
- ``vllm``: vLLM's own client.

It prints per run p50/p99 TTFT, p50 TPOT, requests/s achieved and output tokens/s, then the
medians per client, and writes ``<out>/bench.json`` (default
``results/bench-client-cpu-<timestamp>/``). It exits 0 whatever it measures. Run it from the
repository root on an idle machine:

    .venv/bin/python benchmarks/client_cpu.py --report results/<run-id>/report.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from bench_client import ROOT, VLLMClient, model_of, read_report  # noqa: E402
from sweep import SweepOptions, measure_config  # noqa: E402

from probes.client import LoadClient, run_load  # noqa: E402
from probes.metrics import summarize  # noqa: E402
from probes.neighbour import Neighbour  # noqa: E402
from probes.workload import SyntheticWorkload, prepare_requests  # noqa: E402
from tuner.engines.base import LaunchSpec  # noqa: E402
from tuner.report.schema import write_atomic  # noqa: E402
from tuner.runs.probe_run import _tokenizer  # noqa: E402

Result = dict[str, Any]


def ours(url: str, model: str, tok: Any, wl: SyntheticWorkload, x: float, n: int, seed: int):
    reqs = prepare_requests(wl, n, model=model, tokenizer=tok, seed=seed, ignore_eos=True)
    res = run_load(LoadClient(url, timeout_s=600), reqs, rate_rps=x, seed=seed)
    m = summarize(res.records)
    return {
        "ttft_p50": m.ttft_ms.p50, "ttft_p99": m.ttft_ms.p99, "tpot_p50": m.tpot_ms.p50,
        "rps": m.requests_per_s, "tok_s": m.output_tokens_per_s, "cpu": res.client_cpu_pct,
    }  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--report", type=Path, required=True, help="a finished run's report.json (or its folder)"
    )
    p.add_argument("--prompts", type=int, default=500)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--ballast-pct", default="8,16", help="one or more, comma-separated")
    p.add_argument(
        "--rate", type=float, help="requests/s to measure at (default: the recommended load)"
    )
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    try:
        ballasts = [float(b) for b in args.ballast_pct.split(",")]
    except ValueError:
        p.error(f"--ballast-pct must be numbers, comma-separated, got {args.ballast_pct!r}")
    if any(not 0 < b <= 100 for b in ballasts):
        p.error(f"--ballast-pct must be in (0, 100], got {args.ballast_pct}")
    if args.rate is not None and args.rate <= 0:
        p.error(f"--rate must be above 0, got {args.rate:g}")
    share = {f"ours+{b:g}%": b for b in ballasts}
    kinds = ["ours", *share, "vllm"]
    report = read_report(p, args.report)
    rec = report["recommended"]
    lm, x = model_of(rec["load"])
    if lm.name != "rate":
        print("the report's load model is not rate; this benchmark is about open-loop rates")
        return 2
    if args.rate is not None:
        x = args.rate
    wl_d = report["workload"]
    wl = SyntheticWorkload(input_len=int(wl_d["input_len"]), output_len=int(wl_d["output_len"]))
    client = VLLMClient.from_report(report)
    tok = _tokenizer(report["model_path"])
    out = args.out or ROOT / "results" / f"bench-client-cpu-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    runs: list[Result] = []
    seed0 = int(time.time())

    def then(url: str, model: str, d: Path) -> Result:
        for i in range(args.repeats):
            j = i % len(kinds)
            for k in kinds[j:] + kinds[:j]:  # a rotating order: drift hits all alike
                seed = seed0 + len(runs)
                with Neighbour(share.get(k, 0.0)):
                    if k == "vllm":
                        r = client.run(url, model, lm.load(x), args.prompts, d, f"vllm-{i}")
                        got = {
                            "ttft_p50": r.get("median_ttft_ms"), "ttft_p99": r.get("p99_ttft_ms"),
                            "tpot_p50": r.get("median_tpot_ms"), "rps": r.get("request_throughput"),
                            "tok_s": r.get("output_throughput"), "cpu": r.get("client_cpu_pct"),
                        }  # fmt: skip
                    else:
                        got = ours(url, model, tok, wl, x, args.prompts, seed)
                runs.append({"client": k, "repeat": i, **got})
                print(
                    f"  {k:>13} r{i}: TTFT p50 {got['ttft_p50'] or 0:7.0f} ms p99 "
                    f"{got['ttft_p99'] or 0:7.0f} ms | TPOT p50 {got['tpot_p50'] or 0:5.1f} ms | "
                    f"{got['rps'] or 0:5.2f} req/s {got['tok_s'] or 0:6.1f} tok/s | client cpu "
                    f"{got['cpu'] if got['cpu'] is not None else float('nan'):.0f} %",
                    flush=True,
                )
        return {"runs": runs}

    spec = LaunchSpec(list(rec["launch_command"]), dict(rec.get("env") or {}))
    print(f"report {args.report}; rate {x:g} req/s; {args.prompts} prompts per run")
    measure_config(
        "recommended", spec, out, client, lm,
        SweepOptions(list(lm.ladder), lm.min_prompts, lm.prompts_per_load, bisect_steps=0),
        then=then, sweep=False,
    )  # fmt: skip
    print("\nmedians per client:")
    summary: Result = {}
    for k in kinds:
        rows = [r for r in runs if r["client"] == k]
        med = {
            m: statistics.median([r[m] for r in rows if r[m] is not None] or [float("nan")])
            for m in ("ttft_p50", "ttft_p99", "tpot_p50", "rps", "tok_s", "cpu")
        }
        summary[k] = med
        print(
            f"  {k:>13}: TTFT p99 {med['ttft_p99']:7.0f} ms | TPOT p50 {med['tpot_p50']:5.1f} ms"
            f" | {med['rps']:5.2f} req/s | {med['tok_s']:6.1f} tok/s | cpu {med['cpu']:.0f} %"
        )
    for m in ("tpot_p50", "ttft_p99"):
        base = summary["ours"][m]
        for k in kinds[1:]:
            print(f"  {m} {k} / ours: {summary[k][m] / base:.3f}")
    write_atomic(
        out / "bench.json", json.dumps({"runs": runs, "medians": summary}, indent=2).encode()
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
