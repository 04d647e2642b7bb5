"""The figures of a report, computed once from report.json's model: what report.html plots.

Renderers draw these and compute nothing. Every number comes from the run's measured points
(each trial's search points, side-by-side repeats included, and the confirmations), its
capacity estimates and its probe:

- ``points``: every measured load point, with output tokens/s, TTFT and TPOT at the
  percentiles the SLOs name (p99 where an SLO names none), and tokens/s per user
  (1000 / TPOT p50, the field's interactivity figure); ``front_ttft`` / ``front_tpot`` mark
  the Pareto front (no other point has more tokens/s at a lower latency).
- ``curves``: load against latency per configuration, with its fitted capacity.
- ``waterfall``: baseline, the configuration carried out of each stage, the confirmation.
- ``probe``: TTFT against prompt length with the prefill fit, decoding against concurrency,
  the roofline figures and the verdict.
- ``rows``: the trials table.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from probes.diagnose import prefill_fit
from probes.metrics import Dist, LoadMetrics
from tuner.report.held_out_view import HeldOutView, held_out_view
from tuner.report.objective_view import RobustView, robust_view
from tuner.report.prediction_view import PredictionView, prediction_view
from tuner.report.schema import Recommendation, Report, TrialReport
from tuner.report.waterfall import Step, waterfall_steps, where_confirmed


class View(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Point(View):
    trial: int
    label: str  # "baseline", "trial 3", "trial 3 (confirmation)"
    load: float
    tokens_per_s: float
    ttft_ms: float | None  # at ReportView.ttft_percentile
    tpot_ms: float | None  # at ReportView.tpot_percentile
    tpot_p50_ms: float | None
    per_user_tokens_per_s: float | None  # 1000 / TPOT p50
    n_requests: int
    held: bool  # every SLO held and the error rate was under its limit
    confirmation: bool = False
    front_ttft: bool = False
    front_tpot: bool = False


class Curve(View):
    trial: int
    label: str
    loads: list[float]
    ttft_p50: list[float | None]
    ttft_p99: list[float | None]
    tpot_p50: list[float | None]
    tpot_p99: list[float | None]
    capacity: float | None  # the fitted capacity (load units), where the estimate has one
    capacity_censored: str | None = None


class ProbeView(View):
    summary: str
    prompt_tokens: list[int]
    ttft_p50: list[float | None]
    fit_ttft: list[float] | None  # the least-squares line at each prompt length
    prefill_tokens_per_s: float | None
    concurrency: list[int]
    tpot_p50: list[float | None]
    decode_tokens_per_s: list[float]
    figures: list[tuple[str, str]]  # roofline and split, as (name, value)
    stages: list[tuple[str, str, str]]  # (stage, expected, why)


class Row(View):
    number: int
    stage: str
    params: str
    status: str
    reason: str
    score: float | None
    load: float | None
    quality: str
    speculative: str
    recommended: bool


class ReportView(View):
    title: str
    machine: str
    engine: str
    load_axis: str  # "rate_rps" or "concurrency"
    load_label: str  # "requests/s (Poisson arrivals)" or "concurrency (closed loop)"
    headline: str
    verdict: str
    slos: list[tuple[str, int, float]]  # (metric, percentile, limit ms)
    ttft_percentile: int
    tpot_percentile: int
    ttft_limit_ms: float | None
    tpot_limit_ms: float | None
    points: list[Point]
    recommended: Point | None
    baseline: Point | None  # the baseline's confirmation, else its point closest under capacity
    curves: list[Curve]
    waterfall: list[Step]
    probe: ProbeView | None
    rows: list[Row]
    files: list[str]  # the export files beside the report
    predictions: PredictionView | None = None  # the serving model against measurement
    held_out: HeldOutView | None = None  # --check-workload: on workloads it was not tuned for
    robust: RobustView | None = None  # --objective robust: ranked by the worst gain


def pareto(pairs: list[tuple[float, float | None]]) -> list[bool]:
    """For (tokens/s, latency) pairs: whether each is on the front, where no other pair has at
    least its tokens/s at a lower latency or more tokens/s at no higher latency."""
    out = []
    for i, (tok, lat) in enumerate(pairs):
        if lat is None:
            out.append(False)
            continue
        beaten = any(
            j != i
            and other is not None
            and ((t >= tok and other < lat) or (t > tok and other <= lat))
            for j, (t, other) in enumerate(pairs)
        )
        out.append(not beaten)
    return out


def _percentile(r: Report, metric: str) -> tuple[int, float | None]:
    slo = next((s for s in r.slo if s.metric == metric), None)
    return (slo.percentile, slo.limit_ms) if slo else (99, None)


def _at(d: Dist, percentile: int) -> float | None:
    return d.at(percentile)


def _label(t: TrialReport) -> str:
    return "baseline" if t.number == 0 else f"trial {t.number}"


def _point(
    number: int, label: str, load: float, m: LoadMetrics, held: bool, pt: int, pp: int
) -> Point:
    p50 = m.tpot_ms.p50
    return Point(
        trial=number,
        label=label,
        load=load,
        tokens_per_s=m.output_tokens_per_s,
        ttft_ms=_at(m.ttft_ms, pt),
        tpot_ms=_at(m.tpot_ms, pp),
        tpot_p50_ms=p50,
        per_user_tokens_per_s=1000.0 / p50 if p50 else None,
        n_requests=m.n_requests,
        held=held,
    )


def _confirmation(r: Recommendation, label: str, pt: int, pp: int) -> Point:
    load = next(iter(r.load.values()))
    p = _point(r.from_trial, label, load, r.metrics, r.verdict.holds, pt, pp)
    return p.model_copy(update={"confirmation": True})


def _curve(t: TrialReport) -> Curve:
    pts = sorted(t.points, key=lambda p: next(iter(p.load.values())))
    est = t.estimate
    return Curve(
        trial=t.number,
        label=_label(t),
        loads=[next(iter(p.load.values())) for p in pts],
        ttft_p50=[p.metrics.ttft_ms.p50 for p in pts],
        ttft_p99=[p.metrics.ttft_ms.p99 for p in pts],
        tpot_p50=[p.metrics.tpot_ms.p50 for p in pts],
        tpot_p99=[p.metrics.tpot_ms.p99 for p in pts],
        capacity=est.load if est else None,
        capacity_censored=est.censored if est else None,
    )


def _probe(r: Report) -> ProbeView | None:
    d = r.probe
    if d is None:
        return None
    v = d.verdict
    fit = prefill_fit(d.prefill_sweep)
    figures: list[tuple[str, str]] = [
        ("bottleneck", v.bottleneck),
        ("prefill / decode", f"{v.prefill_share:.0%} / {v.decode_share:.0%} ({v.split_source})"),
    ]
    if d.prefill_rate_tokens_per_s:
        figures.append(("prefill rate", f"{d.prefill_rate_tokens_per_s:.0f} prompt tokens/s"))
    if d.model:
        figures.append(("parameters", f"{d.model.parameters / 1e6:.0f} M ({d.model.dtype})"))
        figures.append(("weights read per step", f"{d.model.weight_bytes / 1e6:.0f} MB"))
    if d.device:
        figures.append(("copy bandwidth", f"{d.device.memory_bandwidth_gbps:.1f} GB/s"))
        figures.append(
            (f"{d.device.matmul_dtype} matmul", f"{d.device.matmul_tflops * 1000:.0f} GFLOP/s")
        )
        if d.device.fp32_matmul_tflops is not None:
            figures.append(("float32 matmul", f"{d.device.fp32_matmul_tflops * 1000:.0f} GFLOP/s"))
    if v.decode_floor_ms is not None:
        figures.append(("decode floor (weights / bandwidth)", f"{v.decode_floor_ms:.2f} ms/step"))
    if d.llc_bytes:
        figures.append(("last-level cache", f"{d.llc_bytes / 2**20:.0f} MiB"))
    if v.batching_gain is not None:
        figures.append(("batching gain (largest c / c=1)", f"{v.batching_gain:.2f}x"))
    return ProbeView(
        summary=v.summary,
        prompt_tokens=[p.prompt_tokens for p in d.prefill_sweep],
        ttft_p50=[p.ttft_ms_p50 for p in d.prefill_sweep],
        fit_ttft=[fit[0] + fit[1] * p.prompt_tokens for p in d.prefill_sweep] if fit else None,
        prefill_tokens_per_s=d.prefill_rate_tokens_per_s,
        concurrency=[p.concurrency for p in d.decode_sweep],
        tpot_p50=[p.tpot_ms_p50 for p in d.decode_sweep],
        decode_tokens_per_s=[p.output_tokens_per_s for p in d.decode_sweep],
        figures=figures,
        stages=[(s.name, s.expected, s.reason) for s in v.stages],
    )


def _params(t: TrialReport, defaults: dict[str, Any]) -> str:
    changed = {k: v for k, v in t.params.items() if defaults.get(k, object()) != v}
    return ", ".join(f"{k}={v}" for k, v in changed.items()) or "defaults"


def _row(t: TrialReport, r: Report) -> Row:
    q = t.quality
    spec = ""
    m = t.metrics
    if m is not None and m.acceptance_rate is not None:
        spec = f"accepted {m.acceptance_rate:.0%}"
    if t.exactness is not None and t.exactness.checked:
        same = "identical outputs" if t.exactness.identical else "outputs changed"
        spec = f"{spec}, {same}" if spec else same
    return Row(
        number=t.number,
        stage=t.stage,
        params="the baseline" if t.number == 0 else _params(t, r.knob_defaults),
        status=t.status if not t.rejected else f"{t.status}, barred",
        reason=t.rejected or t.error or "",
        score=t.score_tokens_per_s,
        load=t.estimate.load if t.estimate else None,
        quality=(f"{q.metric} {q.degradation_pct:+.2f} %" if q else ""),
        speculative=spec,
        recommended=(r.recommended.from_trial if r.recommended else _best(r)) == t.number,
    )


def _best(r: Report) -> int | None:
    return r.rescored.best_trial if r.rescored else None


def build(r: Report, files: list[str] | None = None) -> ReportView:
    """The page's figures for ``r``."""
    pt, ttft_limit = _percentile(r, "ttft")
    pp, tpot_limit = _percentile(r, "tpot")
    trials = [r.baseline, *r.trials] if r.baseline else list(r.trials)
    points: list[Point] = []
    for t in trials:
        for p in t.points:
            load = next(iter(p.load.values()))
            points.append(_point(t.number, _label(t), load, p.metrics, p.verdict.holds, pt, pp))
    rec = r.recommended
    rec_point = (
        _confirmation(rec, f"trial {rec.from_trial} (confirmation)", pt, pp) if rec else None
    )
    bc = r.baseline_confirmation
    base_point = _confirmation(bc, "baseline (confirmation)", pt, pp) if bc else None
    everything = [*points, *(x for x in (rec_point, base_point) if x is not None)]
    for key, flag in (("ttft_ms", "front_ttft"), ("tpot_ms", "front_tpot")):
        front = pareto([(x.tokens_per_s, getattr(x, key)) for x in everything])
        for x, on in zip(everything, front, strict=True):
            setattr(x, flag, on)
    axis = "rate_rps" if r.load.get("model", "concurrency") == "rate" else "concurrency"
    slos = [(s.metric, s.percentile, s.limit_ms) for s in r.slo]
    if rec is not None:
        m = rec.metrics
        load = next(iter(rec.load.values()))
        unit = "req/s" if axis == "rate_rps" else "concurrent requests"
        gain = f", {rec.gain_vs_baseline:.2f}x the baseline" if rec.gain_vs_baseline else ""
        who = (
            "the baseline (the engine's defaults)"
            if rec.from_trial == 0
            else f"trial {rec.from_trial}"
        )
        headline = (
            f"{who}: {m.output_tokens_per_s:.0f} output tok/s at "
            f"{load:.3g} {unit}{gain}; TTFT p{pt} {_fmt(_at(m.ttft_ms, pt))}, "
            f"time per token p{pp} {_fmt(_at(m.tpot_ms, pp))}"
        )
        verdict = (
            f"meets every SLO (confirmed on {where_confirmed(rec)})"
            if rec.meets_slo
            else "does NOT meet every SLO with the headroom asked, or had too few requests"
        )
    elif r.rescored is not None:
        rs = r.rescored
        name = "the baseline" if rs.best_trial == 0 else f"trial {rs.best_trial}"
        at = next(iter(rs.best_load.values())) if rs.best_load else None
        headline = (
            f"re-scored: {name}, {rs.best_tokens_per_s:.0f} output tok/s at {at:.3g} "
            f"{'req/s' if axis == 'rate_rps' else 'concurrent requests'}, UNCONFIRMED"
            if rs.best_trial is not None and rs.best_tokens_per_s and at is not None
            else "re-scored: no recorded configuration meets these SLOs"
        )
        verdict = "a search figure from the recorded requests; nothing was measured again"
    else:
        headline, verdict = "no recommendation", r.error or "no configuration met the SLOs"
    return ReportView(
        title=f"autotune: {r.model} on {r.engine_version}",
        machine=f"{r.hardware.hostname}: {r.hardware.label}",
        engine=r.engine_version,
        load_axis=axis,
        load_label="requests/s (Poisson arrivals)" if axis == "rate_rps" else "concurrency",
        headline=headline,
        verdict=verdict,
        slos=slos,
        ttft_percentile=pt,
        tpot_percentile=pp,
        ttft_limit_ms=ttft_limit,
        tpot_limit_ms=tpot_limit,
        points=points,
        recommended=rec_point,
        baseline=base_point,
        curves=[_curve(t) for t in trials if t.points],
        waterfall=waterfall_steps(r),
        probe=_probe(r),
        rows=[_row(t, r) for t in trials],
        files=files or [],
        predictions=prediction_view(r),
        held_out=held_out_view(r),
        robust=robust_view(r),
    )


def _fmt(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:.2f} s" if ms >= 1000 else f"{ms:.0f} ms"
