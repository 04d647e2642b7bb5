"""Tuned against default, measured with vLLM's own benchmark client (a benchmark, not a test).

Checks a finished autotune run's claims independently of autotune's load client. For the run's
baseline config and its recommended config (launch command and environment from report.json),
it starts the server, sends a few throw-away warm-up requests, then sweeps vLLM's
``vllm bench serve`` client (``benchmarks/vllm_client.py``: random prompts of the report's
input/output lengths, ``--ignore-eos``, a fresh seed on every call so that the prefix cache cannot
flatter TTFT) upward over client concurrencies, up to the first one that breaks an SLO of the
report or fails more requests than the report's error limit. A config's capacity score is its
output tokens/s at the highest concurrency that held. For the recommended config it also checks
the claim: one run at the recommended load, output tokens/s against the claimed figure (PASS
within 15 %) and every SLO metric against its limit.

The pair is repeated ``--repeats`` times, interleaved (baseline, recommended, baseline, ...), so
that the noise of a shared machine hits both alike. It prints every point, a table per repeat,
the medians, their ratio, the spread and the claim checks, and writes it all to
``<out>/bench.json`` (default out: ``results/bench-<timestamp>/``, with the server logs and the
client's own logs and JSON results). The client's CPU use (user + system over wall time, 100 % =
one core) is printed beside each point: on 2 cores the client competes with the engine.
It exits 0 even when a claim fails (FAIL is printed): it measures, it does not assert. Run it
from the repository root on an otherwise idle machine:

    .venv/bin/python benchmarks/tuned_vs_default.py --report results/<run-id>/report.json
"""

from __future__ import annotations

import argparse
import contextlib
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
if str(ROOT) not in sys.path:  # benchmarks/ is not a package
    sys.path.insert(0, str(ROOT))

from tuner.engines.base import EngineStartError, LaunchSpec, ServerProcess, free_port  # noqa: E402
from tuner.engines.vllm import VLLMEngine  # noqa: E402
from tuner.report import write_atomic  # noqa: E402

CLIENT = ROOT / "benchmarks" / "vllm_client.py"
METRIC_KEY = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}
HEADER = "  {:>6} {:>5} {:>5} {:>4} {:>8} {:>7} {:>7} {:>7} {:>5}  verdict".format(
    "", "conc", "done", "fail", "tok/s", "p50ttft", "p99ttft", "p50tpot", "cpu%"
)
Result = dict[str, Any]


