"""tuner/run/confirmation.py ``room_for``: until a try has held, a final confirmation's try
grows only into time that still leaves a second try of as many requests (a scripted clock)."""

from __future__ import annotations

from pathlib import Path

from tests.unit.run_state import run_state
from tests.unit.test_sizing import Clock, _trial
from tuner.run.confirmation import Confirmation


def _confirmation(tmp_path: Path, clock: Clock, *, baseline: bool = False) -> Confirmation:
    st = run_state(tmp_path, budget_s=1200.0, now=clock)
    st.measurer = object()  # type: ignore[assignment]  # not measured here
    trial = _trial(0 if baseline else 3, 45.0, 5.0, e2e_ms=13_000.0)
    return Confirmation(
        st, None, None, trial, tmp_path, "confirmation",  # type: ignore[arg-type]
        baseline=baseline, reserve_s=0.0,
    )  # fmt: skip


def test_a_try_keeps_a_second_ones_time_until_one_has_held(tmp_path: Path) -> None:
    clock = Clock()
    c = _confirmation(tmp_path, clock)
    x, n = 4.69, 505
    one = c.try_s(x, n)  # 505 requests at 4.69/s, then a lifetime: about 121 s
    clock.t = 1200.0 - 10.0 - 2 * one - 60.0  # a minute over the try and a second one
    assert c.room_for(x, n) == int(60.0 * x)  # the minute, not the second try's time
    c.held = True  # once a try has held, the second try's time may go to growth too
    assert c.room_for(x, n) == n  # capped at as many again
    clock.t = 1200.0 - 10.0 - one - 30.0  # half a minute over the try alone
    assert c.room_for(x, n) == int(30.0 * x)


def test_the_baselines_try_keeps_nothing_back_for_a_second(tmp_path: Path) -> None:
    clock = Clock()
    c = _confirmation(tmp_path, clock, baseline=True)
    x, n = 4.69, 505
    clock.t = 1200.0 - 10.0 - c.try_s(x, n) - 30.0
    assert c.room_for(x, n) == int(30.0 * x)
