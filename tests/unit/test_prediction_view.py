"""tuner/report/prediction_view.py: predicted against measured, each side's interval with the
run-to-run spread of a fresh start (on the fake engine's run report, given a prediction)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.report.prediction_view import prediction_view, with_restart
from tuner.report.render_model import model_section
from tuner.report.schema import PredictedReport, Report, ServingModelReport


def test_a_fresh_starts_spread_widens_a_measured_interval_in_quadrature() -> None:
    low, high = with_restart(600.0, 588.0, 618.0, 0.08)  # bootstrap -2 % / +3 %
    assert low == pytest.approx(600.0 * (1 - (0.02**2 + 0.08**2) ** 0.5))
    assert high == pytest.approx(600.0 * (1 + (0.03**2 + 0.08**2) ** 0.5))
    assert with_restart(600.0, 600.0, 600.0, 0.0) == (600.0, 600.0)


def test_each_measured_row_carries_its_interval_with_the_restart_term(fake_run: Path) -> None:
    r = Report.model_validate_json((fake_run / "report.json").read_bytes())
    # a configuration whose capacity is bracketed: one whose every load held has an open upper
    # end, and its row no interval (a fresh clone's CI, 2026-12-06, drew such a trial first)
    bracketed = [
        t
        for t in [r.baseline, *r.trials]
        if t is not None and t.status == "ok" and t.estimate and t.estimate.high is not None
    ]
    assert bracketed, "the fake run measured no configuration with a bracketed capacity"
    t = bracketed[0]
    assert t.score_tokens_per_s is not None and t.estimate is not None
    t.predicted = PredictedReport(
        basis="calibrated",
        build_trials=[0],
        load=1.0,
        tokens_per_s=t.score_tokens_per_s * 1.1,
        low=t.score_tokens_per_s,
        high=t.score_tokens_per_s * 1.2,
    )
    r.serving_model = ServingModelReport(
        screened=200,
        predicted_trials=[t.number],
        errors={},
        run_to_run_spread=0.08,
        transfer_spread=0.3,
    )
    v = prediction_view(r)
    assert v is not None
    (row,) = [p for p in v.rows if p.trial == t.number]
    assert row.measured == t.score_tokens_per_s
    assert row.measured_low is not None and row.measured_high is not None
    # wider than the bootstrap's alone, by at least the fresh-start term on each side
    assert row.measured_low <= min(t.estimate.low, row.measured * 0.92) + 1e-9
    assert row.measured_high >= max(t.estimate.high, row.measured * 1.08) - 1e-9
    assert row.error == pytest.approx(0.1)
    md = "\n".join(model_section(r))
    assert f"{row.measured:.0f} [{row.measured_low:.0f}-{row.measured_high:.0f}]" in md
