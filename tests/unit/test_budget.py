"""tuner/run/budget.py on a scripted clock."""

from __future__ import annotations

import math

from tuner.run.budget import Budget, PhaseTimes


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_fits_keeps_the_reserve_back() -> None:
    c = Clock()
    b = Budget(600.0, now=c)
    assert b.bounded and b.left() == 600.0
    c.t += 400.0
    assert b.fits(150.0) and b.fits(150.0, reserve_s=50.0)
    assert not b.fits(150.0, reserve_s=51.0)
    assert b.left(reserve_s=100.0) == 100.0


def test_a_stage_gets_its_share_of_what_is_left_after_the_reserve() -> None:
    c = Clock()
    b = Budget(1000.0, now=c)
    c.t += 200.0  # 800 s left
    b.open_stage(0.75, reserve_s=200.0)  # 0.75 x 600 s
    assert b.stage_fits(450.0) and not b.stage_fits(451.0)
    c.t += 2000.0  # past the deadline: a new stage gets nothing, never a negative share
    b.open_stage(0.5)
    assert b.stage_deadline == c.t and not b.stage_fits(1.0)


def test_without_a_budget_everything_fits() -> None:
    b = Budget(None, now=Clock())
    assert not b.bounded and b.left() == math.inf
    b.open_stage(0.1, reserve_s=1e9)
    assert b.fits(1e12) and b.stage_fits(1e12)


def test_phase_times_count_from_the_start() -> None:
    c = Clock()
    p = PhaseTimes(now=c)
    c.t += 42.0
    assert p.elapsed() == 42.0
