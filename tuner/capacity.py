"""Capacity search on one running engine: the highest load at which every SLO holds.

The score of a server configuration (../shared/MEASUREMENT.md) is its output tokens/s at the
highest load (here: client concurrency) at which every SLO holds and the error rate is under its
limit. The search never restarts the engine. It is pure logic over a ``measure(concurrency)``
callable, so it is tested with a fake.

Steps:
1. Measure at the starting concurrency (the best configuration's capacity so far, so two
   configurations are compared at the same load first).
2. Climb (x2, or less when the worst margin says the limit is near) while the SLOs hold and
   throughput still grows; descend (/2) while they fail, down to concurrency 1.
3. Refine between the highest load that held and the lowest that failed by interpolating the
   worst constraint margin to zero, until the two are within ``resolution``.

Early abandonment: after the first point, ``abandon(point)`` may say the configuration is
clearly beaten (the caller compares with the best so far); the search then stops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class PointOutcome:
    concurrency: int
    holds: bool
    worst_margin: float  # measured / limit - 1 over every SLO and the error rate; <= 0 holds
    output_tokens_per_s: float


@dataclass
class CapacityResult:
    best: PointOutcome | None  # the highest concurrency that held; None: nothing held
    points: list[PointOutcome] = field(default_factory=list)
    abandoned: str | None = None  # why the search stopped early, if it did

    @property
    def score(self) -> float:
        return self.best.output_tokens_per_s if self.best else 0.0


def _next_up(p: PointOutcome, growth: float, max_c: int) -> int:
    # When the worst margin is close to zero, a full doubling likely overshoots: aim at about
    # where latency would reach the limit if it grew linearly with load, but move at least 25 %.
    factor = growth
    if p.worst_margin < 0 and math.isfinite(p.worst_margin):
        factor = min(growth, max(1.25, 1.0 / (1.0 + p.worst_margin)))
    return min(max_c, max(p.concurrency + 1, round(p.concurrency * factor)))


def _interpolate(lo: PointOutcome, hi: PointOutcome) -> int:
    """Where the worst margin crosses zero between a held point and a failed one."""
    m_lo, m_hi = lo.worst_margin, hi.worst_margin
    if math.isfinite(m_lo) and math.isfinite(m_hi) and m_hi > m_lo:
        frac = (0.0 - m_lo) / (m_hi - m_lo)
    else:
        frac = 0.5
    # Keep away from both ends so every step learns something.
    frac = min(0.75, max(0.25, frac))
    c = round(lo.concurrency + frac * (hi.concurrency - lo.concurrency))
    return min(hi.concurrency - 1, max(lo.concurrency + 1, c))


def find_capacity(
    measure: Callable[[int], PointOutcome],
    *,
    start: int,
    max_concurrency: int = 512,
    growth: float = 2.0,
    resolution: float = 1.15,
    max_points: int = 7,
    saturation_gain: float = 1.03,
    abandon: Callable[[PointOutcome], str | None] | None = None,
    should_stop: Callable[[], str | None] = lambda: None,
) -> CapacityResult:
    """Find the highest concurrency whose point holds every SLO.

    Args:
        measure: runs one load point on the live engine.
        start: the first concurrency to try.
        resolution: stop refining once failed/held concurrency is within this ratio.
        max_points: the most load points to measure.
        saturation_gain: stop climbing when throughput grew by less than this factor.
        abandon: after the first point, a reason to give up on this configuration, or None.
        should_stop: checked before every point after the first (the run's time budget); a
            reason stops the search with what it has, recorded in ``abandoned`` when nothing
            held yet.
    """
    start = max(1, min(start, max_concurrency))
    res = CapacityResult(best=None)
    held: list[PointOutcome] = []
    failed: list[PointOutcome] = []
    by_c: dict[int, PointOutcome] = {}

    def run(c: int) -> PointOutcome:
        if res.points and (why := should_stop()):
            raise _Stop(why)
        q = measure(c)
        by_c[c] = q
        res.points.append(q)
        (held if q.holds else failed).append(q)
        return q

    def next_concurrency() -> int | None:
        """The next load to measure, or None when the capacity is found well enough."""
        if len(res.points) >= max_points:
            return None
        top = max(held, key=lambda q: q.concurrency) if held else None
        above = [q for q in failed if top is None or q.concurrency > top.concurrency]
        if top is not None and above:  # bracketed: refine
            hi = min(above, key=lambda q: q.concurrency)
            if hi.concurrency <= top.concurrency * resolution:
                return None
            c = _interpolate(top, hi) if hi.concurrency - top.concurrency > 1 else None
        elif top is not None:  # everything held so far: climb unless saturated
            prev = [q.output_tokens_per_s for q in held if q.concurrency < top.concurrency]
            saturated = bool(prev) and top.output_tokens_per_s < saturation_gain * max(prev)
            if top.concurrency >= max_concurrency or saturated:
                return None
            c = _next_up(top, growth, max_concurrency)
        else:  # everything failed so far: descend
            low = min(failed, key=lambda q: q.concurrency)
            c = max(1, low.concurrency // 2) if low.concurrency > 1 else None
        return None if c is None or c in by_c else c

    first = run(start)
    if abandon is not None and (why := abandon(first)):
        res.abandoned = why
        res.best = first if first.holds else None
        return res
    try:
        while (c := next_concurrency()) is not None:
            run(c)
    except _Stop as stop:
        if not held:
            res.abandoned = stop.reason
    if held:
        res.best = max(held, key=lambda q: q.concurrency)
    return res


class _Stop(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason
