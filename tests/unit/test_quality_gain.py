"""A quantised configuration leads only where its gain pays its quality cost
(tuner/scoring/quality_gain.py, tuner/run/quality_paid.py): hand-built estimates, and the
README command's case on the Xeon (2026-12-06 10:08), an fp8 KV cache at 1,032 tok/s over a
batching trial whose one point held at 813, which vLLM's client then measured 4.5-5 % slower
than the same configuration without it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

import pytest

from probes.quality import QualityCheck
from tuner.report.schema import PredictedReport, Report, TrialReport
from tuner.report.waterfall import waterfall_steps
from tuner.run.quality_paid import may_lead, reference, unpaid_reason
from tuner.scoring.estimate import CapacityEstimate
from tuner.scoring.quality_gain import ceiling, unpaid


def est(
    tps: float,
    low: float,
    high: float | None,
    censored: Literal["none", "below", "above"] = "none",
    top: float | None = None,
) -> CapacityEstimate:
    return CapacityEstimate(
        load=tps / 60,
        tokens_per_s=tps,
        low=low,
        high=high,
        load_low=None,
        load_high=None,
        censored=censored,
        binding="ttft_ms p99",
        bracket_tokens_per_s=(tps * 0.9, top) if top is not None else None,
        n_points=3,
        n_requests=300,
        resamples=200,
    )


def test_the_ceiling_of_a_bracketed_estimate_is_the_most_its_points_allow() -> None:
    assert ceiling(est(800, 780, 820)) == 820
    assert ceiling(est(800, 780, 820, top=850)) == 850  # the first load that broke, higher
    assert ceiling(est(800, 780, 820), predicted_high=2000) == 820  # points beat a prediction


def test_the_ceiling_of_a_lower_bound_is_its_prediction_or_nothing() -> None:
    bound = est(813, 813, None, censored="above")
    assert math.isinf(ceiling(bound))
    assert ceiling(bound, predicted_high=1132) == 1132
    # A prediction already under what held is refuted: it bounds nothing.
    assert math.isinf(ceiling(bound, predicted_high=700))


def test_a_gain_is_established_only_clear_of_the_ceiling_and_the_tie_band() -> None:
    ref = est(800, 780, 820)
    assert unpaid(est(1000, 950, 1050), ref) is None
    assert "pessimistic end, 810" in (unpaid(est(900, 810, 990), ref) or "")
    # Clear of the interval, but within 5 % of the estimate: fresh starts differ by that.
    assert "within 5 %" in (unpaid(est(835, 825, 845), ref) or "")
    assert unpaid(est(835, 825, 845), ref, band=0.02) is None


def test_the_readme_commands_fp8_kv_cache_would_not_have_been_carried() -> None:
    trial_1 = est(813, 813, None, censored="above")  # its one point held
    trial_3 = est(1032, 990, 1070)
    assert "lower bound" in (unpaid(trial_3, trial_1) or "")
    # Its transferred prediction, 871 tok/s with a 30 % spread, leaves room above 990 too.
    assert "optimistic end" in (unpaid(trial_3, trial_1, predicted_high=871 * 1.3) or "")
    # Had the prediction been tight (and right), the gain would have been established.
    assert unpaid(trial_3, trial_1, predicted_high=900) is None


@pytest.fixture
def trials(fake_run: Path) -> list[TrialReport]:
    r = Report.model_validate_json((fake_run / "report.json").read_bytes())
    return [t.model_copy(deep=True) for t in [r.baseline, *r.trials] if t is not None]


def _as(t: TrialReport, e: CapacityEstimate, quantised: bool) -> TrialReport:
    t.status, t.rejected, t.estimate, t.score_tokens_per_s = "ok", None, e, e.tokens_per_s
    t.quality = (
        QualityCheck(
            metric="perplexity",
            value=10.056,
            baseline_value=10.0,
            degradation_pct=0.56,
            limit_pct=1.0,
            holds=True,
            n_tokens=4096,
            n_texts=8,
        )
        if quantised
        else None
    )
    return t


def test_an_unpaid_quantised_trial_does_not_lead(trials: list[TrialReport]) -> None:
    assert len(trials) >= 3
    base, free, quant = trials[:3]
    _as(base, est(592, 570, 610), quantised=False)
    _as(free, est(813, 813, None, censored="above"), quantised=False)
    _as(quant, est(1032, 990, 1070), quantised=True)
    rest = trials[3:]
    for t in rest:
        t.status = "failed"
    assert reference(trials) is free
    why = unpaid_reason(quant, trials)
    assert why is not None and f"trial {free.number}" in why and "lower bound" in why
    assert [t.number for t in may_lead(trials)] == [base.number, free.number]
    # The same trial without a quality cost leads on its score.
    quant.quality = None
    assert unpaid_reason(quant, trials) is None and quant in may_lead(trials)


def test_a_quantised_trial_over_a_bracketed_reference_leads(trials: list[TrialReport]) -> None:
    base, free, quant = trials[:3]
    _as(base, est(592, 570, 610), quantised=False)
    _as(free, est(813, 790, 840), quantised=False)
    _as(quant, est(1032, 990, 1070), quantised=True)
    for t in trials[3:]:
        t.status = "failed"
    assert unpaid_reason(quant, trials) is None and quant in may_lead(trials)
    # 6 % over a bracketed reference: within the run-to-run spread (8 %), not paid.
    _as(quant, est(862, 850, 875), quantised=True)
    assert "within 8 %" in (unpaid_reason(quant, trials) or "")
    _as(quant, est(1032, 990, 1070), quantised=True)
    # A lower bound whose prediction leaves no room above the quantised one's pessimistic end.
    _as(free, est(813, 813, None, censored="above"), quantised=False)
    free.predicted = PredictedReport(
        basis="calibrated", build_trials=[free.number], load=14.0, tokens_per_s=880, low=800,
        high=940,
    )  # fmt: skip
    assert unpaid_reason(quant, trials) is None
    free.predicted = free.predicted.model_copy(update={"high": 1100.0})
    assert unpaid_reason(quant, trials) is not None and quant not in may_lead(trials)


def test_the_stage_table_says_why_a_higher_quantised_score_was_not_carried(
    fake_run: Path,
) -> None:
    r = Report.model_validate_json((fake_run / "report.json").read_bytes())
    first = next(s for s in r.stages if s.status == "run" and s.best_trial is not None)
    by = {t.number: t for t in r.trials}
    carried = by[first.best_trial or 0]
    other = next(t for t in r.trials if t.number != carried.number)
    _as(other, est((carried.score_tokens_per_s or 0.0) * 1.2, 1.0, None), quantised=True)
    quant = first.model_copy(
        update={"name": "quantisation", "trials": [other.number], "best_trial": carried.number}
    )
    r.stages = [first, quant]

    def note() -> str:
        return next(s for s in waterfall_steps(r) if s.label == "after quantisation").note

    assert note() == (
        f"unchanged: trial {other.number} scored higher, but its gain is not established "
        "against its quality cost (see the notes)"
    )
    other.rejected = "quality: perplexity degraded 1.40 % against the baseline, over the 1 %"
    assert note().startswith(f"unchanged: trial {other.number} scored higher but is barred")
    other.score_tokens_per_s = (carried.score_tokens_per_s or 0.0) * 0.9
    assert note() == "unchanged: nothing better"
