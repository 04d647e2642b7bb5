"""tuner/run/tighten.py on a scripted clock: a trial confirmed in place mid-search, once a try
of it has held, makes no higher try where that try would take the room of the next trial
(a start, a load point and one try); the last trial ``--trials`` allows, a try not held yet,
and a confirmation at the run's end keep every try. Figures of the README command on a slow
2-core AMD box (2026-12-07): starts of 42 s, trial 1 at 4.02 requests/s, 131 s a try."""

from __future__ import annotations

from pathlib import Path

from probes.metrics import Verdict
from tests.unit.run_state import run_state
from tests.unit.test_sizing import Clock, _point, _trial
from tuner.run import sizing, tighten
from tuner.run.confirmation import Confirmation
from tuner.run.state import RunState

BUDGET_S = 780.0
X = 4.42  # the higher try's load


def _run(tmp_path: Path, clock: Clock, trials: int = 12) -> tuple[RunState, Confirmation]:
    st = run_state(tmp_path, budget_s=BUDGET_S, now=clock)
    st.opts.trials = trials
    st.measurer = object()  # type: ignore[assignment]  # not measured here
    st.baseline = _trial(0, 42.0, 3.72, e2e_ms=15_000.0)
    st.baseline.points = [_point(3.72, True), _point(3.86, False)]
    lead = _trial(1, 42.0, 4.02, e2e_ms=5_000.0)
    lead.points = [_point(4.02, True, e2e_ms=5_000.0)]
    c = Confirmation(
        st, None, None, lead, tmp_path, "confirmation",  # type: ignore[arg-type]
        baseline=False, reserve_s=0.0, in_place=True,
    )  # fmt: skip
    return st, c


def _held() -> Verdict:
    return Verdict(holds=True, provisional=False, worst_margin=-0.5, checks=[])


def test_a_held_claim_leaves_the_next_trials_room_to_the_search(tmp_path: Path) -> None:
    clock = Clock()
    st, c = _run(tmp_path, clock)
    gate = sizing.gate_s(st, c.trial, strict=False) + sizing.STOP_S
    try_s = c.try_s(X)
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
    gate = sizing.gate_s(st, c.trial, strict=False) + sizing.STOP_S
    try_s = c.try_s(X)
    clock.t = BUDGET_S - gate - try_s - 30.0  # the try and the next trial both fit
    assert c.may_try(X) is None
    clock.t = BUDGET_S - try_s - 10.0  # no trial fits anyway: the time goes to the claim
    assert gate > try_s + 10.0
    assert c.may_try(X) is None


def test_the_last_trial_allowed_and_a_final_confirmation_keep_every_try(tmp_path: Path) -> None:
    clock = Clock()
    st, c = _run(tmp_path, clock, trials=1)  # trial 1 is the last --trials allows
    c.took(_held())
    gate = sizing.gate_s(st, c.trial, strict=False) + sizing.STOP_S
    clock.t = BUDGET_S - gate - 0.5 * c.try_s(X)
    assert c.may_try(X) is None
    st.opts.trials = 12
    assert c.may_try(X) is not None
    c.in_place = False  # the search's best on a fresh start, at the run's end
    assert c.may_try(X) is None
