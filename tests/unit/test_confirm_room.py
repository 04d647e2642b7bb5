"""tuner/run/confirmation.py ``room_for``: until a try has met the SLOs, a final confirmation's
try grows only into time that still leaves a second, lower try of as many requests, where the
time left holds both whole and another try is allowed (a scripted clock)."""

from __future__ import annotations

from pathlib import Path

from probes.metrics import Verdict
from tests.unit.run_state import run_state
from tests.unit.test_sizing import Clock, _trial
from tuner.report.schema import TrialReport
from tuner.run.confirmation import Confirmation
from tuner.scoring.confirm import STEP_DOWN_FLOOR

X, N = 4.69, 505


def _confirmation(
    tmp_path: Path,
    clock: Clock,
    *,
    baseline: bool = False,
    budget_s: float = 1200.0,
    trial: TrialReport | None = None,
) -> Confirmation:
    st = run_state(tmp_path, budget_s=budget_s, now=clock)
    st.measurer = object()  # type: ignore[assignment]  # not measured here
    trial = trial or _trial(0 if baseline else 3, 45.0, 5.0, e2e_ms=13_000.0)
    return Confirmation(
        st, None, None, trial, tmp_path, "confirmation",  # type: ignore[arg-type]
        baseline=baseline, reserve_s=0.0,
    )  # fmt: skip


def _verdict(holds: bool, margin: float, provisional: bool = False) -> Verdict:
    return Verdict(holds=holds, provisional=provisional, worst_margin=margin, checks=[])


def test_a_try_keeps_a_second_lower_ones_time_until_one_has_met(tmp_path: Path) -> None:
    clock = Clock()
    c = _confirmation(tmp_path, clock)
    one, second = c.try_s(X, N), c.try_s(X * STEP_DOWN_FLOOR, N)
    assert second > one  # the lower load's try takes longer
    clock.t = 1200.0 - 10.0 - one - second - 60.0  # a minute over the try and a second one
    assert c.room_for(X, N) == int(60.0 * X)  # the minute, not the second try's time
    # a try that held without the headroom, or provisionally, has not met the SLOs
    c.took(_verdict(True, -0.05))
    c.took(_verdict(True, -0.5, provisional=True))
    assert not c.held
    assert c.tries == 2  # the third is the last allowed: nothing kept back after it
    assert c.room_for(X, N) == N
    c.tries = 0
    c.took(_verdict(True, -0.5))  # met: the second try's time may go to growth too
    assert c.held and c.room_for(X, N) == N


def test_no_second_try_is_kept_where_the_time_left_holds_no_whole_one(tmp_path: Path) -> None:
    clock = Clock()
    c = _confirmation(tmp_path, clock)
    one = c.try_s(X, N)
    clock.t = 1200.0 - 10.0 - one - 30.0  # half a minute over the try alone
    assert c.room_for(X, N) == int(30.0 * X)  # this try's growth is its one chance


def test_the_baselines_try_keeps_nothing_back_for_a_second(tmp_path: Path) -> None:
    clock = Clock()
    c = _confirmation(tmp_path, clock, baseline=True)
    clock.t = 1200.0 - 10.0 - c.try_s(X, N) - 30.0
    assert c.room_for(X, N) == int(30.0 * X)


def test_once_a_try_has_met_no_try_is_made_short_of_its_percentile(tmp_path: Path) -> None:
    """A higher try cut to the time left would be provisional and could not raise the claim.
    (A try cut to the time left is sized to fit it: its arrivals, then the lifetime.)"""
    clock = Clock()
    c = _confirmation(tmp_path, clock, trial=_trial(3, 45.0, 4.0, e2e_ms=13_000.0))
    whole = c.try_s(X, N)
    clock.t = 1200.0 - 10.0 - 0.8 * whole  # four fifths of a whole try left
    assert c.n_for(X) < N
    assert c.may_try(X) is None  # nothing met yet: a short try is still a figure
    c.took(_verdict(True, -0.5))
    assert c.held
    why = c.may_try(X)
    assert why is not None and f"of its {N} requests" in why
    clock.t = 0.0  # time for a whole one
    assert c.n_for(X) == N and c.may_try(X) is None


def test_a_try_is_sized_by_its_own_arrivals_and_the_lifetime_after_them(tmp_path: Path) -> None:
    """Open loop, requests go out at the try's load, not at the trial's measured rate (a short
    point's requests over its span with the drain, far under its load). The README command on a
    fast AMD box, 2026-12-07 18:17: trial 1 measured 6.93 requests/s with E2E p50 4.0 s; its
    try at 10.3 with 63 s left was cut to 433 of 505 requests, where 505 arrivals take 49 s."""
    clock = Clock()
    c = _confirmation(tmp_path, clock, budget_s=780.0, trial=_trial(1, 38.0, 6.93, e2e_ms=4_000.0))
    clock.t = 780.0 - 10.0 - 63.0
    assert c.n_for(10.3) == N
    assert c.may_try(10.3) is None
    clock.t = 780.0 - 10.0 - 40.0  # 40 s left: 36 s of arrivals, then the lifetime
    n = c.n_for(10.3)
    assert n == int(10.3 * 36.0)
    assert c.try_s(10.3, n) <= 40.0 and c.may_try(10.3) is None  # the cut try fits its time
