"""The load client is not the bottleneck: ours against vLLM's client on an instant fake server.

A benchmark (medians and ratios), not a test. It starts the fake OpenAI server
(tests/fakes/openai_server.py) as a separate process with no delays (TTFT 0, ITL 0, no
concurrency limit), so it streams ``--output-len`` one-word chunks as fast as it can. For each
concurrency of ``--concurrencies`` it runs, closed loop with ``--requests`` requests each:

- ours (probes/client.py): short completion prompts, ``max_tokens = --output-len``, no warm-up;
  requests/s (requests / window), median TTFT, our CPU % over the window;
- vLLM's ``vllm bench serve`` (benchmarks/vllm_client.py): random prompts of 16 tokens (counted
  with ``--tokenizer``, default the embedded smollm2-135m folder), ``--ignore-eos``, request
  rate inf; its request_throughput and median_ttft_ms, its CPU % over its whole run.

``--repeats`` rounds, the order alternating (ours first on even rounds). It prints the medians
per concurrency, the ratio ours/vLLM of requests/s (goal >= 1.0) and the median TTFT of both
with their difference (goal: ours adds < 1 ms over vLLM's). Since the fake answers at once, our
median TTFT itself is the client + loopback overhead (cleanest at concurrency 1).

Caveat: the fake is one Python process (one event loop) and may itself be the limit at high
concurrency, for both clients alike. The fake's CPU % over each client's window (CPU time from
psutil / window; 100 % = one core) is printed too: near 100 %, the fake, not the client, sets
the pace. It writes ``<out>/bench.json`` (default ``results/bench-overhead-<timestamp>/``) and
exits 0 even when a goal is missed (MISSED is printed; exit 1 only where it could not measure
at all). Run it from the repository root:

    .venv/bin/python benchmarks/client_overhead.py [--concurrencies 1,16,64] [--requests 2000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/ is not a package: its scripts import each other as top-level modules.
sys.path[:0] = [p for p in (str(ROOT / "benchmarks"), str(ROOT)) if p not in sys.path]

from probe_vs_vllm_client import fmt, run_vllm_client  # noqa: E402

from probes.client import LoadClient, run_load  # noqa: E402
from probes.metrics import summarize  # noqa: E402
from probes.workload import FileItem, FileWorkload, prepare_requests  # noqa: E402
from tuner.engines.base import EngineStartError, LaunchSpec, ServerProcess, free_port  # noqa: E402
from tuner.report.schema import write_atomic  # noqa: E402

FAKE = ROOT / "tests" / "fakes" / "openai_server.py"
WORDS = "the quick brown fox jumps over the lazy dog while the cat sleeps in the warm sun"
Result = dict[str, Any]


def fake_cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return float(t.user + t.system)


def ours(url: str, model: str, fake: psutil.Process, c: int, a: argparse.Namespace) -> Result:
    items = tuple(FileItem(prompt=f"{i}: {WORDS}", max_tokens=a.output_len) for i in range(64))
    wl = FileWorkload(path="inline", items=items)
    reqs = prepare_requests(wl, a.requests, model=model, tokenizer=None, seed=0)
    cpu0 = fake_cpu_s(fake)
    res = run_load(LoadClient(url), reqs, concurrency=c, warmup=0)
    m = summarize(res.records, client_cpu_pct=res.client_cpu_pct)
    return {
        "rps": m.requests_per_s, "ttft_ms": m.ttft_ms.p50, "client_cpu_pct": res.client_cpu_pct,
        "fake_cpu_pct": 100 * (fake_cpu_s(fake) - cpu0) / res.wall_s if res.wall_s else None,
        "completed": m.n_completed, "failed": m.n_failed, "errors": m.errors,
    }  # fmt: skip


def theirs(
    url: str, model: str, fake: psutil.Process, c: int, a: argparse.Namespace, name: str
) -> Result:
    opts = ["--tokenizer", a.tokenizer, "--dataset-name", "random", "--ignore-eos"]
    opts += ["--random-input-len", "16", "--random-output-len", str(a.output_len)]
    opts += ["--max-concurrency", str(c), "--num-prompts", str(a.requests)]
    opts += ["--request-rate", "inf"]
    cpu0 = fake_cpu_s(fake)
    res = run_vllm_client(url, model, opts, a.out, name, a.client_timeout)
    fake_s, dur = fake_cpu_s(fake) - cpu0, res.get("duration")
    # The fake idles while vLLM's client starts up: its CPU counts over the benchmark window.
    res["fake_cpu_pct"] = 100 * fake_s / dur if dur else None
    res["rps"], res["ttft_ms"] = res.get("request_throughput"), res.get("median_ttft_ms")
    return res


ROW = "  {:>4} {:>5} {:>9} {:>9} {:>6} {:>6} {:>6}  {}"


def show(rnd: int, c: int, who: str, r: Result) -> None:
    note = r.get("error") or (f"{r['failed']} failed {r.get('errors')}" if r.get("failed") else "")
    print(
        ROW.format(
            rnd, c, who, fmt(r.get("rps"), ".0f"), fmt(r.get("ttft_ms"), ".2f"),
            fmt(r.get("client_cpu_pct"), ".0f"), fmt(r.get("fake_cpu_pct"), ".0f"), note,
        ),
        flush=True,
    )  # fmt: skip


def summary(runs: list[Result], concurrencies: list[int]) -> list[Result]:
    def med(c: int, who: str, key: str) -> float | None:
        vals = [r[who][key] for r in runs if r["c"] == c and r[who].get(key) is not None]
        return statistics.median(vals) if vals else None

    print("\n=== medians over the repeats (cpu%: 100 = one core; fake = the fake server's)")
    print(
        f"  {'conc':>4} {'rps ours':>10} {'rps vLLM':>10} {'ratio':>6}  {'verdict':<7}"
        f" {'ttft ours':>10} {'ttft vLLM':>10} {'diff':>6}  {'verdict':<7}"
        f" {'cpu% ours/vLLM':>15} {'fake% ours/vLLM':>15}"
    )
    out = []
    for c in concurrencies:
        row: Result = {"concurrency": c}
        for key in ("rps", "ttft_ms", "client_cpu_pct", "fake_cpu_pct"):
            row[key] = {who: med(c, who, key) for who in ("ours", "vllm")}
        (ro, rv), (to, tv) = row["rps"].values(), row["ttft_ms"].values()
        row["rps_ratio"] = ro / rv if ro is not None and rv else None
        row["ttft_diff_ms"] = to - tv if to is not None and tv is not None else None
        row["rps_pass"] = row["rps_ratio"] is not None and row["rps_ratio"] >= 1.0
        row["ttft_pass"] = row["ttft_diff_ms"] is not None and row["ttft_diff_ms"] < 1.0
        cpu, fake = row["client_cpu_pct"], row["fake_cpu_pct"]
        print(
            f"  {c:>4} {fmt(ro, '.0f'):>10} {fmt(rv, '.0f'):>10} {fmt(row['rps_ratio'], '.3f'):>6}"
            f"  {'PASS' if row['rps_pass'] else 'MISSED':<7} {fmt(to, '.2f'):>10}"
            f" {fmt(tv, '.2f'):>10} {fmt(row['ttft_diff_ms'], '+.2f'):>6}"
            f"  {'PASS' if row['ttft_pass'] else 'MISSED':<7}"
            f" {fmt(cpu['ours'], '.0f'):>10}/{fmt(cpu['vllm'], '.0f'):<4}"
            f" {fmt(fake['ours'], '.0f'):>10}/{fmt(fake['vllm'], '.0f')}"
        )
        if max((v for v in fake.values() if v is not None), default=0) >= 90:
            print(f"        (concurrency {c}: the fake is near one full core; it may set the pace)")
        out.append(row)
    print("  goals: requests/s ratio ours/vLLM >= 1.0; median TTFT ours - vLLM < 1 ms")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add("--concurrencies", default="1,16,64", help="comma-separated (1,16,64)")
    add("--requests", type=int, default=2000, help="requests per client run (2000)")
    add("--output-len", type=int, default=16, help="output tokens (chunks) per request (16)")
    add("--repeats", type=int, default=3, help="rounds, order alternating (3)")
    add("--tokenizer", help="tokenizer folder for vLLM's client (default: smollm2-135m's)")
    add("--client-timeout", type=float, default=600.0, help="seconds per vLLM client call")
    add("--out", type=Path, help="output folder (default results/bench-overhead-<timestamp>/)")
    a = p.parse_args()
    concurrencies = [int(c) for c in a.concurrencies.split(",") if c.strip()]
    if not a.tokenizer:
        from tuner.engines.models import ModelError, resolve_model

        try:
            a.tokenizer = resolve_model("smollm2-135m").path
        except ModelError as exc:
            print(f"could not measure: no tokenizer for vLLM's client ({exc}); give --tokenizer")
            return 1
    a.out = a.out or ROOT / "results" / f"bench-overhead-{time.strftime('%Y%m%d-%H%M%S')}"
    a.out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(FAKE), "--port", str(free_port()), "--host", "127.0.0.1"]
    argv += ["--ttft-ms", "0", "--itl-ms", "0", "--max-concurrent", "100000"]
    doc: Result = {"options": {k: str(v) for k, v in vars(a).items()}, "runs": []}
    with ServerProcess(LaunchSpec(argv), a.out / "fake.log", startup_timeout_s=60) as srv:
        try:
            srv.wait_ready()
        except EngineStartError as exc:
            print(f"could not measure: the fake server did not start ({exc}); see {srv.log_path}")
            return 1
        assert srv.proc is not None
        url, model = srv.base_url, srv.served_model or "fake-model"
        fake = psutil.Process(srv.proc.pid)
        print(f"fake server {url} (pid {srv.proc.pid}); tokenizer {a.tokenizer}; out {a.out}")
        print(ROW.format("rnd", "conc", "client", "req/s", "ttft", "cpu%", "fake%", ""))
        for i in range(a.repeats):
            order = ("ours", "vllm") if i % 2 == 0 else ("vllm", "ours")
            for c in concurrencies:
                run: Result = {"repeat": i + 1, "c": c, "order": order}
                for who in order:
                    if who == "ours":
                        run[who] = ours(url, model, fake, c, a)
                    else:
                        run[who] = theirs(url, model, fake, c, a, f"r{i + 1}-c{c:03d}-vllm")
                    show(i + 1, c, who, run[who])
                doc["runs"].append(run)
                write_atomic(a.out / "bench.json", json.dumps(doc, indent=2, default=str).encode())
    doc["summary"] = summary(doc["runs"], concurrencies)
    write_atomic(a.out / "bench.json", json.dumps(doc, indent=2, default=str).encode())
    print(f"\nwrote {a.out / 'bench.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