def fmt(v: Any, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


class Bench:
    """The report's workload, SLOs and the options; runs vLLM's client against one server."""

    def __init__(self, report: Result, args: argparse.Namespace) -> None:
        self.report, self.args = report, args
        self.slos: list[Result] = report["slo"]
        self.max_err = float(report.get("max_error_rate", 0.01))
        self.pcts = sorted({50, 90, 95, 99} | {int(s["percentile"]) for s in self.slos})
        self.rng = random.SystemRandom()

    def client(self, url: str, model: str, load: Result, n: int, d: Path, name: str) -> Result:
        """One call of vLLM's client: its JSON result plus seed, wall time and its own CPU use."""
        wl, seed = self.report["workload"], self.rng.randrange(1, 2**31)
        cmd = [sys.executable, str(CLIENT), "--base-url", url, "--model", model]
        cmd += ["--tokenizer", self.report["model_path"], "--dataset-name", "random"]
        cmd += ["--random-input-len", str(wl["input_len"]), "--ignore-eos"]
        cmd += ["--random-output-len", str(wl["output_len"]), "--num-prompts", str(n)]
        cmd += ["--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl,e2el"]
        cmd += ["--metric-percentiles", ",".join(map(str, self.pcts)), "--disable-tqdm"]
        cmd += ["--save-result", "--result-dir", str(d), "--result-filename", f"{name}.json"]
        if "concurrency" in load:
            cmd += ["--max-concurrency", str(int(load["concurrency"]))]
        else:
            cmd += ["--request-rate", str(load["rate_rps"])]
        d.mkdir(parents=True, exist_ok=True)
        # The server is not reaped while the client runs, so the change in the children's
        # rusage is the client's own CPU time (its subprocesses included).
        ru0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        rc: int | None = None
        with open(d / f"{name}.log", "wb") as log, contextlib.suppress(subprocess.TimeoutExpired):
            kw: Result = {"stdout": log, "stderr": subprocess.STDOUT, "cwd": ROOT}
            rc = subprocess.run(cmd, timeout=self.args.client_timeout, **kw).returncode
        wall, ru1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
        res: Result = {}
        with contextlib.suppress(OSError, ValueError):
            res = json.loads((d / f"{name}.json").read_text())
        res.update(seed=seed, rc=rc, wall_s=wall, client_cpu_s=cpu, client_cpu_pct=100 * cpu / wall)
        if rc != 0 or "output_throughput" not in res:
            why = "timed out" if rc is None else f"exit code {rc}"
            res["error"] = f"client {why}, no result; see {d / name}.log"
        return res

    def verdict(self, res: Result) -> list[str]:
        """Why a client result breaks the SLOs or the error limit (empty: it held)."""
        if "error" in res:
            return [res["error"]]
        broken = []
        done, failed = res.get("completed") or 0, res.get("failed") or 0
        if failed / max(done + failed, 1) > self.max_err:
            broken.append(f"{failed} of {done + failed} requests failed")
        for s in self.slos:
            key = f"p{s['percentile']}_{METRIC_KEY[s['metric']]}_ms"
            if res.get(key) is None:
                have = sorted(k for k in res if k.endswith("_ms"))
                broken.append(f"{key} missing from the client's result (it has {have})")
            elif res[key] > s["limit_ms"]:
                broken.append(f"{key} {res[key]:.0f} > {s['limit_ms']:.0f}")
        return broken

    @staticmethod
    def show(label: str, load: Any, res: Result, broken: list[str]) -> None:
        cells = [res.get(k) for k in ("completed", "failed")]
        nums = [res.get(k) for k in ("output_throughput", "median_ttft_ms", "p99_ttft_ms")]
        print(
            f"  {label:>6} {load!s:>5} {fmt(cells[0], 'd'):>5} {fmt(cells[1], 'd'):>4}"
            f" {fmt(nums[0], '.1f'):>8} {fmt(nums[1]):>7} {fmt(nums[2]):>7}"
            f" {fmt(res.get('median_tpot_ms'), '.1f'):>7} {fmt(res.get('client_cpu_pct')):>5}"
            f"  {'; '.join(broken) or 'held'}",
            flush=True,
        )

    def config(self, kind: str, d: Path) -> Result:
        """Start one config, warm it up, sweep the concurrencies and (recommended) check claims."""
        rec, args = self.report[kind], self.args
        spec = LaunchSpec(list(rec["launch_command"]), dict(rec.get("env") or {}))
        spec = spec.with_port(free_port())
        out: Result = {"config": kind, "env": spec.env, "points": [], "score": None}
        print(f"\n[{d.name}] starting {kind}: env {spec.env}, log {d / 'server.log'}", flush=True)
        try:
            classify = VLLMEngine().classify_failure
            with ServerProcess(
                spec, d / "server.log", startup_timeout_s=400, classify=classify
            ) as server:
                out["startup_s"] = server.wait_ready()
                url, model = server.base_url, server.served_model or self.report["model_path"]
                print(f"  ready in {out['startup_s']:.0f} s, serving {model}\n{HEADER}")
                if args.warmup_prompts > 0:
                    c0 = {"concurrency": args.concurrencies[0]}
                    res = self.client(url, model, c0, args.warmup_prompts, d, "warmup")
                    self.show("warmup", c0["concurrency"], res, [])
                for c in args.concurrencies:
                    n = max(args.min_prompts, 4 * c)
                    res = self.client(url, model, {"concurrency": c}, n, d, f"c{c:04d}")
                    broken = self.verdict(res)
                    point = {"concurrency": c, "held": not broken, "broken": broken, "result": res}
                    out["points"].append(point)
                    self.show("sweep", c, res, broken)
                    if broken:
                        break
                    out["score"], out["score_concurrency"] = res.get("output_throughput"), c
                if kind == "recommended":
                    out["claim"] = self.claim(url, model, d)
        except EngineStartError as exc:
            out["error"] = f"failed to start: {exc}"
            print(f"  FAIL: {kind} {out['error']}")
        c_top = out.get("score_concurrency")
        print(f"  {kind}: capacity {fmt(out['score'], '.1f')} tok/s at concurrency {c_top}")
        return out

    def claim(self, url: str, model: str, d: Path) -> Result:
        """Re-measure the recommended load: throughput within tolerance, every SLO held."""
        rec = self.report["recommended"]
        res = self.client(url, model, rec["load"], self.args.claim_prompts, d, "claim")
        broken = self.verdict(res)
        claimed = float(rec["metrics"]["output_tokens_per_s"])
        measured = res.get("output_throughput")
        ratio = measured / claimed if measured is not None and claimed > 0 else None
        tput_ok = ratio is not None and abs(ratio - 1) <= self.args.tolerance
        c = rec["load"].get("concurrency")
        self.show("claim", rec["load"] if c is None else int(c), res, broken)
        diff = None if ratio is None else 100 * (ratio - 1)
        print(
            f"  claim: {fmt(measured, '.1f')} tok/s measured vs {claimed:.1f} claimed (ratio"
            f" {fmt(ratio, '.3f')}, {fmt(diff, '+.1f')} %): {'PASS' if tput_ok else 'FAIL'};"
            f" SLOs at the claimed load: {'PASS' if not broken else 'FAIL'}"
        )
        return {
            "load": rec["load"], "claimed_tokens_per_s": claimed, "measured_tokens_per_s": measured,
            "ratio": ratio, "diff_pct": diff, "throughput_pass": tput_ok, "slo_pass": not broken,
            "slo_broken": broken, "pass": tput_ok and not broken, "result": res,
        }  # fmt: skip


def show_repeat(i: int, pair: Result) -> None:
    b, r = pair["baseline"]["score"], pair["recommended"]["score"]
    print(f"\n--- repeat {i}\n  {'config':>11} {'start s':>7} {'conc':>5} {'tok/s':>8}  claim")
    for kind, x in pair.items():
        cl = x.get("claim")
        verdict = "-" if kind == "baseline" else ("PASS" if cl and cl["pass"] else "FAIL")
        print(
            f"  {kind:>11} {fmt(x.get('startup_s')):>7} {x.get('score_concurrency')!s:>5}"
            f" {fmt(x['score'], '.1f'):>8}  {verdict}  {x.get('error') or ''}"
        )
    print(f"  ratio recommended/baseline: {fmt(r / b if b and r is not None else None, '.3f')}")


def summarize(pairs: list[Result], report: Result) -> Result:
    scores: dict[str, list[float]] = {"baseline": [], "recommended": []}
    per_repeat = []
    for pair in pairs:
        b, r = pair["baseline"]["score"], pair["recommended"]["score"]
        for kind, v in (("baseline", b), ("recommended", r)):
            if v is not None:
                scores[kind].append(v)
        per_repeat.append(r / b if b and r is not None else None)
    med = {k: statistics.median(v) if v else None for k, v in scores.items()}
    ratio = med["recommended"] / med["baseline"] if med["baseline"] and med["recommended"] else None
    claims = [pair["recommended"].get("claim") for pair in pairs]
    print("\n=== summary (vLLM's client; capacity = output tok/s at the highest load that held)")
    for k, v in scores.items():
        spread = f"{min(v):.1f}-{max(v):.1f}" if v else "-"
        print(f"  {k:>11}: median {fmt(med[k], '.1f')} tok/s over {len(v)} runs, spread {spread}")
    print(
        f"  ratio recommended/baseline of the medians: {fmt(ratio, '.3f')}"
        f" (per repeat: {', '.join(fmt(x, '.3f') for x in per_repeat)})"
    )
    base, rec = report["baseline"], report["recommended"]
    print(
        f"  autotune claimed: baseline {fmt(base.get('score_tokens_per_s'), '.1f')} tok/s,"
        f" recommended {rec['metrics']['output_tokens_per_s']:.1f} tok/s at {rec['load']},"
        f" gain {fmt(rec.get('gain_vs_baseline'), '.3f')}"
    )
    for i, cl in enumerate(claims, 1):
        if cl is None:
            print(f"  claim check, repeat {i}: FAIL (not run: the server did not start)")
        else:
            slo = "held" if cl["slo_pass"] else "; ".join(cl["slo_broken"])
            print(
                f"  claim check, repeat {i}: {'PASS' if cl['pass'] else 'FAIL'} (throughput ratio"
                f" {fmt(cl['ratio'], '.3f')}, {fmt(cl['diff_pct'], '+.1f')} %; SLOs {slo})"
            )
    passed = [bool(cl and cl["pass"]) for cl in claims]
    return {
        "scores": scores, "median": med, "ratio_of_medians": ratio,
        "ratio_per_repeat": per_repeat, "claims_pass": passed,
    }  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add("--report", type=Path, required=True, help="a finished run's report.json")
    add("--out", type=Path, help="output folder (default results/bench-<timestamp>/)")
    add("--concurrencies", default="4,8,12,16,20,24,32,48,64", help="sweep, comma-separated")
    add("--repeats", type=int, default=2, help="interleaved baseline/recommended pairs (2)")
    add("--min-prompts", type=int, default=100, help="per point: max(this, 4 x concurrency)")
    add("--claim-prompts", type=int, default=400, help="prompts of the claim check (400)")
    add("--warmup-prompts", type=int, default=32, help="thrown away after each start (32; 0 off)")
    add("--tolerance", type=float, default=0.15, help="claim check's throughput tolerance (0.15)")
    add("--client-timeout", type=float, default=1800.0, help="seconds per client call (1800)")
    args = p.parse_args()
    args.concurrencies = sorted({int(c) for c in args.concurrencies.split(",") if c.strip()})

    report = json.loads(args.report.read_text())
    if not report.get("baseline") or not report.get("recommended"):
        print(f"{args.report}: needs both a baseline and a recommendation", file=sys.stderr)
        return 2
    if report.get("workload", {}).get("kind") != "synthetic":
        print(f"{args.report}: only a synthetic workload can be replayed", file=sys.stderr)
        return 2
    bench = Bench(report, args)
    out = args.out or ROOT / "results" / f"bench-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    slos = ", ".join(f"p{s['percentile']} {s['metric']}<={s['limit_ms']:g}ms" for s in bench.slos)
    print(f"report {args.report} (run {report.get('run_id')}); SLOs {slos}; output in {out}")

    doc: Result = {
        "report": str(args.report), "run_id": report.get("run_id"), "slo": bench.slos,
        "workload": report["workload"], "options": {k: str(v) for k, v in vars(args).items()},
        "repeats": [],
    }  # fmt: skip
    for i in range(1, args.repeats + 1):
        pair: Result = {}
        doc["repeats"].append(pair)
        for kind in ("baseline", "recommended"):
            pair[kind] = bench.config(kind, out / f"r{i}-{kind}")
            write_atomic(out / "bench.json", json.dumps(doc, indent=2, default=str).encode())
        show_repeat(i, pair)
    doc["summary"] = summarize(doc["repeats"], report)
    write_atomic(out / "bench.json", json.dumps(doc, indent=2, default=str).encode())
    print(f"\nwrote {out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
