"""A step that costs quality is taken only for a gain that is established.

A quantised configuration (a smaller KV cache dtype, quantised weights) pays in quality, measured
by the gate against the baseline's perplexity. What it buys is capacity, and the search may only
say it bought some where the measurements show it: its capacity's pessimistic end above the most
the configuration it would displace can have (that one's optimistic end, or the tokens/s of its
first load that did not hold), and its estimate above that one's by more than fresh starts of
one configuration differ by (``band``: the run passes the larger of the tie band,
tuner/scoring/compare.py, and the serving model's run-to-run spread, 8 %).

Where the configuration it would displace is a lower bound (every load it was tried at held:
the budget's share of a trial ended before a load broke), the measurements bound nothing from
above; the serving model's prediction for it stands in where it has one, its optimistic end, and
only if the measurement has not already refuted it. Otherwise nothing is established and the
quality is not paid. The README command on the Xeon (2026-12-06 10:08) carried an fp8 KV cache at
1,032 tok/s over a batching trial whose one point held at 813; vLLM's own client then measured
the fp8 KV cache 4.5-5 % slower than the same configuration without it, in both pairs of a grid.

Pure logic over capacity estimates, tested with scripted ones.
"""

from __future__ import annotations

import math

from tuner.scoring.compare import TIE_BAND
from tuner.scoring.estimate import CapacityEstimate


def ceiling(ref: CapacityEstimate, predicted_high: float | None = None) -> float:
    """The most ``ref``'s capacity can be, in output tokens/s: what its points allow where one
    of them broke, else the prediction's optimistic end where it is above what held (infinite
    where neither bounds it)."""
    if ref.censored != "above":
        return ref.most
    if predicted_high is not None and predicted_high >= ref.tokens_per_s:
        return predicted_high
    return math.inf


def unpaid(
    candidate: CapacityEstimate,
    ref: CapacityEstimate,
    predicted_high: float | None = None,
    band: float = TIE_BAND,
) -> str | None:
    """Why ``candidate``'s gain over ``ref`` is not established (None: it is). ``predicted_high``:
    the optimistic end of the serving model's prediction for ``ref``, if it has one."""
    top = ceiling(ref, predicted_high)
    if math.isinf(top):
        return (
            f"{ref.tokens_per_s:.0f} tok/s is a lower bound (every load it was tried at held) "
            "and no prediction bounds it from above"
        )
    if candidate.low <= top:
        source = (
            "its prediction's optimistic end allows"
            if ref.censored == "above"
            else "its points allow"
        )
        return (
            f"its pessimistic end, {candidate.low:.0f} tok/s, is not above the "
            f"{top:.0f} tok/s {source}"
        )
    if candidate.tokens_per_s <= ref.tokens_per_s * (1.0 + band):
        return (
            f"{candidate.tokens_per_s:.0f} tok/s against {ref.tokens_per_s:.0f} is within "
            f"{band * 100:.0f} %, what fresh starts of one configuration differ by"
        )
    return None
