"""Capacity search on one running engine: where to measure, to find the highest load at which
every SLO holds.

The score of a server configuration (docs/measurement.md) is its output tokens/s at the
highest load at which every SLO holds and the error rate is under its limit. The load is a
client concurrency (closed loop) or a request rate (open-loop Poisson arrivals): a ``LoadAxis``
says which, and how loads are rounded. The search never restarts the engine. It is pure logic
over a ``measure(load)`` callable, so it is tested with a fake. It decides where to measure;
the score itself is estimated from all the points afterwards (tuner/scoring/estimate.py).

Steps:
1. Measure at the starting concurrency (the best configuration's capacity so far, so two
   configurations are compared at the same load first).
2. Climb (x2, or less when the worst margin says the limit is near; on the rate axis at most
   x1.4, since open-loop latency gives little warning) while the SLOs hold and throughput still
   grows; descend (/2) while they fail, down to concurrency 1.
3. Refine between the highest load that held and the lowest that failed by interpolating the
   worst constraint margin to zero, until the two are within ``resolution``.

Aimed: where the serving model, refitted on the points measured so far, predicts the
configuration's capacity (``aim``), a climb or a descent goes to just under that prediction
in one step (``AIM_BELOW``), and a climb from a point at the prediction steps up by at most
``AIM_STEP``, so that a failure there brackets the capacity within the resolution; a descent
goes no further under the failure than the resolution asks where the model puts the capacity
above that (``_bracket_edge``).

Early abandonment: after every point, ``abandon(points)`` may say the configuration is clearly
beaten (the caller compares its estimate's optimistic end with the best's pessimistic one); the
search then stops.

Latency need not look monotone in a few dozen requests: a point can hold above one that failed.
The highest load that held counts only below the lowest load that failed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True)
class LoadAxis:
    """What a load is: client concurrency (integers from 1) or a request rate (requests/s,
    rounded to 3 significant figures, from ``minimum``)."""

    kind: Literal["concurrency", "rate"]
    minimum: float = 1.0
    maximum: float = 512.0

    @property
    def key(self) -> str:
        """The load's name in reports: ``{"concurrency": N}`` or ``{"rate_rps": R}``."""
        return "concurrency" if self.kind == "concurrency" else "rate_rps"

    @property
    def unit(self) -> str:
        return "concurrent requests" if self.kind == "concurrency" else "requests/s"

    def quantize(self, x: float) -> float:
        if self.kind == "concurrency":
            q = float(round(x))
        else:
            q = float(f"{x:.3g}") if x > 0 else self.minimum
        return min(self.maximum, max(self.minimum, q))

    def floor(self, x: float) -> float:
        """The largest load on the axis at or under ``x`` (at least the minimum)."""
        return self._onto(x, math.floor, 1e-9)

    def ceil(self, x: float) -> float:
        """The smallest load on the axis at or over ``x`` (within the bounds)."""
        return self._onto(x, math.ceil, -1e-9)

    def _onto(self, x: float, rounding: Callable[[float], int], nudge: float) -> float:
        """``x`` rounded onto the axis by ``rounding`` (``nudge``: a float's error that must
        not move it past a load it equals), within the bounds."""
        if self.kind == "concurrency":
            return min(self.maximum, max(self.minimum, float(rounding(x + nudge))))
        if x <= self.minimum:
            return self.minimum
        unit = 10.0 ** (math.floor(math.log10(x)) - 2)  # 3 significant figures
        q = float(f"{rounding(x / unit + nudge) * unit:.3g}")
        return min(self.maximum, max(self.minimum, q))

    def step(self, x: float) -> float:
        """The smallest distinguishable change near ``x``: 1 client, or 1 % of a rate."""
        return 1.0 if self.kind == "concurrency" else max(x * 0.01, 0.001)

    def label(self, x: float) -> str:
        return f"c={int(x)}" if self.kind == "concurrency" else f"rate={x:g}/s"

    def slug(self, x: float) -> str:
        """A load in a file name: ``c0032`` or ``r2.45``."""
        return f"c{int(x):04d}" if self.kind == "concurrency" else f"r{x:g}"


CONCURRENCY = LoadAxis("concurrency")

# The rate axis's largest step up, and the margin under which it shrinks: on the AMD machines
# vLLM's own client saw one configuration's p99 TTFT at 615 ms at 2.75 requests/s, 781 at 3.75,
# 1.28 s at 4.25 and 2.02 s at 4.5 (a 2 s SLO): still 60 % under the limit at 0.85 of capacity.
RATE_STEP = 1.4
RATE_CLOSE_MARGIN = 0.5
# A search stops refining once its lowest failed load is within this factor of the highest
# that held.
RESOLUTION = 1.15
# Where every load failed and the lowest is one that held before, measured once more because
# that first sample was short (``too_short``), the capacity lies just under it: the next load
# steps down by this, not by half. (The 25-minute README command on the Xeon, 2026-12-05: an
# fp8 KV cache held 13 req/s on 195 requests, broke 15.8, broke 13 on 556, and the step down by
# half measured 6.5 for a minute, leaving a bracket 2x wide.)
NEAR_DESCEND = 0.88
# An aimed point goes this far under the capacity the model predicts from the configuration's
# own points so far: after one light point, that prediction was 4-24 % high for four of five
# trials of the README command on the Xeon (2026-12-05: 14.2 requests/s predicted against
# 13.3 held and 14.8 broke; 12.2 against 9.2 held and 10.4 broke; 12.0 against 11.0; 14.8
# against 12.5 and 13.8).
AIM_BELOW = 0.94
# A climb from a load at or above the aimed one steps up by at most this: a failure there
# brackets the capacity within the resolution.
AIM_STEP = 1.12


