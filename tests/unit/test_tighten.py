"""tuner/run/tighten.py on a scripted clock: a trial confirmed in place mid-search, once a try
of it has held, makes no higher try where that try would take the room of the next trial
(a start, a load point and one try), and a higher try it makes keeps that room back from its
growth; where no trial can follow (the last ``--trials`` allows, no stage left with trials),
before a try has held, and at the run's end, every try is kept. Figures of the README command
on a slow 2-core AMD box (2026-12-07): starts of 42 s, trial 1 at 4.02 requests/s."""

from __future__ import annotations

from pathlib import Path

from probes.metrics import Verdict
from tests.unit.run_state import run_state
from tests.unit.test_sizing import Clock, _point, _trial
from tuner.run import sizing, tighten
from tuner.run.confirmation import Confirmation
from tuner.run.state import RunState

BUDGET_S = 780.0
X, N = 4.42, 505  # the higher try's load, and its requests


def _run(tmp_path: Path, clock: Clock, trials: int = 12) -> tuple[RunState, Confirmation]:
    st = run_state(tmp_path, budget_s=BUDGET_S, now=clock)
    st.opts.trials = trials
    # trial 1 of the batching stage's 6, its share spent; quantisation and speculative to come
    st.doing.stage_started, st.doing.stage_trials, st.doing.later_trials = 1, 6, 6
    st.measurer = object()  # type: ignore[assignment]  # not measured here
    st.baseline = _trial(0, 42.0, 3.72, e2e_ms=15_000.0)
    st.baseline.points = [_point(3.72, True), _point(3.86, False)]
    lead = _trial(1, 42.0, 4.02, e2e_ms=5_000.0)
    lead.points = [_point(4.02, True, e2e_ms=15_000.0)]  # lifetimes near capacity there
    c = Confirmation(
        st, None, None, lead, tmp_path, "confirmation",  # type: ignore[arg-type]
        baseline=False, reserve_s=0.0, in_place=True,
    )  # fmt: skip
    return st, c


def _held() -> Verdict:
    return Verdict(holds=True, provisional=False, worst_margin=-0.5, checks=[])


def _gate(st: RunState, c: Confirmation) -> float:
    gate = tighten.next_trial_s(st, c.trial)
    assert gate is not None
    assert gate == sizing.gate_s(st, c.trial, strict=False) + sizing.STOP_S
    return gate


def test_a_held_claim_leaves_the_next_trials_room_to_the_search(tmp_path: Path) -> None:
    clock = Clock()
    st, c = _run(tmp_path, clock)
    gate, try_s = _gate(st, c), c.try_s(X)
    clock.t = BUDGET_S - gate - 0.5 * try_s  # the next trial fits, and would not after a try
    assert c.may_try(X) is None  # no try has held yet: the confirmation goes on
    c.took(_held())
    why = c.may_try(X)
    assert why is not None and "further trial" in why
    assert tighten.search_instead(st, c.trial, try_s) == why


def test_a_held_claim_is_raised_where_both_fit_or_neither_does(tmp_path: Path) -> None:
    clock = Clock()
    st, c = _run(tmp_path, clock)
    c.took(_held())
    gate, try_s = _gate(st, c), c.try_s(X)
    clock.t = BUDGET_S - gate - try_s - 30.0  # the try and the next trial both fit
    assert c.may_try(X) is None
    # and the try keeps the next trial's room back from its growth: 30 s of it, not N more
    assert c.keep_s(X, N) == gate
    assert c.room_for(X, N) == int((30.0 - 10.0) * X)
    # no trial fits anyway: the time goes to the claim (a whole try: the trial's measured
    # rate, under the try's load, sizes what fits)
    clock.t = BUDGET_S - 1.2 * try_s - 10.0
    assert gate > 1.2 * try_s + 10.0
    assert c.n_for(X) == N
    assert c.may_try(X) is None
    assert c.keep_s(X, N) == 0.0


def test_where_no_trial_can_follow_every_try_is_kept(tmp_path: Path) -> None:
    clock = Clock()
    st, c = _run(tmp_path, clock, trials=1)  # trial 1 is the last --trials allows
    c.took(_held())
    st.opts.trials = 12
    gate = _gate(st, c)
    clock.t = BUDGET_S - gate - 0.5 * c.try_s(X)
    assert c.may_try(X) is not None
    st.opts.trials = 1
    assert c.may_try(X) is None
    st.opts.trials = 12
    st.doing.later_trials = 0  # the last stage with trials, and this one's planned all started
    st.doing.stage_started = 6
    assert tighten.next_trial_s(st, c.trial) is None and c.may_try(X) is None
    st.doing.stage_started = 1  # this stage has trials left, and its share holds the gate
    assert c.may_try(X) is not None
    c.in_place = False  # the search's best on a fresh start, at the run's end
    assert c.may_try(X) is None


def test_the_next_trials_gate_is_costed_past_this_trials_share(tmp_path: Path) -> None:
    """The confirmation runs before the trial's share of the budget is closed; a point costed
    within a share of a few seconds would understate the next trial's gate."""
    clock = Clock()
    st, c = _run(tmp_path, clock)
    wide = tighten.next_trial_s(st, c.trial)
    st.budget.open_trial(17.0)
    assert tighten.next_trial_s(st, c.trial) == wide
    assert st.budget.trial_left() == 17.0  # and the share is left as it was
