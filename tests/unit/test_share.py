"""tuner/run/share.py: a time-bounded run shares the time left between its first few trials,
on a scripted clock (the README command's 13 minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.run_state import run_state
from tests.unit.test_sizing import Clock, _point, _trial
from tuner.report.schema import PredictedReport
from tuner.run import share, sizing, start

BUDGET_S = 780.0


def test_the_time_left_is_shared_between_the_trials_still_to_come(tmp_path: Path) -> None:
    clock = Clock()
    st = run_state(tmp_path, budget_s=BUDGET_S, now=clock)
    clock.t = 300.0
    st.baseline = _trial(0, 50.0, 7.6)
    reserve = 150.0
    assert share.trial_share_s(st, reserve) == pytest.approx((780 - 300 - 150) / 3)
    st.trials = [_trial(1, 48.0, 9.0)]
    clock.t = 420.0
    assert share.trial_share_s(st, reserve) == pytest.approx((780 - 420 - 150) / 2)
    # the last of the few, and every trial after it: what the budget holds
    st.trials.append(_trial(2, 48.0, 9.0))
    assert share.trial_share_s(st, reserve) is None


def test_no_share_without_a_budget_or_beyond_the_trials_asked_for(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    unbounded = run_state(tmp_path / "a", budget_s=None)
    assert share.trial_share_s(unbounded, 0.0) is None
    one = run_state(tmp_path / "b", budget_s=BUDGET_S)
    one.opts = one.opts.model_copy(update={"trials": 1})
    assert share.trial_share_s(one, 0.0) is None  # the only trial takes what is left


def test_a_trial_stops_measuring_at_its_share_and_sizes_its_points_to_leave_room(
    tmp_path: Path,
) -> None:
    clock = Clock()
    st = run_state(tmp_path, budget_s=BUDGET_S, now=clock)
    st.baseline = _trial(0, 50.0, 7.6)
    trial = _trial(1, 48.0, 9.0)
    trial.points = [_point(9.0, True, e2e_ms=8_000.0)]
    unshared = sizing.n_search(st, 12.0, trial)
    assert sizing.points_time_left(st, trial, 12.0) is None
    clock.t = 200.0
    st.budget.open_trial(120.0)
    clock.t = 280.0  # 40 s of the share left
    capped = sizing.n_search(st, 12.0, trial)
    assert unshared == 12 * 24  # three lifetimes of 8 s
    # arrivals over at most half of what is left once the last requests' lifetime is taken
    assert capped == 12 * (40 - 8) / 2
    clock.t = 300.0  # 20 s left: no further point fits
    assert "share of the time budget" in (sizing.points_time_left(st, trial, 12.0) or "")
    st.budget.open_trial(None)
    assert sizing.points_time_left(st, trial, 12.0) is None
    assert sizing.n_search(st, 12.0, trial) == unshared


def test_within_a_share_the_first_point_goes_just_under_any_prediction(tmp_path: Path) -> None:
    clock = Clock()
    st = run_state(tmp_path, budget_s=BUDGET_S, now=clock)
    best = _trial(0, 50.0, 7.6)
    transferred = PredictedReport(
        basis="transferred", build_trials=[], load=10.4, tokens_per_s=666.0, low=450.0, high=880.0
    )
    # no share: a transferred prediction starts at the best's capacity
    assert start.start_load(st, best, transferred) == 7.6
    st.budget.open_trial(110.0)
    x = start.start_load(st, best, transferred)
    assert x == st.axis.floor(10.4 * 0.94)
    trial = _trial(1, 48.0, 9.0)
    trial.predicted = transferred
    assert start.at_prediction(st, trial, x)  # a failure there steps down a little
    # a prediction under the best's capacity: the best's load first, as without a share
    worse = PredictedReport(
        basis="transferred", build_trials=[], load=6.0, tokens_per_s=380.0, low=250.0, high=500.0
    )
    assert start.start_load(st, best, worse) == 7.6


@pytest.mark.timeout(180)
def test_a_bounded_run_gives_its_first_trials_a_share_and_the_last_of_the_few_none(
    tmp_path: Path,
) -> None:
    """The wiring, on the fake engine of test_runner (a real process): trials 1 and 2 of three
    each measure within a share of the time left (said, and their searches sized by it), the
    third takes what the budget holds, and the baseline never has one."""
    from tests.unit.test_runner import HW, FakeEngine, _options
    from tuner.run.runner import Runner

    lines: list[str] = []
    opts = _options(tmp_path, time_budget_s=3600.0, trials=3, side_by_side=False)
    assert opts.space_file is not None
    broken, working = "{max_concurrent: 8, broken: true}", "{max_concurrent: 4, broken: false}"
    opts.space_file.write_text(opts.space_file.read_text().replace(broken, working))
    runner = Runner(opts, lines.append, engine=FakeEngine(), hardware=HW)
    seen: list[tuple[int, float]] = []
    real = sizing.n_search

    def spy(st: object, x: float, trial: object = None) -> int:
        number = getattr(trial, "number", None)
        if number is not None:
            seen.append((number, runner.state.budget.trial_left()))
        return real(st, x, trial)  # type: ignore[arg-type]

    sizing.n_search = spy  # type: ignore[assignment]
    try:
        report = runner.run()
    finally:
        sizing.n_search = real  # type: ignore[assignment]
    text = "\n".join(lines)
    assert report.status == "complete", text
    assert [t.number for t in report.trials] == [1, 2, 3], text
    shared = [line for line in lines if "its share of the time budget" in line]
    assert [line.split("] ")[-1].split(":")[0] for line in shared] == [
        "trial 1 (batching)",
        "trial 2 (batching)",
    ], text
    by_trial: dict[int, set[bool]] = {}
    for number, left in seen:
        by_trial.setdefault(number, set()).add(left < 3600.0)
    # sized within a share while trials 1 and 2 were measured (their figures are also asked
    # for between trials, by the next trial's gate, with no share open), never the others
    assert True in by_trial[1] and True in by_trial[2]
    assert by_trial[0] == {False} and by_trial[3] == {False}
    assert runner.state.budget.trial_left() == float("inf")  # closed after the last trial


def test_a_trial_whose_one_point_broke_takes_one_step_down_past_its_share(
    tmp_path: Path,
) -> None:
    """It has cost a start and scores nothing: one more point, where the whole budget holds
    it (the README command on the Xeon, 2026-12-06 13:31, abandoned both its batching trials
    after a first point just under their transferred predictions broke)."""
    clock = Clock()
    st = run_state(tmp_path, budget_s=BUDGET_S, now=clock)
    st.baseline = _trial(0, 50.0, 7.6)
    trial = _trial(1, 48.0, 11.2)
    clock.t = 200.0
    st.budget.open_trial(100.0)
    clock.t = 295.0  # 5 s of the share left
    trial.points = [_point(11.2, False, e2e_ms=8_000.0)]
    assert sizing.points_time_left(st, trial, 9.8) is None
    # Once a point held, or after the step down, the share stops it as before.
    trial.points = [_point(11.2, True, e2e_ms=8_000.0)]
    assert "share of the time budget" in (sizing.points_time_left(st, trial, 12.0) or "")
    trial.points = [_point(11.2, False), _point(9.8, False)]
    assert "share of the time budget" in (sizing.points_time_left(st, trial, 8.6) or "")
    # The whole budget still decides: no step down where the confirmation's time is at stake.
    trial.points = [_point(11.2, False)]
    clock.t = BUDGET_S - 30.0
    assert "keep time for the confirmation" in (sizing.points_time_left(st, trial, 9.8) or "")


def test_a_stages_last_trial_is_known_by_its_planned_trials_or_its_share_of_the_time(
    tmp_path: Path,
) -> None:
    clock = Clock()
    st = run_state(tmp_path, budget_s=BUDGET_S, now=clock)
    st.baseline = _trial(0, 50.0, 7.6)
    st.baseline.wall_s = 100.0
    clock.t = 100.0
    st.opts = st.opts.model_copy(update={"trials": 8})
    sizing.open_stage(st, 6, 2)  # the batching stage: 6 of the 8 trials, its share of the time
    assert not sizing.last_of_stage(st, [], 6)  # its first: never the last after one of its own
    assert not sizing.last_of_stage(st, [], 1)
    assert sizing.last_of_stage(st, [1], 2)  # its planned trials hold none after this one
    # the time: two more of the mean trial fit the stage's share, then only one
    t1 = _trial(1, 48.0, 9.0)
    t1.wall_s = 100.0
    st.trials = [t1]
    clock.t = 200.0
    assert st.budget.stage_fits(2 * 100.0)
    assert not sizing.last_of_stage(st, [1], 6)
    clock.t = st.budget.stage_deadline - 150.0
    assert sizing.last_of_stage(st, [1], 6)
    # a stage with a share to spare, but a whole budget that holds no trial after this one
    clock.t = 200.0
    st.budget.stage_deadline = float("inf")
    assert not sizing.last_of_stage(st, [1], 6)
    st.budget.deadline = 200.0 + 100.0 + 10.0  # this trial, then too little for another's gate
    assert sizing.last_of_stage(st, [1], 6)
