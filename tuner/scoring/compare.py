"""Comparing two configurations' capacities: when one is clearly beaten, when they must be
measured again side by side, and the side-by-side measurement itself.

Two estimates (tuner/scoring/estimate.py) are told apart by their intervals (docs/measurement.md):

- **Beaten**: the challenger's optimistic end is below the best's pessimistic end, by more than
  the tie band. Only then is a configuration abandoned before its capacity is found.
- **Too close to call**: their intervals overlap, or their estimates are within the tie band of
  each other. Then both are
  measured again side by side before one is carried forward: the same loads, interleaved in an
  A-B-B-A order (so a drift of the machine over time hits both alike), each point with a fresh
  salt, and the two capacities are estimated again from all their points.

The tie band (default 5 %) stands for what the bootstrap cannot see: it resamples the requests
of each point, not the run-to-run drift of a shared machine, and a p99 of a few dozen requests
is close to their maximum, so its resamples vary less than a repeat does. These 2-core machines
differ by several per cent between repeats of one configuration (fresh starts of the same one
measured 6 % apart on the Xeon: docs/serving-model.md, search efficiency), so
two estimates closer than that are not told apart without measuring them again.

Pure logic over ``measure`` callables, tested with scripted ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict

from tuner.scoring.estimate import CapacityEstimate

Side = Literal["a", "b"]


TIE_BAND = 0.05


def beaten(challenger: CapacityEstimate, best: CapacityEstimate, band: float = TIE_BAND) -> bool:
    """The challenger cannot come within the tie band of the best's pessimistic end even at the
    most its points allow (the optimistic end of its interval, or the first load that did not
    hold where that is higher: ``CapacityEstimate.most``)."""
    return challenger.most < best.low * (1.0 - band)


def too_close(a: CapacityEstimate, b: CapacityEstimate, band: float = TIE_BAND) -> bool:
    """Their 90 % intervals overlap, or their estimates are within the tie band: their search
    points cannot tell them apart."""
    overlap = a.low <= b.optimistic and b.low <= a.optimistic
    near = abs(a.tokens_per_s - b.tokens_per_s) <= band * max(a.tokens_per_s, b.tokens_per_s)
    return overlap or near


def interleave(loads: Sequence[float], rounds: int = 1) -> list[tuple[Side, float]]:
    """The measuring order: every load for both sides, A-B then B-A, alternating."""
    order: list[tuple[Side, float]] = []
    flip = False
    for _ in range(rounds):
        for x in loads:
            pair: list[Side] = ["b", "a"] if flip else ["a", "b"]
            order.extend((side, x) for side in pair)
            flip = not flip
    return order


@dataclass
class SideBySide:
    order: list[tuple[Side, float]]
    measured: dict[Side, list[object]] = field(default_factory=lambda: {"a": [], "b": []})
    stopped: str | None = None  # why it ended early, if it did


def side_by_side(
    measure: dict[Side, Callable[[float], object]],
    loads: Sequence[float],
    *,
    rounds: int = 1,
    should_stop: Callable[[], str | None] = lambda: None,
) -> SideBySide:
    """Measure both sides at every load, interleaved; whatever ``measure`` returns is kept in
    order per side. ``should_stop`` is asked before each pair (the time budget): a pair is
    never split, so both sides always have the same loads."""
    res = SideBySide(order=interleave(loads, rounds))
    for i, (side, x) in enumerate(res.order):
        if i % 2 == 0 and (why := should_stop()):
            res.stopped = why
            break
        res.measured[side].append(measure[side](x))
    return res


class ComparisonReport(BaseModel):
    """One side-by-side repeat of two configurations, as report.json keeps it."""

    model_config = ConfigDict(extra="forbid")

    trials: tuple[int, int]  # (incumbent, challenger)
    loads: list[float]
    order: list[str]  # e.g. ["a@24", "b@24", "b@21", "a@21"]
    before: tuple[CapacityEstimate | None, CapacityEstimate | None]
    after: tuple[CapacityEstimate | None, CapacityEstimate | None]
    winner: int | None  # the trial carried forward
    separated: bool  # the intervals no longer overlap after the repeat
    note: str


def verdict(
    trials: tuple[int, int],
    loads: Sequence[float],
    run: SideBySide,
    before: tuple[CapacityEstimate | None, CapacityEstimate | None],
    after: tuple[CapacityEstimate | None, CapacityEstimate | None],
) -> ComparisonReport:
    """Which of the two goes on, by the estimates from all their points after the repeat."""
    score = [e.tokens_per_s if e is not None else 0.0 for e in after]
    winner = trials[1] if score[1] > score[0] else trials[0]
    a, b = after
    separated = a is not None and b is not None and not too_close(a, b)
    spread = "; ".join(
        f"trial {t}: {e.tokens_per_s:.0f} tok/s (90 % {e.low:.0f}-"
        f"{'open' if e.high is None else f'{e.high:.0f}'})"
        for t, e in zip(trials, after, strict=True)
        if e is not None
    )
    note = f"side by side at {', '.join(f'{x:g}' for x in loads)}: {spread}"
    if run.stopped:
        note += f"; cut short: {run.stopped}"
    if not separated:
        note += "; still within each other's intervals: the higher estimate goes on"
    return ComparisonReport(
        trials=trials,
        loads=list(loads),
        order=[f"{s}@{x:g}" for s, x in run.order[: sum(len(v) for v in run.measured.values())]],
        before=before,
        after=after,
        winner=winner,
        separated=separated,
        note=note,
    )
