"""vLLM's own benchmark client, as the benchmark scripts call it: the load models and one call.

Shared by every script that measures with vLLM's client (benchmarks/ is not a package: the
scripts put this folder on ``sys.path``). It owns:

- the two load models (``LoadModel``, ``LOAD_MODELS``): a closed loop of N clients
  (``vllm bench serve --max-concurrency N``) and open-loop Poisson arrivals at R requests/s
  (``--request-rate R``; vLLM's default burstiness 1.0 is a Poisson process);
- one client call (``VLLMClient.run``): random prompts of the workload's input/output lengths,
  uniform over +-spread (``--random-range-ratio``), ``--ignore-eos``, a fresh random seed on
  every call so that vLLM's prefix cache cannot serve repeated prompts and flatter TTFT (or a
  dataset of the caller's: ``dataset_args``), and its CPU use (user + system over its wall
  time, 100 % = one core), printed beside its point: on 2 cores the client competes with the
  engine it measures;
- the verdict of a point: every SLO of the report (``pP_<metric>_ms`` of vLLM's result <= its
  limit) and the error rate (failed / sent) <= the report's ``max_error_rate``;
- a run's report read (``read_report``) and one point's row (``HEADER``, ``show_point``).

The capacity search over such calls is benchmarks/sweep.py's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import sample_rule  # noqa: E402

CLIENT = ROOT / "benchmarks" / "vllm_client.py"
METRIC_KEY = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2e": "e2el"}
Result = dict[str, Any]


def fmt(v: Any, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


@dataclass(frozen=True)
class LoadModel:
    """How a load is given to vLLM's client, rounded, and sized by default."""

    name: str  # "concurrency" | "rate", as report["load"]["model"] names it
    key: str  # the key of a load dict: {"concurrency": N} or {"rate_rps": R}
    unit: str
    flag: str  # vLLM's client option
    ladder: tuple[float, ...]
    min_prompts: int
    prompts_per_load: float  # concurrency: prompts per client; rate: seconds of arrivals

    def rounded(self, x: float) -> float:
        """Whole numbers for concurrency (at least 1), 3 significant figures for rates."""
        if self.name == "concurrency":
            return max(1, round(x))
        return float(f"{x:.3g}")

    def show(self, x: float | None) -> str:
        if x is None:
            return "-"
        return f"{int(x)}" if self.name == "concurrency" else f"{x:g}"

    def load(self, x: float) -> Result:
        return {self.key: int(x) if self.name == "concurrency" else x}


LOAD_MODELS = {
    "concurrency": LoadModel(
        "concurrency", "concurrency", "concurrent requests", "--max-concurrency",
        (4, 8, 12, 16, 20, 24, 32, 48, 64), min_prompts=100, prompts_per_load=4,
    ),
    # Output of 180-330 tok/s with 64-token outputs is about 3-5 requests/s on a 2-core machine
    # (up to ~9 with both cores and compilation, ENVIRONMENT.md).
    "rate": LoadModel(
        "rate", "rate_rps", "requests/s", "--request-rate",
        (1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 8), min_prompts=50, prompts_per_load=25,
    ),
}  # fmt: skip


def read_report(p: argparse.ArgumentParser, path: Path) -> Result:
    """A finished run's report, from its report.json or its run folder; a path that is
    neither, or a file that is not JSON, ends the script with one line (``p.error``)."""
    file = path / "report.json" if path.is_dir() else path
    try:
        report = json.loads(file.read_text())
    except (OSError, ValueError) as e:
        p.error(f"{path}: not an autotune report.json or run folder ({e})")
    if not isinstance(report, dict):
        p.error(f"{path}: not an autotune report.json")
    return report


def report_load_model(report: Result) -> str:
    """The report's load model; reports written before it was recorded are closed loop."""
    return str((report.get("load") or {}).get("model") or "concurrency")


def model_of(load: Result) -> tuple[LoadModel, float]:
    """The load model and value of a load dict such as ``recommended["load"]``."""
    if "rate_rps" in load:
        return LOAD_MODELS["rate"], float(load["rate_rps"])
    return LOAD_MODELS["concurrency"], float(load["concurrency"])


