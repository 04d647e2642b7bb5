r"""The serving model's prediction against measurement, on configurations it was not fitted on.

One build (the knobs that change kernels or the front end: ``--build k=v``, the rest of the
vLLM CPU space at its baseline) is calibrated on one configuration, measured on two fresh
starts, then every configuration of ``CONFIGS`` (the scheduler knobs across their ranges: batch
limit, token budget, chunked prefill off, a KV cache small enough to preempt) is predicted
first and measured after, each on a fresh start:

1. **Calibration** (the build's defaults for the scheduler knobs): a prefill sweep at
   concurrency 1 (prompts of 16-2,048 tokens, 3 each), then open-loop Poisson points up a
   ladder (x1.5 from ``--start-rate``, ``--calib-span`` seconds of arrivals each) until one
   breaks the SLOs, then bisected as below.
2. **The calibration configuration again**, on a fresh start, at the loads around its first
   start's crossing (``--span`` seconds each), bisected as below: the run-to-run spread of a
   fresh start, measured beside the error. Every request's record of both starts goes to the
   fit (tuner/servemodel/calibrate.py): fresh starts of one configuration differ by up to
   14 % here (a fast AMD box, 2026-12-07), and a model fitted on one start carries that
   start's luck into every prediction, as the tuner's own calibration, over every measured
   trial of a build, does not.
3. **Each configuration**: the model predicts its capacity (tuner/servemodel/predict.py: the
   tuner's estimator and SLO verdict on simulated points); then the engine is started with it,
   warmed up, and measured with autotune's client at 0.85, 1.0 and 1.15 x the predicted rate
   (more points, further out, where those do not bracket the crossing), then bisected until
   the highest load that held and the lowest that broke are within 5 % (a wider bracket reads
   the capacity low: see ``narrow``), ``--span`` seconds of arrivals each. Its measured
   capacity is the same estimator over those points. At every measured load the model is
   also asked for that load's TTFT p99 and TPOT p50.

It prints predicted against measured (capacity, TTFT p99 and TPOT p50 at the measured load
closest under the capacity) with the errors, then the median and worst absolute capacity
error. It measures, it does not assert: exit 0 unless nothing could be measured. Everything,
every point's records included, goes to ``<out>/accuracy.json`` and ``<out>/records/``, so a
changed model can be scored again on the same measurements without an engine:

    .venv/bin/python benchmarks/model_accuracy.py --build cpu_binding=all_cores \
        --build uvicorn_access_log=false --build stream_interval=8
    .venv/bin/python benchmarks/model_accuracy.py --again results/accuracy-<timestamp>

Run it from the repository root on an idle machine (about an hour on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

from probes.client import LoadClient, run_load  # noqa: E402
from probes.metrics import summarize  # noqa: E402
from probes.records import RequestRecord  # noqa: E402
from probes.slo import SLOSet, parse_slos  # noqa: E402
from probes.workload import SyntheticWorkload, parse_workload, prepare_requests  # noqa: E402
from tuner.engines.base import EngineStartError  # noqa: E402
from tuner.engines.hardware import detect_hardware  # noqa: E402
from tuner.engines.models import ModelError, load_tokenizer  # noqa: E402
from tuner.runs.probe_run import ProbeError, _launch_spec, _server, parse_params  # noqa: E402
from tuner.scoring.estimate import Samples, constraints, estimate  # noqa: E402
from tuner.scoring.judge import judge_point, score_window  # noqa: E402
from tuner.servemodel.admission import Replay, fit_admission  # noqa: E402
from tuner.servemodel.calibrate import calibrate  # noqa: E402
from tuner.servemodel.configs import kv_bytes_per_token, sim_knobs  # noqa: E402
from tuner.servemodel.predict import Simulator, predict  # noqa: E402
from tuner.servemodel.scheduler import Knobs  # noqa: E402
from tuner.servemodel.steptime import StepModel  # noqa: E402
from tuner.spaces.space import load_space, space_path  # noqa: E402
from tuner.storage.store import write_atomic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024**2
# The scheduler knobs across their ranges (the build's other knobs stay as --build sets them).
# ``kv_cache_mib`` sets the KV cache in MiB through --kv-cache-memory-bytes (the space's knob is
# whole GiB, too large to run out on this model at these loads).
CONFIGS: list[dict[str, Any]] = [
    {"max_num_seqs": 16},
    {"max_num_seqs": 32},
    {"max_num_seqs": 256},
    {"max_num_batched_tokens": 256, "max_num_seqs": 64},
    {"max_num_batched_tokens": 512},
    {"max_num_batched_tokens": 8192},
    {"enable_chunked_prefill": False, "max_num_batched_tokens": 8192},
    {"kv_cache_mib": 256, "max_num_seqs": 256},
]
VERDICT = {True: "held", False: "broke", None: ""}
PREFILL_PROMPTS = (16, 64, 256, 1024, 2048)
BRACKET = 0.05  # a measured capacity's held and broken loads end within 5 % of each other
MAX_BISECT = 3  # points added to narrow a bracket (x1.5 -> 1.22 -> 1.11 -> 1.05)
Result = dict[str, Any]


def records_of(res_records: list[RequestRecord]) -> list[dict[str, Any]]:
    return [r.to_json() for r in res_records]


def from_json(rows: list[dict[str, Any]]) -> list[RequestRecord]:
    nan = float("nan")
    out = []
    for d in rows:
        d = {k: (nan if v is None and k.startswith("t_") else v) for k, v in d.items()}
        out.append(RequestRecord(**d))
    return out


class Bench:
    def __init__(self, a: argparse.Namespace, out: Path) -> None:
        self.a, self.out = a, out
        self.slos: SLOSet = parse_slos(a.slo)
        wl = parse_workload(a.workload)
        if not isinstance(wl, SyntheticWorkload):
            raise SystemExit("model_accuracy.py: give a synthetic workload")
        self.wl = wl
        self.seeds = random.Random(a.seed)
        self.hw = detect_hardware()
        self.space = load_space(space_path("vllm", self.hw.device))

    # ------------------------------------------------------------ measuring
    def point(
        self,
        url: str,
        name: str,
        tok: Any,
        x: float,
        n: int,
        wl: Any = None,
        concurrency: int | None = None,
    ) -> list[RequestRecord]:
        reqs = prepare_requests(
            wl or self.wl, n, model=name, tokenizer=tok, seed=self.seeds.randrange(1, 2**31)
        )
        if concurrency is not None:
            return run_load(LoadClient(url), reqs, concurrency=concurrency).records
        return run_load(LoadClient(url), reqs, rate_rps=x, seed=self.seeds.randrange(2**31)).records

    def judged(self, x: float, recs: list[RequestRecord]) -> tuple[bool, Samples, Any]:
        m = summarize(recs, self.slos)
        j = judge_point(m, recs, "rate", self.slos, self.a.max_error_rate)
        return (
            j.verdict.holds,
            Samples.from_records(x, j.records, score_window("rate", x, len(recs), m)),
            m,
        )

    def launch(self, params: dict[str, Any]) -> Any:
        extra = dict(params)
        mib = extra.pop("kv_cache_mib", None)
        launch = _launch_spec(self.a.model, "vllm", extra, self.hw)
        if mib is not None:
            engine, path, spec = launch
            # without the GiB variable, vLLM takes the bytes given
            env = {k: v for k, v in spec.env.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
            argv = [*spec.argv, "--kv-cache-memory-bytes", str(int(mib) * MIB)]
            launch = (engine, path, replace(spec, argv=argv, env=env))
        return launch

    def knobs(self, params: dict[str, Any], model_dir: str) -> Knobs:
        extra = dict(params)
        mib = extra.pop("kv_cache_mib", None)
        per_token = kv_bytes_per_token(model_dir, extra.get("kv_cache_dtype"))
        k = sim_knobs(extra, self.space, per_token)
        if mib is not None and per_token:
            k = replace(k, kv_blocks=int(mib) * MIB // (per_token * k.block_size))
        return k

    def measure(self, label: str, params: dict[str, Any], plan: Any) -> Result:
        """Start ``params``, warm up, and measure the points ``plan(url, name, tok)`` asks."""
        d = self.out / "records" / label
        d.mkdir(parents=True, exist_ok=True)
        launch = self.launch(params)
        print(f"\n== {label}: {params or 'the build defaults'}", flush=True)
        with _server(launch, None, None, d, print) as (url, name, model_dir, startup, _, _):
            tok = load_tokenizer(model_dir or name)
            self.point(url, name, tok, 0, 16, concurrency=4)  # warm-up, thrown away
            res: Result = {
                "label": label,
                "params": params,
                "startup_s": startup,
                "model_dir": model_dir,
                "points": [],
            }
            plan(res, lambda x, n, **kw: self.point(url, name, tok, x, n, **kw), d)
        return res


def save_point(
    res: Result, d: Path, kind: str, x: float, recs: list[RequestRecord], holds: bool | None, m: Any
) -> None:
    f = d / f"{kind}-{len(res['points'])}.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in records_of(recs)))
    res["points"].append({
        "kind": kind, "load": x, "file": str(f), "holds": holds, "n": len(recs),
        "ttft_ms_p99": m.ttft_ms.p99, "tpot_ms_p50": m.tpot_ms.p50,
        "output_tokens_per_s": m.output_tokens_per_s,
    })  # fmt: skip
    print(
        f"  {kind} {x:6.2f}: n={len(recs):4d} ttft p99 {m.ttft_ms.p99 or 0:7.0f} ms, "
        f"tpot p50 {m.tpot_ms.p50 or 0:6.1f} ms, {VERDICT[holds]}",
        flush=True,
    )


def load_points(res: Result, kind: str | None = None) -> list[tuple[float, list[RequestRecord]]]:
    out = []
    for p in res["points"]:
        if kind is None or p["kind"] == kind:
            rows = [json.loads(line) for line in Path(p["file"]).read_text().splitlines() if line]
            out.append((p["load"], from_json(rows)))
    return out


def measured_capacity(b: Bench, res: Result) -> Result | None:
    samples = [b.judged(x, recs)[1] for x, recs in load_points(res, "rate")]
    est = estimate(samples, constraints(b.slos, b.a.max_error_rate), resamples=100)
    if est is None:
        return None
    return {
        "load": est.load,
        "tokens_per_s": est.tokens_per_s,
        "low": est.low,
        "high": est.high,
        "censored": est.censored,
    }


def calibration_plan(b: Bench) -> Any:
    def plan(res: Result, point: Any, d: Path) -> None:
        for n_in in PREFILL_PROMPTS:
            wl = SyntheticWorkload(input_len=n_in, output_len=8)
            recs = point(0, 3, wl=wl, concurrency=1)
            save_point(res, d, "prefill", float(n_in), recs, None, summarize(recs))
        x = b.a.start_rate
        for _ in range(12):
            if not rate_point(b, res, point, d, x, b.a.calib_span):
                break
            x *= 1.5
        narrow(b, res, point, d, b.a.calib_span)

    return plan


def test_plan(b: Bench, predicted_rate: float) -> Any:
    def plan(res: Result, point: Any, d: Path) -> None:
        for f in (0.85, 1.0, 1.15, 1.35, 1.6, 0.65, 0.45):
            loads = [p["load"] for p in res["points"]]
            held = [p["load"] for p in res["points"] if p["holds"]]
            broke = [p["load"] for p in res["points"] if not p["holds"]]
            if len(loads) >= 3 and held and broke and max(held) < min(broke):
                break
            if f > 1.15 and not (len(loads) >= 3 and not broke):
                continue
            if f < 0.85 and held:
                continue
            x = predicted_rate * f
            rate_point(b, res, point, d, x, b.a.span)
        narrow(b, res, point, d, b.a.span)

    return plan


def again_plan(b: Bench, loads: list[float]) -> Any:
    def plan(res: Result, point: Any, d: Path) -> None:
        for x in loads:
            rate_point(b, res, point, d, x, b.a.span)
        narrow(b, res, point, d, b.a.span)

    return plan


def rate_point(b: Bench, res: Result, point: Any, d: Path, x: float, span: float) -> bool:
    """Measure one open-loop point at ``x`` requests/s (``span`` seconds of arrivals, at
    least 60 requests), judge it and save it in ``res``; whether it held."""
    recs = point(x, max(60, round(x * span)))
    holds, _, m = b.judged(x, recs)
    save_point(res, d, "rate", x, recs, holds, m)
    return holds


def bracket(res: Result) -> tuple[float, float] | None:
    """The highest load that held under the lowest that broke, and that lowest (None until
    one held below one that broke)."""
    rate = [p for p in res["points"] if p["kind"] == "rate"]
    broke = [p["load"] for p in rate if p["holds"] is False]
    if not broke:
        return None
    held = [p["load"] for p in rate if p["holds"] and p["load"] < min(broke)]
    return (max(held), min(broke)) if held else None


def narrow(b: Bench, res: Result, point: Any, d: Path, span: float) -> None:
    """Bisect the measured bracket (geometric midpoints) until its loads are within
    ``BRACKET`` of each other, at most ``MAX_BISECT`` points. A latency that turns up sharply
    at saturation makes the estimator's straight line between a point well under the limit
    and one far over it cross early: a wide bracket reads the capacity low, where the model's
    own search brackets its crossing within 2 %."""
    for _ in range(MAX_BISECT):
        br = bracket(res)
        if br is None or br[1] <= br[0] * (1.0 + BRACKET):
            return
        rate_point(b, res, point, d, (br[0] * br[1]) ** 0.5, span)


# ------------------------------------------------------------ the model's side
def fit(b: Bench, *calibs: Result) -> StepModel:
    """The step model of the calibration configuration's points (from each of its starts),
    with the front end's admission delay fitted on their open-loop points as the tuner fits
    it (the prefill sweep's lone requests find nothing running)."""
    step = calibrate([recs for c in calibs for _, recs in load_points(c)])
    knobs = b.knobs(calibs[0]["params"], calibs[0]["model_dir"])
    replays = [Replay(recs, knobs) for c in calibs for _, recs in load_points(c, "rate")]
    return step.model_copy(update={"admit_per_seq_s": fit_admission([(step, replays)])})


def calibrations(doc: Result) -> list[Result]:
    """The calibration configuration's starts in ``doc`` (the model is fitted on them all)."""
    return [r for r in doc["configs"] if r.get("role") in ("calibration", "again")]


def model_side(b: Bench, step: StepModel, res: Result) -> Result:
    knobs = b.knobs(res["params"], res["model_dir"])
    lengths = b.wl.lengths
    mean = (float(b.wl.input_len), float(b.wl.output_len))
    pred = predict(
        step, knobs, lengths, b.slos, b.a.max_error_rate, "rate", mean_lengths=mean, seed=7
    )
    sim = Simulator(step, knobs, lengths, b.slos, b.a.max_error_rate, "rate", seed=11)
    at = {p["load"]: sim.point(p["load"]) for p in res["points"] if p["kind"] == "rate"}
    return {
        "capacity": {
            "load": pred.load,
            "tokens_per_s": pred.tokens_per_s,
            "low": pred.low,
            "high": pred.high,
            "censored": pred.censored,
        },
        "at_loads": {
            str(x): {"ttft_ms_p99": q.ttft_ms_p99, "tpot_ms_p50": q.tpot_ms_p50, "holds": q.holds}
            for x, q in at.items()
        },
    }


def err(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or meas == 0:
        return None
    return pred / meas - 1.0


def table(b: Bench, doc: Result) -> None:
    step = StepModel(**doc["step_model"])
    print(f"\nstep model: {step}")
    print(
        f"\n{'config':<44} {'pred rps':>8} {'meas rps':>8} {'err':>7}  "
        f"{'ttft p99 pred/meas':>20} {'tpot p50 pred/meas':>20}"
    )
    cap_errs: list[float] = []
    ttft_errs: list[float] = []
    tpot_errs: list[float] = []
    for res in doc["configs"]:
        ms = res.get("measured") or {}
        side = model_side(b, step, res)
        res["predicted"] = side
        pc, mc = side["capacity"], ms
        e = err(pc.get("tokens_per_s"), mc.get("tokens_per_s"))
        # the measured load closest under the measured capacity (or the highest that held)
        rate_pts = [p for p in res["points"] if p["kind"] == "rate"]
        under = [p for p in rate_pts if p["holds"]]
        ref = max(under, key=lambda p: p["load"]) if under else None
        t_e = p_e = None
        cell_t = cell_p = "-"
        if ref is not None:
            q = side["at_loads"][str(ref["load"])]
            t_e, p_e = (
                err(q["ttft_ms_p99"], ref["ttft_ms_p99"]),
                err(q["tpot_ms_p50"], ref["tpot_ms_p50"]),
            )
            cell_t = f"{q['ttft_ms_p99']:.0f}/{ref['ttft_ms_p99']:.0f}"
            cell_p = f"{q['tpot_ms_p50']:.1f}/{ref['tpot_ms_p50']:.1f}"
        label = json.dumps(res["params"])[:44]
        print(
            f"{label:<44} {pc.get('load') or 0:8.2f} {mc.get('load') or 0:8.2f} "
            f"{'-' if e is None else f'{e:+.1%}':>7}  {cell_t:>20} {cell_p:>20}"
            + ("" if mc.get("censored") == "none" else f"  (measured: {mc.get('censored')})")
        )
        if res.get("role") == "test":
            for xs, v in ((cap_errs, e), (ttft_errs, t_e), (tpot_errs, p_e)):
                if v is not None:
                    xs.append(abs(v))
    for name, xs in (("capacity", cap_errs), ("TTFT p99", ttft_errs), ("TPOT p50", tpot_errs)):
        if xs:
            print(
                f"{name} error over {len(xs)} unseen configurations: median "
                f"{statistics.median(xs):.1%}, worst {max(xs):.1%}"
            )
    doc["summary"] = {
        "capacity_median": statistics.median(cap_errs) if cap_errs else None,
        "capacity_worst": max(cap_errs) if cap_errs else None,
        "ttft_median": statistics.median(ttft_errs) if ttft_errs else None,
        "tpot_median": statistics.median(tpot_errs) if tpot_errs else None,
        "n": len(cap_errs),
    }
    rr = [r for r in doc["configs"] if r.get("role") in ("calibration", "again")]
    if len(rr) == 2 and all((r.get("measured") or {}).get("tokens_per_s") for r in rr):
        a_, b_ = (r["measured"]["tokens_per_s"] for r in rr)
        doc["summary"]["run_to_run"] = b_ / a_ - 1.0
        print(
            f"the calibration configuration on a fresh start: {b_ / a_ - 1.0:+.1%} "
            "(run-to-run spread of a fresh start)"
        )


def bench_options(doc: str | None) -> argparse.ArgumentParser:
    """The options every benchmark built on ``Bench`` takes (the model, SLOs, workload,
    error limit and the build its configurations share)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    add = p.add_argument
    add("--model", default="smollm2-135m")
    add("--slo", action="append", default=None, help="as autotune's --slo (ttft=2s)")
    add("--workload", default="synthetic:input=128,output=64")
    add("--max-error-rate", type=float, default=0.01)
    add("--build", action="append", default=[], help="knob=value shared by every config")
    return p


def main() -> int:
    p = bench_options(__doc__)
    add = p.add_argument
    add("--configs", type=int, default=len(CONFIGS), help="the first N of CONFIGS")
    add("--start-rate", type=float, default=2.0, help="the calibration ladder's first rate")
    add("--calib-span", type=float, default=25.0, help="seconds of arrivals per ladder point")
    add("--span", type=float, default=45.0, help="seconds of arrivals per measured point")
    add("--seed", type=int, default=int(time.time()))
    add("--again", type=Path, help="score a finished run's measurements again (no engine)")
    add("--out", type=Path)
    a = p.parse_args()
    a.slo = a.slo or ["ttft=2s"]
    if a.again:
        done: Result = json.loads((a.again / "accuracy.json").read_text())
        for k in ("slo", "workload", "max_error_rate"):
            setattr(a, k, done["options"][k])
        b = Bench(a, a.again)
        for res in done["configs"]:  # the estimator as it is now, on the same records
            res["measured"] = measured_capacity(b, res)
        done["step_model"] = fit(b, *calibrations(done)).model_dump()
        table(b, done)
        write_atomic(a.again / "accuracy-again.json", json.dumps(done, indent=2).encode())
        return 0
    out = a.out or ROOT / "results" / f"accuracy-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    b = Bench(a, out)
    build = parse_params(a.build)
    doc: Result = {
        "options": {
            "slo": a.slo,
            "workload": a.workload,
            "max_error_rate": a.max_error_rate,
            "build": build,
            "seed": a.seed,
        },
        "machine": b.hw.model_dump(),
        "configs": [],
    }

    def save() -> None:
        write_atomic(out / "accuracy.json", json.dumps(doc, indent=2, default=str).encode())

    try:
        calib = b.measure("calibration", dict(build), calibration_plan(b))
        calib["role"] = "calibration"
        calib["measured"] = measured_capacity(b, calib)
        doc["configs"].append(calib)
        save()
        br = bracket(calib)
        rate_loads = sorted({p["load"] for p in calib["points"] if p["kind"] == "rate"})
        loads = rate_loads[-3:] if br is None else [x for x in rate_loads if x <= br[1]][-3:]
        res = b.measure("calibration-again", dict(build), again_plan(b, loads))
        res["role"] = "again"
        res["measured"] = measured_capacity(b, res)
        doc["configs"].append(res)
        step = fit(b, calib, res)
        doc["step_model"] = step.model_dump()
        print(f"fitted: {step}")
        save()
        for i, cfg in enumerate(CONFIGS[: a.configs]):
            params = {**build, **cfg}
            side = model_side(
                b, step, {"params": params, "model_dir": calib["model_dir"], "points": []}
            )
            rate = side["capacity"]["load"] or a.start_rate
            print(f"predicted {rate:.2f} req/s ({side['capacity']['tokens_per_s']:.0f} tok/s)")
            res = b.measure(f"c{i + 1}", params, test_plan(b, rate))
            res["role"] = "test"
            res["measured"] = measured_capacity(b, res)
            doc["configs"].append(res)
            save()
    except (ProbeError, ModelError, EngineStartError) as exc:
        print(f"could not measure: {exc}")
        doc["error"] = str(exc)
    save()
    if len(doc["configs"]) > 1:
        table(b, doc)
        save()
    print(f"\nwrote {out / 'accuracy.json'}")
    return 1 if len(doc["configs"]) < 2 else 0


if __name__ == "__main__":
    sys.exit(main())