@dataclass
class PointOutcome:
    load: float
    holds: bool
    worst_margin: float  # measured / limit - 1 over every SLO and the error rate; <= 0 holds
    output_tokens_per_s: float


@dataclass
class CapacityResult:
    best: PointOutcome | None  # the highest load that held below every failed one; None: none
    points: list[PointOutcome] = field(default_factory=list)
    abandoned: str | None = None  # why the search stopped early, if it did

    @property
    def score(self) -> float:
        return self.best.output_tokens_per_s if self.best else 0.0


def consistent_best(points: list[PointOutcome]) -> PointOutcome | None:
    """The highest load that held, among those below the lowest load that failed."""
    lowest_fail = min((p.load for p in points if not p.holds), default=math.inf)
    held = [p for p in points if p.holds and p.load < lowest_fail]
    return max(held, key=lambda p: p.load) if held else None


def bracketed(points: Iterable[tuple[float, bool]], resolution: float = RESOLUTION) -> bool:
    """Whether the lowest load that failed lies within ``resolution`` x the highest that held
    under it: the capacity is found as well as a search refines it. ``points``: (load, held)."""
    pts = list(points)
    lowest_fail = min((x for x, ok in pts if not ok), default=math.inf)
    held = [x for x, ok in pts if ok and x < lowest_fail]
    return bool(held) and lowest_fail <= resolution * max(held)


def _next_up(p: PointOutcome, growth: float, axis: LoadAxis, rate_step: float) -> float:
    factor = growth
    if axis.kind == "rate":
        # Open-loop latency is flat until close to saturation, then rises steeply: a margin far
        # under the limit says little about how far the limit is, so a step up is at most
        # ``rate_step`` (a doubling would overshoot by far and leave a bracket only a straight
        # line can cross, well under the capacity), and smaller once the margin nears the limit.
        near = min(1.0, max(0.0, -p.worst_margin) / RATE_CLOSE_MARGIN)
        factor = min(growth, max(1.05, 1.0 + (rate_step - 1.0) * near))
    elif p.worst_margin < 0 and math.isfinite(p.worst_margin):
        # When the worst margin is close to zero, a full doubling likely overshoots: aim at
        # about where latency would reach the limit if it grew linearly with concurrency, but
        # move at least 25 %.
        factor = min(growth, max(1.25, 1.0 / (1.0 + p.worst_margin)))
    return axis.quantize(max(p.load + axis.step(p.load), p.load * factor))


def _interpolate(lo: PointOutcome, hi: PointOutcome, axis: LoadAxis) -> float | None:
    """Where the worst margin crosses zero between a held point and a failed one; None when
    no load on the axis lies strictly between them."""
    m_lo, m_hi = lo.worst_margin, hi.worst_margin
    if math.isfinite(m_lo) and math.isfinite(m_hi) and m_hi > m_lo:
        frac = (0.0 - m_lo) / (m_hi - m_lo)
    else:
        frac = 0.5
    # Keep away from both ends so every step learns something.
    frac = min(0.75, max(0.25, frac))
    x = axis.quantize(lo.load + frac * (hi.load - lo.load))
    step = axis.step(lo.load)
    x = min(axis.floor(hi.load - step), max(axis.quantize(lo.load + step), x))
    return x if lo.load < x < hi.load else None


