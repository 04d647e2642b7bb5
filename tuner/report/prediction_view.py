"""The serving model's figures of a report, computed once: predicted against measured, per
trial, and the run's model error (report.md and report.html draw these and compute nothing).

A trial's predicted capacity was made before it was started; its predicted TTFT p99 and TPOT
p50 are those of a point like the one its measured figures come from (the point measured
closest under its capacity: its load and number of requests), simulated with the step model it
was predicted with, so both sides are compared like for like (``Simulator.like_point``).

The measured capacity's interval is its bootstrap interval (one start's sampling noise) with the
run-to-run spread of a fresh start added (``with_restart``): the bootstrap's alone is a few %
wide, while the same configuration started again measured 6 % apart on the Xeon
(benchmarks/search_efficiency.py's first configuration, 980 and 918 tok/s). Both sides of a row
then promise what the next start keeps.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from tuner.report.schema import Report


class PredictionRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trial: int
    basis: str  # calibrated | transferred | probe | roofline
    build_trials: list[int]
    predicted: float  # output tokens/s at the predicted capacity
    low: float
    high: float | None
    measured: float | None  # the trial's score (None: it met no SLO, or did not run)
    # its 90 % interval with a fresh start's spread added (``with_restart``)
    measured_low: float | None
    measured_high: float | None
    error: float | None  # predicted / measured - 1
    at_load: float | None
    ttft_p99_predicted: float | None
    ttft_p99_measured: float | None
    tpot_p50_predicted: float | None
    tpot_p50_measured: float | None


class PredictionView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    screened: int
    rows: list[PredictionRow]
    errors: dict[str, dict[str, float]]
    run_to_run: float
    transfer: float
    summary: str


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b - 1.0 if a is not None and b else None


def with_restart(value: float, low: float, high: float, run_to_run: float) -> tuple[float, float]:
    """A measured figure's interval ``low``-``high`` (one start's bootstrap) with the
    run-to-run spread of a fresh start added in quadrature on each side (relative to
    ``value``)."""
    if value <= 0:
        return low, high
    down = math.hypot(max(0.0, value - low) / value, run_to_run)
    up = math.hypot(max(0.0, high - value) / value, run_to_run)
    return value * (1.0 - down), value * (1.0 + up)


def prediction_view(r: Report) -> PredictionView | None:
    """The model's rows and summary, or None where it predicted nothing."""
    sm = r.serving_model
    if sm is None:
        return None
    rows = []
    for t in [x for x in [r.baseline, *r.trials] if x is not None]:
        p = t.predicted
        if p is None:
            continue
        m = t.metrics
        measured = t.score_tokens_per_s if t.status == "ok" else None
        m_low = m_high = None
        if measured is not None and t.estimate is not None and t.estimate.high is not None:
            m_low, m_high = with_restart(
                measured, t.estimate.low, t.estimate.high, sm.run_to_run_spread
            )
        rows.append(
            PredictionRow(
                trial=t.number,
                basis=p.basis,
                build_trials=p.build_trials,
                predicted=p.tokens_per_s,
                low=p.low,
                high=p.high,
                measured=measured,
                measured_low=m_low,
                measured_high=m_high,
                error=_ratio(p.tokens_per_s, measured),
                at_load=p.at_load,
                ttft_p99_predicted=p.ttft_ms_p99_at_load,
                ttft_p99_measured=m.ttft_ms.p99 if m else None,
                tpot_p50_predicted=p.tpot_ms_p50_at_load,
                tpot_p50_measured=m.tpot_ms.p50 if m else None,
            )
        )
    cap = sm.errors.get("capacity")
    if cap:
        summary = (
            f"capacity predicted within {cap['median']:.0%} (median) and {cap['worst']:.0%} "
            f"(worst) of measurement over {cap['n']:.0f} trial(s)"
        )
        for key, name in (("ttft_p99", "TTFT p99"), ("tpot_p50", "TPOT p50")):
            if e := sm.errors.get(key):
                summary += f"; {name} median {e['median']:.0%}, worst {e['worst']:.0%}"
    else:
        summary = "no measured trial had a prediction to compare with"
    if probe := sm.errors_by_basis.get("probe", {}).get("capacity"):
        summary += (
            f"; calibrated on the probe's sweeps alone (the baseline, before its first load "
            f"point), capacity within {probe['median']:.0%}"
        )
    summary = f"The serving model screened {sm.screened} configurations; {summary}."
    return PredictionView(
        screened=sm.screened,
        rows=rows,
        errors=sm.errors,
        run_to_run=sm.run_to_run_spread,
        transfer=sm.transfer_spread,
        summary=summary,
    )
