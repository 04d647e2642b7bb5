"""report.md's serving-model section: what it screened, each trial predicted against measured,
and the run's model error (tuner/report/prediction_view.py computes; this only writes)."""

from __future__ import annotations

from tuner.report.prediction_view import PredictionRow, prediction_view
from tuner.report.schema import Report


def _num(x: float | None, spec: str = ".0f") -> str:
    return "-" if x is None else format(x, spec)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.0%}"


def _measured(p: PredictionRow) -> str:
    if p.measured is None or p.measured_low is None:
        return _num(p.measured)
    return f"{p.measured:.0f} [{p.measured_low:.0f}-{_num(p.measured_high)}]"


def _row(p: PredictionRow) -> str:
    hi = _num(p.high)
    basis = {
        "calibrated": f"calibrated on {', '.join(map(str, p.build_trials))}",
        "probe": "the probe's sweeps alone",
        "roofline": "the probe's roofline (a quantised build not measured before)",
    }.get(p.basis, "transferred (a build not measured before)")
    return (
        f"| {p.trial} | {basis} | {p.predicted:.0f} [{p.low:.0f}-{hi}] | "
        f"{_measured(p)} | {_pct(p.error)} | {_num(p.at_load, '.3g')} | "
        f"{_num(p.ttft_p99_predicted)} / {_num(p.ttft_p99_measured)} | "
        f"{_num(p.tpot_p50_predicted, '.1f')} / {_num(p.tpot_p50_measured, '.1f')} |"
    )


def model_section(r: Report) -> list[str]:
    """The section, or nothing where the model predicted nothing."""
    v = prediction_view(r)
    if v is None:
        return []
    out = [
        "## The serving model: predicted against measured",
        "",
        f"{v.summary} Each prediction was made before its trial started; its interval "
        f"includes the run-to-run spread of a fresh start (+-{v.run_to_run:.0%}) and, for a "
        f"build not measured before, +-{v.transfer:.0%} more. A measured capacity's interval "
        f"is its bootstrap's with the same fresh-start spread added. TTFT p99 and TPOT p50 are "
        "predicted at the load the trial's figures were measured at.",
        "",
    ]
    if v.rows:
        out += [
            "| # | basis | predicted tok/s [interval] | measured tok/s [interval] | error | "
            "at load | TTFT p99 ms pred / meas | TPOT p50 ms pred / meas |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
            *(_row(p) for p in v.rows),
            "",
        ]
    return out