def find_capacity(
    measure: Callable[[float], PointOutcome],
    *,
    start: float,
    axis: LoadAxis = CONCURRENCY,
    growth: float = 2.0,
    rate_step: float = RATE_STEP,
    resolution: float = RESOLUTION,
    max_points: int = 7,
    saturation_gain: float = 1.03,
    abandon: Callable[[list[PointOutcome]], str | None] | None = None,
    should_stop: Callable[[float], str | None] = lambda load: None,
    too_short: Callable[[float], bool] = lambda load: False,
    descend: float = 0.5,
    aim: Callable[[], float | None] | None = None,
) -> CapacityResult:
    """Measure loads until the highest one whose point holds every SLO is bracketed.

    Args:
        measure: runs one load point on the live engine.
        start: the first load to try (rounded onto the axis).
        axis: concurrency or request rate, with its bounds.
        growth: the concurrency axis's largest step up while everything holds.
        rate_step: the rate axis's largest step up (smaller near the limit; ``_next_up``).
        resolution: stop refining once the failed/held load ratio is within this.
        max_points: the most load points to measure, not counting a short held load measured
            once more (``too_short``): that point checks what the search already had, and when
            it breaks, the search has lost its only held load with its steps spent. (CI, the
            robust integration test of 2026-12-07: a 12-request point held at 3.58 requests/s,
            three refining points over it broke, 3.58 measured again broke, 3.15 broke, and the
            seventh point ended the search with nothing held.)
        saturation_gain: stop climbing when throughput grew by less than this factor.
        abandon: after every point, a reason to give up on this configuration, or None.
        should_stop: checked with the next load before every point after the first (the
            run's time budget); a
            reason stops the search with what it has, recorded in ``abandoned`` when nothing
            held yet.
        too_short: whether what was measured at a load that held is too short a sample to
            trust, now that a load above it failed (open loop: fewer arrivals than a point
            there would get now, ``sizing.n_search``). The highest load that held below a
            failure is then measured once more, before the bracket is refined or the search
            stops on it; a failure there moves the bracket down.
        descend: while every load failed, the next is this share of the lowest (0.5; a start
            at a calibrated prediction failed by a little, so a smaller step down).
        aim: the capacity the serving model predicts from the points measured so far (None:
            no prediction); read before a climb or a descent (``_aimed``).
    """
    res = CapacityResult(best=None)
    by_load: dict[float, PointOutcome] = {}
    again: set[float] = set()  # loads measured once more (``too_short``)

    def run(x: float) -> PointOutcome:
        if res.points and (why := should_stop(x)):
            raise _Stop(why)
        q = measure(x)
        by_load[x] = q
        res.points.append(q)
        return q

    def next_load() -> float | None:
        """The next load to measure, or None when the capacity is found well enough."""
        if len(res.points) - len(again) >= max_points:
            return None
        failed = [q for q in res.points if not q.holds]
        top = consistent_best(res.points)
        above = [q for q in failed if top is None or q.load > top.load]
        x: float | None
        if top is not None and above:  # bracketed: refine
            narrow = bracketed(((q.load, q.holds) for q in res.points), resolution)
            # A short sample under a failure is measured again once it is what the bracket
            # rests on: while the bracket is wide, the next refining point (full-size) may
            # hold above it and make it moot.
            if narrow and top.load not in again and too_short(top.load):
                again.add(top.load)
                return top.load
            if narrow:
                return None
            x = _interpolate(top, min(above, key=lambda q: q.load), axis)
        elif top is not None:  # everything held so far: climb unless saturated
            prev = [q.output_tokens_per_s for q in res.points if q.load < top.load]
            saturated = bool(prev) and top.output_tokens_per_s < saturation_gain * max(prev)
            if top.load >= axis.maximum or saturated:
                return None
            x = _next_up(top, growth, axis, rate_step)
            if (want := _aimed(aim)) is not None:
                if want > top.load * 1.05:
                    x = axis.floor(min(want, top.load * growth))
                else:  # at the predicted capacity already: a step that brackets it
                    x = min(x, axis.quantize(top.load * AIM_STEP))
                x = max(x, axis.quantize(top.load + axis.step(top.load)))
        else:  # everything failed so far: descend
            low = min(q.load for q in failed)
            step = max(descend, NEAR_DESCEND) if low in again else descend
            x = axis.floor(low * step) if low > axis.minimum else None
            if x is not None and (want := _aimed(aim)) is not None and want < low:
                want = _bracket_edge(want, low, axis, resolution)
                x = axis.floor(min(max(want, low * 0.5), low * NEAR_DESCEND))
        return None if x is None or x in by_load else x

    try:
        run(axis.quantize(start))
        while True:
            if abandon is not None and (why := abandon(res.points)):
                res.abandoned = why
                break
            if (x := next_load()) is None:
                break
            run(x)
    except _Stop as stop:
        if consistent_best(res.points) is None:
            res.abandoned = stop.reason
    res.best = consistent_best(res.points)
    return res


def _aimed(aim: Callable[[], float | None] | None) -> float | None:
    """Where an aimed point goes: ``AIM_BELOW`` under the model's capacity (None: none)."""
    want = aim() if aim is not None else None
    return want * AIM_BELOW if want is not None and want > 0 and math.isfinite(want) else None


def _bracket_edge(want: float, low: float, axis: LoadAxis, resolution: float) -> float:
    """Where an aimed descent from the failed load ``low`` goes: the lowest load that brackets
    the failure within the resolution, rather than ``want`` (just under the model's capacity)
    further under it, wherever the model puts the capacity at or over that load. A hold there
    ends the search; one further under leaves a bracket to refine. (The README command on the
    AMD box, 2026-12-07 08:20: the baseline broke at 4.49 requests/s, the model refitted on
    that point put its capacity at 3.99, 3.75 held and left a bracket 1.2x wide, and a third
    point, 70 s, held at 3.94, where one at 3.91 would have ended the search.)"""
    edge = axis.ceil(low / resolution)
    return edge if want < edge <= want / AIM_BELOW else want


class _Stop(Exception):
    def __init__(self, reason: str) -> None:
        self.reason = reason
