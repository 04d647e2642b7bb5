"""A trial's score from its points: pure helpers over the capacity estimate
(tuner/scoring/estimate.py).

- ``under_capacity``: the measured point a score stands on (the highest that held below every
  load that failed);
- ``abandon_reason``: whether a trial is clearly beaten already (tuner/scoring/compare.py's rule);
- ``describe``: an estimate in one line.
"""

from __future__ import annotations

import math

from tuner.report.schema import PointReport
from tuner.scoring.capacity import LoadAxis
from tuner.scoring.compare import beaten
from tuner.scoring.estimate import CapacityEstimate


def under_capacity(points: list[PointReport], axis: LoadAxis) -> PointReport | None:
    """The highest point that held below every load that failed (None: none did)."""

    def load(p: PointReport) -> float:
        return float(p.load[axis.key])

    lowest_fail = min((load(p) for p in points if not p.verdict.holds), default=math.inf)
    held = [p for p in points if p.verdict.holds and load(p) < lowest_fail]
    return max(held, key=load) if held else None


def abandon_reason(
    est: CapacityEstimate | None,
    best: CapacityEstimate | None,
    best_number: int,
    n_points: int,
    tie_band: float,
) -> str | None:
    """Clearly beaten: the estimate from a trial's points so far is beaten, at the most its
    points allow, by the best configuration's pessimistic end; never on a coin flip at the
    SLO's edge. None: measure on."""
    if best is None or best.censored == "below" or est is None:
        return None
    if not beaten(est, best, tie_band):
        return None
    return (
        f"beaten: at most {est.most:.0f} tokens/s (the most its {n_points} points allow) "
        f"against at least {best.low:.0f} for trial {best_number}"
    )


def describe(est: CapacityEstimate, axis: LoadAxis) -> str:
    """``24.3 concurrent requests: 301 output tokens/s (90 % 287-315)``, censoring said."""
    hi = "open" if est.high is None else f"{est.high:.0f}"
    where = f"{est.load:.3g} {axis.unit}" if est.load is not None else "below every load tried"
    if est.censored == "above":
        where = f"at least {where} (every load tried held)"
    return f"{where}: {est.tokens_per_s:.0f} output tokens/s (90 % {est.low:.0f}-{hi})"
