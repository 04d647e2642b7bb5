"""tuner/run/budget_hint.py: a time budget that held fewer than the first few trials says what
one more cost here and about what budget would hold them (a scripted clock: the README
command's 13 minutes on a slow box, 2026-12-06 16:41)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.run_state import run_state
from tests.unit.test_sizing import Clock, _point, _trial
from tuner.run import budget_hint
from tuner.run.state import RunState

BUDGET_S = 780.0


def _slow_run(tmp_path: Path, clock: Clock) -> RunState:
    st = run_state(tmp_path, budget_s=BUDGET_S, now=clock)
    st.launches = True
    st.baseline = _trial(0, 119.0, 3.9)
    st.baseline.points = [_point(4.5, False), _point(3.9, True), _point(4.0, False)]
    t1 = _trial(1, 53.0, 4.6)
    t1.points = [_point(4.6, True)]
    t1.wall_s = 89.0
    st.trials = [t1]
    return st


def test_a_budget_that_held_one_trial_says_what_would_hold_the_few(tmp_path: Path) -> None:
    clock = Clock()
    st = _slow_run(tmp_path, clock)
    # the run ended with 177 s left (the README command at 18:48): too little for a trial
    # and the confirmation it would need
    clock.t = 603.0
    per = budget_hint.configuration_s(st)
    # a start (the one after the first: 53 s), a warm-up and two points of 20 s
    assert per == 53.0 + 13.0 + 2 * 20.0
    line = budget_hint.hint(st, out_of_time=True)
    assert line is not None
    assert line.startswith(
        "time budget: 13 min started 2 configurations (the baseline and 1 trial)"
    )
    # two trials more of ``per`` each, beyond the whole 780 s (the 177 s left held none), not
    # beyond the 603 s used: 17 minutes, not 14
    minutes = -(-(BUDGET_S + 2 * per) // 60)
    assert minutes == 17
    assert f"--time-budget {minutes:.0f}m would hold about the 4" in line


def test_no_hint_with_time_left_or_the_few_measured_or_no_budget(tmp_path: Path) -> None:
    clock = Clock()
    (tmp_path / "a").mkdir()
    st = _slow_run(tmp_path / "a", clock)
    clock.t = 756.0  # the confirmation took what was left, whatever stopped the search
    # the search stopped with room for another trial: the model expected no gain
    assert budget_hint.hint(st, out_of_time=False) is None
    assert budget_hint.hint(st, out_of_time=True) is not None
    st.trials = st.trials * 3  # the few were measured
    assert budget_hint.hint(st, out_of_time=True) is None
    (tmp_path / "b").mkdir()
    unbounded = run_state(tmp_path / "b", budget_s=None)
    unbounded.launches = True
    unbounded.baseline = _trial(0, 50.0, 7.6)
    assert budget_hint.hint(unbounded, out_of_time=True) is None
