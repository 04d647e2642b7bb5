"""Tuned against default, measured with vLLM's own benchmark client (a benchmark, not a test).

Checks a finished autotune run's claims independently of autotune's load client. For the run's
baseline config and its recommended config (launch command and environment from report.json),
it starts the server, sends a few throw-away warm-up requests, then sweeps vLLM's
``vllm bench serve`` client (``benchmarks/vllm_client.py``, random prompts of the report's
input/output lengths, ``--ignore-eos``, a fresh seed on every call so the prefix cache cannot
flatter TTFT) upward over client concurrencies until the first one that breaks an SLO of the
report (or fails more requests than its error limit). A config's capacity score is the output
tokens/s at the highest concurrency that held. For the recommended config it also re-measures the
claim: one run at the recommended load, output tokens/s compared with the claimed figure (PASS
within 15 %) and every SLO metric compared with its limit.

The pair is repeated ``--repeats`` times, interleaved (baseline, recommended, baseline, ...), so
that the noise of a shared machine hits both alike. It prints a table per repeat and the medians,
their ratio, the spread and the claim checks, and writes everything to ``<out>/bench.json``.
The client's own CPU use is printed beside each point: on 2 cores it competes with the engine.
It exits 0 even when a claim fails (FAIL is printed): it measures, it does not assert.

    .venv/bin/python benchmarks/tuned_vs_default.py --report results/<run-id>/report.json
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tuner.engines.base import EngineStartError, LaunchSpec, ServerProcess, free_port  # noqa: E402
from tuner.engines.vllm import VLLMEngine  # noqa: E402
from tuner.report import write_atomic  # noqa: E402

CLIENT = ROOT / "benchmarks" / "vllm_client.py"
METRIC_KEY = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}
_rng = random.SystemRandom()


def run_client(
    url: str, model: str, tokenizer: str, wl: dict[str, Any], load: dict[str, float], n: int,
    percentiles: list[int], out_dir: Path, name: str, timeout_s: float,
) -> dict[str, Any]:
    """One call of vLLM's client; returns its JSON result plus seed, wall time and client CPU."""
    seed = _rng.randrange(1, 2**31)
    cmd = [
        sys.executable, str(CLIENT), "--base-url", url, "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "random", "--random-input-len", str(wl["input_len"]),
        "--random-output-len", str(wl["output_len"]), "--ignore-eos",
        "--num-prompts", str(n), "--seed", str(seed),
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", ",".join(str(p) for p in percentiles),
        "--save-result", "--result-dir", str(out_dir), "--result-filename", f"{name}.json",
        "--disable-tqdm",
    ]  # fmt: skip
    if "concurrency" in load:
        cmd += ["--max-concurrency", str(int(load["concurrency"]))]
    else:
        cmd += ["--request-rate", str(load["rate_rps"])]
    out_dir.mkdir(parents=True, exist_ok=True)
    # The server is never reaped while the client runs, so the change in the children's rusage
    # is the client's own CPU time (user + system), its subprocesses included.
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    with open(out_dir / f"{name}.log", "wb") as log:
        try:
            rc: int | None = subprocess.run(
                cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            rc = None
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    result: dict[str, Any] = {}
    try:
        result = json.loads((out_dir / f"{name}.json").read_text())
    except (OSError, ValueError):
        pass
    result.update(
        seed=seed, rc=rc, wall_s=wall, client_cpu_s=cpu, client_cpu_pct=100 * cpu / max(wall, 1e-9)
    )
    if rc != 0 or "output_throughput" not in result:
        result["error"] = f"client rc={rc}, see {out_dir / (name + '.log')}"
    return result


def verdict(res: dict[str, Any], slos: list[dict[str, Any]], max_err: float) -> list[str]:
    """Why a client result breaks the SLOs (empty: it held)."""
    if "error" in res:
        return [res["error"]]
    broken = []
    done, failed = res.get("completed", 0), res.get("failed", 0)
    if failed / max(done + failed, 1) > max_err:
        broken.append(f"{failed} of {done + failed} requests failed")
    for s in slos:
        key = f"p{s['percentile']}_{METRIC_KEY[s['metric']]}_ms"
        value = res.get(key)
        if value is None:
            keys = sorted(k for k in res if k.endswith("_ms"))
            broken.append(f"{key} missing from the client's result (it has {keys})")
        elif value > s["limit_ms"]:
            broken.append(f"{key} {value:.0f} > {s['limit_ms']:.0f}")
    return broken


def fmt(v: Any, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def print_point(label: str, c: Any, res: dict[str, Any], broken: list[str]) -> None:
    print(
        f"  {label:>6} {c!s:>5} {fmt(res.get('completed'), 'd'):>5} {fmt(res.get('failed'), 'd'):>4}"
        f" {fmt(res.get('output_throughput'), '.1f'):>8} {fmt(res.get('median_ttft_ms')):>7}"
        f" {fmt(res.get('p99_ttft_ms')):>7} {fmt(res.get('median_tpot_ms'), '.1f'):>6}"
        f" {fmt(res.get('client_cpu_pct')):>5}%  {'held' if not broken else '; '.join(broken)}",
        flush=True,
    )


def bench_config(
    kind: str, rec: dict[str, Any], report: dict[str, Any], args: argparse.Namespace,
    out_dir: Path, percentiles: list[int],
) -> dict[str, Any]:
    """Start one config, warm it up, sweep the concurrencies and (recommended) check the claim."""
    slos, wl = report["slo"], report["workload"]
    max_err = float(report.get("max_error_rate", 0.01))
    spec = LaunchSpec(list(rec["launch_command"]), dict(rec.get("env") or {})).with_port(free_port())
    out: dict[str, Any] = {"config": kind, "env": spec.env, "points": [], "score": None}
    print(f"\n[{out_dir.name}] starting {kind}: env={spec.env} log={out_dir / 'server.log'}")
    try:
        with ServerProcess(
            spec, out_dir / "server.log", startup_timeout_s=400,
            classify=VLLMEngine().classify_failure,
        ) as server:  # fmt: skip
            out["startup_s"] = server.wait_ready()
            model = server.served_model or report["model_path"]
            print(f"  ready in {out['startup_s']:.0f} s; served model {model}")
            call = dict(url=server.base_url, model=model, tokenizer=report["model_path"], wl=wl,
                        percentiles=percentiles, out_dir=out_dir, timeout_s=args.client_timeout)
            print(f"  {'':>6} {'conc':>5} {'done':>5} {'fail':>4} {'tok/s':>8} {'p50ttft':>7}"
                  f" {'p99ttft':>7} {'p50tpot':>6} {'cpu':>6}  verdict")
            if args.warmup_prompts > 0:
                c0 = args.concurrencies[0]
                res = run_client(load={"concurrency": c0}, n=args.warmup_prompts, name="warmup",
                                 **call)
                print_point("warmup", c0, res, [])
            for c in args.concurrencies:
                res = run_client(load={"concurrency": c}, n=max(args.min_prompts, 4 * c),
                                 name=f"c{c:04d}", **call)
                broken = verdict(res, slos, max_err)
                out["points"].append({"concurrency": c, "held": not broken, "broken": broken,
                                      "result": res})
                print_point("sweep", c, res, broken)
                if broken:
                    break
                out["score"], out["score_concurrency"] = res.get("output_throughput"), c
            if kind == "recommended":
                out["claim"] = check_claim(report, args, call, slos, max_err)
    except EngineStartError as exc:
        out["error"] = f"failed to start: {exc}"
        print(f"  FAIL: {kind} {out['error']}")
    print(f"  {kind}: capacity {fmt(out['score'], '.1f')} tok/s at c={out.get('score_concurrency')}")
    return out


def check_claim(
    report: dict[str, Any], args: argparse.Namespace, call: dict[str, Any],
    slos: list[dict[str, Any]], max_err: float,
) -> dict[str, Any]:
    """Re-measure the recommended load: throughput within tolerance, every SLO within its limit."""
    rec = report["recommended"]
    load = {k: float(v) for k, v in rec["load"].items()}
    res = run_client(load=load, n=args.claim_prompts, name="claim", **call)
    broken = verdict(res, slos, max_err)
    claimed = float(rec["metrics"]["output_tokens_per_s"])
    measured = res.get("output_throughput")
    ratio = measured / claimed if measured is not None and claimed > 0 else None
    tput_ok = ratio is not None and abs(ratio - 1) <= args.tolerance
    print_point("claim", rec["load"].get("concurrency", rec["load"]), res, broken)
    print(f"  claim: {fmt(measured, '.1f')} tok/s measured vs {claimed:.1f} claimed"
          f" (ratio {fmt(ratio, '.3f')}, {fmt(None if ratio is None else 100 * (ratio - 1), '+.1f')}"
          f" %): {'PASS' if tput_ok else 'FAIL'}; SLOs: {'PASS' if not broken else 'FAIL'}")
    return {"load": rec["load"], "claimed_tokens_per_s": claimed, "measured_tokens_per_s": measured,
            "ratio": ratio, "throughput_pass": tput_ok, "slo_pass": not broken,
            "slo_broken": broken, "result": res}


def summarize(runs: list[dict[str, Any]], report: dict[str, Any]) -> dict[str, Any]:
    scores: dict[str, list[float]] = {"baseline": [], "recommended": []}
    per_repeat = []
    for pair in runs:
        b, r = pair["baseline"]["score"], pair["recommended"]["score"]
        for kind, v in (("baseline", b), ("recommended", r)):
            if v is not None:
                scores[kind].append(v)
        per_repeat.append(r / b if b and r is not None else None)
    med = {k: statistics.median(v) if v else None for k, v in scores.items()}
    ratio = med["recommended"] / med["baseline"] if med["baseline"] and med["recommended"] else None
    claims = [p["recommended"].get("claim") for p in runs]
    base = report.get("baseline") or {}
    print("\n=== summary (vLLM's client; capacity = output tok/s at the highest concurrency that held)")
    for k, v in scores.items():
        spread = f"{min(v):.1f}-{max(v):.1f}" if v else "-"
        print(f"  {k:>11}: median {fmt(med[k], '.1f')} tok/s over {len(v)} runs, spread {spread}")
    print(f"  ratio recommended/baseline of the medians: {fmt(ratio, '.3f')}; per repeat: "
          + ", ".join(fmt(x, ".3f") for x in per_repeat))
    print(f"  autotune claimed: baseline {fmt(base.get('score_tokens_per_s'), '.1f')} tok/s, "
          f"gain {fmt(report['recommended'].get('gain_vs_baseline'), '.3f')}")
    for i, cl in enumerate(claims, 1):
        if cl is None:
            print(f"  claim check, repeat {i}: not run (FAIL)")
            continue
        ok = cl["throughput_pass"] and cl["slo_pass"]
        print(f"  claim check, repeat {i}: {'PASS' if ok else 'FAIL'} (throughput ratio "
              f"{fmt(cl['ratio'], '.3f')}, SLOs {'held' if cl['slo_pass'] else cl['slo_broken']})")
    return {"scores": scores, "median": med, "ratio_of_medians": ratio,
            "ratio_per_repeat": per_repeat,
            "claims_pass": [bool(c and c["throughput_pass"] and c["slo_pass"]) for c in claims]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--report", type=Path, required=True, help="a finished run's report.json")
    p.add_argument("--out", type=Path, default=None,
                   help="output folder (default results/bench-<timestamp>/)")
    p.add_argument("--concurrencies", default="4,8,12,16,20,24,32,48,64",
                   help="client concurrencies of the capacity sweep, ascending")
    p.add_argument("--repeats", type=int, default=2, help="baseline/recommended pairs")
    p.add_argument("--min-prompts", type=int, default=100,
                   help="prompts per sweep point: max(this, 4 x concurrency)")
    p.add_argument("--claim-prompts", type=int, default=400, help="prompts of the claim check")
    p.add_argument("--warmup-prompts", type=int, default=32,
                   help="throw-away prompts after each start (0: none)")
    p.add_argument("--tolerance", type=float, default=0.15,
                   help="claim check: largest relative throughput difference that passes")
    p.add_argument("--client-timeout", type=float, default=1800.0,
                   help="seconds one client call may take")
    args = p.parse_args()
    args.concurrencies = sorted(int(c) for c in args.concurrencies.split(",") if c.strip())

    report = json.loads(args.report.read_text())
    if not report.get("baseline") or not report.get("recommended"):
        print(f"{args.report}: needs both a baseline and a recommendation", file=sys.stderr)
        return 2
    if report.get("workload", {}).get("kind") != "synthetic":
        print(f"{args.report}: only synthetic workloads can be replayed", file=sys.stderr)
        return 2
    percentiles = sorted({50, 90, 95, 99} | {int(s["percentile"]) for s in report["slo"]})
    out = args.out or ROOT / "results" / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    slos = ", ".join(f"p{s['percentile']} {s['metric']} <= {s['limit_ms']:.0f} ms"
                     for s in report["slo"])
    print(f"report {args.report} (run {report.get('run_id')}); SLOs: {slos}; out {out}")

    doc: dict[str, Any] = {"report": str(args.report), "run_id": report.get("run_id"),
                           "options": {k: str(v) for k, v in vars(args).items()},
                           "slo": report["slo"], "workload": report["workload"], "repeats": []}
    for i in range(1, args.repeats + 1):
        pair = {}
        for kind in ("baseline", "recommended"):
            pair[kind] = bench_config(kind, report[kind], report, args, out / f"r{i}-{kind}",
                                      percentiles)
            doc["repeats"] = [*doc["repeats"][: i - 1], pair]
            write_atomic(out / "bench.json", json.dumps(doc, indent=2, default=str).encode())
    doc["summary"] = summarize(doc["repeats"], report)
    write_atomic(out / "bench.json", json.dumps(doc, indent=2, default=str).encode())
    print(f"\nwrote {out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