class VLLMClient:
    """vLLM's ``vllm bench serve`` (through benchmarks/vllm_client.py) for one workload and SLOs.

    Args:
        tokenizer: the model folder (vLLM's client counts prompt tokens with it).
        input_len, output_len, spread: the synthetic workload; lengths are uniform over
            ``len x (1 +- spread)`` (vLLM's ``--random-range-ratio``, in [0, 1)).
        slos: ``[{"metric", "percentile", "limit_ms"}]`` as report.json has them.
        max_error_rate: the highest share of failed requests a point may have.
        timeout_s: the most one client call may take.
    """

    def __init__(
        self,
        *,
        tokenizer: str,
        input_len: int,
        output_len: int,
        spread: float = 0.0,
        slos: list[Result],
        max_error_rate: float = 0.01,
        timeout_s: float = 1800.0,
    ) -> None:
        if not 0.0 <= spread < 1.0:
            raise ValueError(
                f"spread must be in [0, 1) (vLLM's --random-range-ratio), got {spread}"
            )
        self.tokenizer, self.input_len, self.output_len = tokenizer, input_len, output_len
        self.spread, self.slos, self.max_err, self.timeout_s = (
            spread,
            slos,
            max_error_rate,
            timeout_s,
        )
        self.pcts = sorted({50, 90, 95, 99} | {int(s["percentile"]) for s in slos})
        self.rng = random.SystemRandom()

    @classmethod
    def from_report(cls, report: Result, timeout_s: float = 1800.0) -> VLLMClient:
        wl = report["workload"]
        return cls(
            tokenizer=report["model_path"],
            input_len=int(wl["input_len"]),
            output_len=int(wl["output_len"]),
            spread=float(wl.get("spread") or 0.0),
            slos=list(report["slo"]),
            max_error_rate=float(report.get("max_error_rate", 0.01)),
            timeout_s=timeout_s,
        )

    def describe(self) -> str:
        slos = ", ".join(
            f"p{s['percentile']} {s['metric']}<={s['limit_ms']:g}ms" for s in self.slos
        )
        return (
            f"{self.input_len} in / {self.output_len} out tokens, spread +-{self.spread:g};"
            f" SLOs {slos}; error rate <= {self.max_err:.1%}"
        )

    def dataset_args(self, n: int, seed: int, d: Path, name: str) -> list[str]:
        """What vLLM's client sends in a call of ``n`` prompts: random prompts of the workload's
        lengths (a subclass may send another dataset: benchmarks/held_out.py)."""
        return [
            "--dataset-name",
            "random",
            "--random-input-len",
            str(self.input_len),
            "--random-output-len",
            str(self.output_len),
            "--random-range-ratio",
            f"{self.spread:g}",
        ]

    def run(self, url: str, model: str, load: Result, n: int, d: Path, name: str) -> Result:
        """One call of vLLM's client at ``load`` ({"concurrency": N} or {"rate_rps": R}).

        Returns vLLM's JSON result without its per-request lists (they stay in
        ``d/<name>.json``), plus seed, rc, wall_s and the client's own CPU use; ``error`` where
        the client gave no result.
        """
        lm, x = model_of(load)
        seed = self.rng.randrange(1, 2**31)
        cmd = [sys.executable, str(CLIENT), "--base-url", url, "--model", model]
        cmd += ["--tokenizer", self.tokenizer, "--ignore-eos", "--num-prompts", str(n)]
        d.mkdir(parents=True, exist_ok=True)
        cmd += self.dataset_args(n, seed, d, name)
        cmd += ["--seed", str(seed), "--percentile-metrics", "ttft,tpot,itl,e2el"]
        cmd += ["--metric-percentiles", ",".join(map(str, self.pcts)), "--disable-tqdm"]
        cmd += ["--save-result", "--save-detailed", "--result-dir", str(d)]
        cmd += ["--result-filename", f"{name}.json"]
        cmd += [lm.flag, lm.show(x)]
        # The server is not reaped while the client runs, so the change in the children's
        # rusage is the client's own CPU time (its subprocesses included).
        ru0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.monotonic()
        rc: int | None = None
        with open(d / f"{name}.log", "wb") as log, contextlib.suppress(subprocess.TimeoutExpired):
            kw: Result = {"stdout": log, "stderr": subprocess.STDOUT, "cwd": ROOT}
            rc = subprocess.run(cmd, timeout=self.timeout_s, **kw).returncode
        wall, ru1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
        res: Result = {}
        with contextlib.suppress(OSError, ValueError):
            raw = json.loads((d / f"{name}.json").read_text())
            res = {k: v for k, v in raw.items() if not isinstance(v, list)}
            res["samples"] = sample_rule.count(raw, self.slos)  # per SLO: n, over, needed
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


HEADER = "  {:>7} {:>6} {:>5} {:>4} {:>6} {:>8} {:>7} {:>7} {:>7} {:>5}  verdict".format(
    "", "load", "done", "fail", "req/s", "tok/s", "p50ttft", "p99ttft", "p50tpot", "cpu%"
)


def show_point(
    label: str, load: str, res: Result, broken: list[str], verdict: str = "held"
) -> None:
    """One row under HEADER: what vLLM's client measured at one load; ``verdict`` where
    nothing broke (a point judged by no SLO says so)."""
    print(
        f"  {label:>7} {load:>6} {fmt(res.get('completed'), 'd'):>5}"
        f" {fmt(res.get('failed'), 'd'):>4} {fmt(res.get('request_throughput'), '.2f'):>6}"
        f" {fmt(res.get('output_throughput'), '.1f'):>8} {fmt(res.get('median_ttft_ms')):>7}"
        f" {fmt(res.get('p99_ttft_ms')):>7} {fmt(res.get('median_tpot_ms'), '.1f'):>7}"
        f" {fmt(res.get('client_cpu_pct')):>5}  {'; '.join(broken) or verdict}",
        flush=True,
    )
