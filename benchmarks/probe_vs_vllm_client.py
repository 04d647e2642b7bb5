r"""Our load client against vLLM's own benchmark client, same server, same workload (a benchmark).

Measures whether autotune's load client (probes/client.py) reports what vLLM's ``vllm bench
serve`` client (through ``benchmarks/vllm_client.py``) reports against the same server and
workload: median TTFT, median TPOT and output tokens/s. A few of our requests warm the server
up once at the start and are thrown away. Each repeat then runs both clients back to back
(ours first on even repeats, vLLM's first on odd ones, so drift hits both alike). Both use
random prompts of exactly ``--input-len`` tokens, ``--output-len`` output tokens with
``ignore_eos``, greedy sampling (our client sends temperature 0, so vLLM's gets
``--temperature 0`` too), closed loop at ``--concurrency``, and a fresh seed per call, so that
the prefix cache cannot flatter either one.

It prints a table per repeat, then the medians over the repeats, the ratio ours/vLLM of each
metric and PASS where |ratio - 1| <= ``--tolerance`` (5 %), MISSED otherwise. Each client's CPU
use is printed beside it (100 % = one core): ours over the measurement window; vLLM's is its
process's CPU time (getrusage of the children) over its whole run, start-up included. It writes
``<out>/bench.json`` (default ``results/bench-probe-<timestamp>/``) with the server's log and
vLLM's client logs and results. It prints medians and ratios and exits 0 even when a goal is
missed (MISSED is printed): it measures, it does not assert; exit 1 only where it could not
measure at all. Run it from the repository root on an idle machine:

    .venv/bin/python benchmarks/probe_vs_vllm_client.py --model smollm2-135m
    .venv/bin/python benchmarks/probe_vs_vllm_client.py --endpoint http://127.0.0.1:8000 \
        --served-model NAME --tokenizer MODEL_DIR
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

from probes.client import LoadClient, run_load  # noqa: E402
from probes.metrics import summarize  # noqa: E402
from probes.workload import SyntheticWorkload, prepare_requests  # noqa: E402
from tuner.engines.base import EngineStartError  # noqa: E402
from tuner.engines.hardware import detect_hardware  # noqa: E402
from tuner.engines.models import ModelError  # noqa: E402
from tuner.report.schema import write_atomic  # noqa: E402
from tuner.runs.probe_run import ProbeError, _launch_spec, _server, parse_params  # noqa: E402

CLIENT = ROOT / "benchmarks" / "vllm_client.py"
METRICS = ("ttft_ms", "tpot_ms", "tokens_per_s")  # p50 TTFT, p50 TPOT, output tokens/s
Result = dict[str, Any]
SEEDS = random.SystemRandom()


def fmt(v: Any, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def run_vllm_client(
    url: str, model: str, args: list[str], d: Path, name: str, timeout: float
) -> Result:
    """One call of vLLM's client (a fresh seed): its JSON's scalar figures, wall time, CPU %.

    ``args`` are the dataset and load options. The servers are not reaped while it runs, so
    the change in the children's rusage is the client's own CPU time.
    """
    seed = SEEDS.randrange(1, 2**31)
    cmd = [sys.executable, str(CLIENT), "--base-url", url, "--model", model, *args]
    cmd += ["--seed", str(seed), "--temperature", "0", "--disable-tqdm"]
    cmd += ["--save-result", "--result-dir", str(d), "--result-filename", f"{name}.json"]
    d.mkdir(parents=True, exist_ok=True)
    ru0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
    rc: int | None = None
    with open(d / f"{name}.log", "wb") as log, contextlib.suppress(subprocess.TimeoutExpired):
        kw: Result = {"stdout": log, "stderr": subprocess.STDOUT, "cwd": ROOT}
        rc = subprocess.run(cmd, timeout=timeout, **kw).returncode
    wall, ru1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    res: Result = {}
    with contextlib.suppress(OSError, ValueError):
        full = json.loads((d / f"{name}.json").read_text())
        res = {k: v for k, v in full.items() if not isinstance(v, (list, dict))}
    res.update(seed=seed, rc=rc, wall_s=wall, client_cpu_pct=100 * cpu / wall)
    if rc != 0 or "request_throughput" not in res:
        why = "timed out" if rc is None else f"exit code {rc}"
        res["error"] = f"vLLM's client {why}, no result; see {d / name}.log"
    return res


def ours(url: str, model: str, tok: Any, a: argparse.Namespace, n: int, warm: bool) -> Result:
    seed = SEEDS.randrange(1, 2**31)
    wl = SyntheticWorkload(input_len=a.input_len, output_len=a.output_len)
    # ignore_eos always: the comparison is against vLLM's client with --ignore-eos.
    reqs = prepare_requests(wl, n, model=model, tokenizer=tok, seed=seed, ignore_eos=True)
    res = run_load(LoadClient(url), reqs, concurrency=min(a.concurrency, n), warmup=0)
    if warm:
        return {}
    m = summarize(res.records, client_cpu_pct=res.client_cpu_pct)
    return {
        "seed": seed, "completed": m.n_completed, "failed": m.n_failed, "ttft_ms": m.ttft_ms.p50,
        "tpot_ms": m.tpot_ms.p50, "tokens_per_s": m.output_tokens_per_s,
        "client_cpu_pct": res.client_cpu_pct, "wall_s": res.wall_s, "errors": m.errors,
        "prompt_token_mismatches": m.prompt_token_mismatches,
    }  # fmt: skip


def theirs(url: str, model: str, tok_dir: str, a: argparse.Namespace, d: Path, n: str) -> Result:
    opts = ["--tokenizer", tok_dir, "--dataset-name", "random", "--ignore-eos"]
    opts += ["--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len)]
    opts += ["--max-concurrency", str(a.concurrency), "--num-prompts", str(a.requests)]
    opts += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99"]
    res = run_vllm_client(url, model, opts, d, n, a.client_timeout)
    res["ttft_ms"], res["tpot_ms"] = res.get("median_ttft_ms"), res.get("median_tpot_ms")
    res["tokens_per_s"] = res.get("output_throughput")
    return res


def show_repeat(i: int, rep: Result) -> None:
    print(f"\n--- repeat {i} (first: {rep['order'][0]})")
    print(f"  {'client':>6} {'done':>5} {'fail':>4} {'p50ttft':>8} {'p50tpot':>8} {'tok/s':>8}"
          f" {'cpu%':>5} {'wall s':>6}")  # fmt: skip
    for who in ("ours", "vllm"):
        r = rep[who]
        print(
            f"  {who:>6} {fmt(r.get('completed'), 'd'):>5} {fmt(r.get('failed'), 'd'):>4}"
            f" {fmt(r.get('ttft_ms')):>8} {fmt(r.get('tpot_ms'), '.2f'):>8}"
            f" {fmt(r.get('tokens_per_s')):>8} {fmt(r.get('client_cpu_pct'), '.0f'):>5}"
            f" {fmt(r.get('wall_s'), '.0f'):>6}  {r.get('error') or r.get('errors') or ''}",
            flush=True,
        )


def summarize_repeats(reps: list[Result], tol: float) -> Result:
    def med(who: str, key: str) -> float | None:
        vals = [r[who][key] for r in reps if r[who].get(key) is not None]
        return statistics.median(vals) if vals else None

    print(f"\n=== summary: medians over {len(reps)} repeats; PASS if |ours/vLLM - 1| <= {tol:g}")
    print(f"  {'metric':>12} {'ours':>9} {'vLLM':>9} {'ratio':>7}  verdict")
    out: Result = {}
    for key in (*METRICS, "client_cpu_pct"):
        o, v = med("ours", key), med("vllm", key)
        ratio = o / v if o is not None and v else None
        ok = ratio is not None and abs(ratio - 1) <= tol
        verdict = "(info)" if key == "client_cpu_pct" else "PASS" if ok else "MISSED"
        print(
            f"  {key:>12} {fmt(o, '.2f'):>9} {fmt(v, '.2f'):>9} {fmt(ratio, '.3f'):>7}  {verdict}"
        )
        out[key] = {"ours": o, "vllm": v, "ratio": ratio, "pass": ok if key in METRICS else None}
    print("  cpu%: ours over its window; vLLM's over its whole run, start-up included")
    out["pass"] = all(out[k]["pass"] for k in METRICS)
    print(f"  overall: {'PASS' if out['pass'] else 'MISSED'}")
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add("--endpoint", help="a running server's root URL (then --served-model and --tokenizer)")
    add("--served-model", help="the model name the endpoint serves")
    add("--tokenizer", help="the model's tokenizer folder (default with --model: the model)")
    add("--model", help="start vLLM with this model (e.g. smollm2-135m), baseline settings")
    add("--param", action="append", default=[], help="knob=value of the search space, repeatable")
    add("--input-len", type=int, default=128, help="prompt tokens (128)")
    add("--output-len", type=int, default=64, help="output tokens (64)")
    add("--concurrency", type=int, default=16, help="closed-loop concurrency (16)")
    add("--requests", type=int, default=200, help="requests per client run (200)")
    add("--repeats", type=int, default=3, help="repeats, order alternating (3)")
    add("--warmup", type=int, default=8, help="our warm-up requests, once, discarded (8)")
    add("--tolerance", type=float, default=0.05, help="PASS if |ratio - 1| <= this (0.05)")
    add("--client-timeout", type=float, default=1800.0, help="seconds per vLLM client call")
    add("--out", type=Path, help="output folder (default results/bench-probe-<timestamp>/)")
    a = p.parse_args()
    if (a.model is None) == (a.endpoint is None):
        p.error("give either --model or --endpoint")
    if a.endpoint and not (a.served_model and a.tokenizer):
        p.error("--endpoint needs --served-model and --tokenizer")
    out = a.out or ROOT / "results" / f"bench-probe-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    doc: Result = {"options": {k: str(v) for k, v in vars(a).items()}, "repeats": []}
    try:
        params, hw = parse_params(a.param), detect_hardware()
        launch = _launch_spec(a.model, "vllm", params, hw) if a.model is not None else None
        server = _server(launch, a.endpoint, a.served_model, out, print)
        with server as (url, name, model_dir, startup, _, _):
            from transformers import AutoTokenizer

            tok_dir = a.tokenizer or model_dir or name
            tok = AutoTokenizer.from_pretrained(tok_dir)
            doc.update(endpoint=url, served_model=name, tokenizer=tok_dir, startup_s=startup)
            print(f"server {url} serving {name}; tokenizer {tok_dir}; output in {out}")
            if a.warmup > 0:
                ours(url, name, tok, a, a.warmup, warm=True)
            for i in range(a.repeats):
                order = ("ours", "vllm") if i % 2 == 0 else ("vllm", "ours")
                rep: Result = {"order": order}
                for who in order:
                    if who == "ours":
                        rep[who] = ours(url, name, tok, a, a.requests, warm=False)
                    else:
                        rep[who] = theirs(url, name, tok_dir, a, out, f"r{i + 1}-vllm")
                doc["repeats"].append(rep)
                show_repeat(i + 1, rep)
                write_atomic(out / "bench.json", json.dumps(doc, indent=2, default=str).encode())
    except (ProbeError, ModelError, EngineStartError) as exc:
        print(f"could not measure: {exc}")
        doc["error"] = str(exc)
    if doc["repeats"]:
        doc["summary"] = summarize_repeats(doc["repeats"], a.tolerance)
    write_atomic(out / "bench.json", json.dumps(doc, indent=2, default=str).encode())
    print(f"\nwrote {out / 'bench.json'}")
    return 1 if "error" in doc else 0


if __name__ == "__main__":
    sys.exit(main())
