"""RunState.best: the highest score leads; of equal scores, the most latency headroom."""

from __future__ import annotations

from pathlib import Path

from probes.metrics import Verdict
from tests.unit.run_state import run_state
from tests.unit.test_sizing import _metrics
from tuner.report.schema import PointReport, TrialReport
from tuner.run.state import held_margin


def _point(rate: float, margin: float, side_by_side: bool = False) -> PointReport:
    verdict = Verdict(holds=margin <= 0, provisional=False, worst_margin=margin, checks=[])
    return PointReport(
        load={"rate_rps": rate}, metrics=_metrics(rate, 8_000.0), verdict=verdict,
        records_file="", side_by_side=side_by_side,
    )  # fmt: skip


def _trial(number: int, score: float, points: list[PointReport]) -> TrialReport:
    return TrialReport(
        number=number, stage="batching", params={}, args=[], env={}, launch_command=[],
        status="ok", score_tokens_per_s=score, load={"rate_rps": score / 64}, points=points,
    )  # fmt: skip


def test_the_highest_score_leads_whatever_its_margin(tmp_path: Path) -> None:
    st = run_state(tmp_path)
    st.trials = [_trial(1, 900.0, [_point(14.0, -0.05)]), _trial(2, 950.0, [_point(14.8, -0.01)])]
    assert st.best() is st.trials[1]


def test_equal_scores_go_to_the_one_with_more_headroom_at_its_highest_held_load(
    tmp_path: Path,
) -> None:
    """Both held every load tried, up to 14.2 req/s: the same lower bound. The second's
    latency there was far under its limit, the first's near it."""
    st = run_state(tmp_path)
    first = _trial(1, 909.0, [_point(11.0, -0.6), _point(14.2, -0.15)])
    second = _trial(2, 909.0, [_point(14.2, -0.45)])
    st.trials = [first, second]
    assert st.best() is second
    st.trials = [second, first]
    assert st.best() is second


def test_the_held_margin_is_the_highest_held_point_s_own() -> None:
    t = _trial(1, 900.0, [_point(10.0, -0.5), _point(14.0, -0.1), _point(16.0, 0.3)])
    assert held_margin(t) == -0.1  # 16 broke; a side-by-side point is not the trial's own
    t.points.append(_point(15.0, -0.4, side_by_side=True))
    assert held_margin(t) == -0.1
    assert held_margin(_trial(2, 0.0, [_point(5.0, 0.2)])) == float("inf")
