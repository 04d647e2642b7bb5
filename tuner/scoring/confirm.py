"""The confirmation: a load that holds every SLO with headroom, shown with the full sample.

Search points are short, so the recommendation is measured again before ``meets_slo`` is set
(docs/measurement.md):

1. The first load tried is where the configuration's fitted latency reaches ``1 - headroom`` of
   its limit, from all its search points (tuner/scoring/estimate.py, at the margin level
   ``-headroom``), rounded down onto the load axis: interpolated, not the nearest sparse point.
2. Each try has as many requests as the SLO's percentile needs (MLPerf's early-stopping rule,
   probes/slo.py; more when requests go over the limit). It *meets* the SLOs when every check
   holds with the headroom and none is provisional.
3. Then refine within the tries (and the time) allowed: after a try that meets them, the
   capacity is estimated again with that full-size point in it, and a higher load is tried if
   the refit puts the target at least 3 % above it (``MIN_STEP_UP``); after one that does not,
   a lower one, from the refit (or by at least as much as the latency must fall, further where
   the refit says so). Never a load at or above one that missed the headroom, nor at or below
   one that kept it.
4. The result is the highest load that met them; without one, the closest try, which does not
   meet the SLOs, and the caller says so.

``load_margin`` (the open loop's): no try goes above ``(1 - load_margin)`` x the capacity fitted
at the limit itself (x the highest load measured, where every one held the limit). Under
open-loop arrivals latency rises so steeply near saturation that 10 % under the latency limit
is about 1 % under the capacity; there, a margin in latency guards nothing against a heavier
client or a slower minute, a margin in load does.

Pure logic over a ``measure(load)`` callable and the search's samples, tested with scripted ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from probes.metrics import LoadMetrics, Verdict
from tuner.scoring.capacity import LoadAxis
from tuner.scoring.estimate import CapacityEstimate, Constraint, Samples, estimate

STEP_DOWN_FLOOR = 0.85  # the lowest fraction of a missed load the next try goes to
# A try up must aim at least this much above the highest load that met the SLOs: a smaller
# step costs a full-size sample for a gain within what repeats of one load differ by (vLLM's
# client: +-2.5 % on the AMD machines).
MIN_STEP_UP = 1.03
MARGIN_STOP = "the load margin"  # how ``ConfirmResult.stopped`` begins where the margin held it


@dataclass
class Try:
    load: float
    samples: Samples
    verdict: Verdict
    metrics: Any = None  # the caller's summary of the point (LoadMetrics)
    records: Any = None  # the caller's raw records, to write

    def roomy(self, headroom: float) -> bool:
        """Every check holds with the headroom (however many requests it had)."""
        return roomy(self.verdict, headroom)

    def meets(self, headroom: float) -> bool:
        """Roomy, and with enough requests for every percentile (none provisional)."""
        return self.roomy(headroom) and not self.verdict.provisional


def roomy(v: Verdict, headroom: float) -> bool:
    """Whether every check of a verdict holds with the headroom."""
    return v.holds and v.worst_margin <= -headroom


@dataclass
class ConfirmResult:
    tries: list[Try] = field(default_factory=list)
    chosen: Try | None = None  # the highest load that met every SLO with the headroom
    stopped: str = ""  # why refining ended

    @property
    def best_effort(self) -> Try | None:
        """The chosen try, else the highest that held at all, else the lowest tried."""
        if self.chosen is not None:
            return self.chosen
        held = [t for t in self.tries if t.verdict.holds]
        if held:
            return max(held, key=lambda t: t.load)
        return min(self.tries, key=lambda t: t.load) if self.tries else None


def target_load(
    points: Sequence[Samples],
    cons: Sequence[Constraint],
    axis: LoadAxis,
    headroom: float,
    load_margin: float = 0.0,
) -> float:
    """Where the fitted latency reaches (1 - headroom) x its limit, rounded down onto the axis,
    and at most the load ceiling (``ceiling``). Every load held even with headroom: the highest
    measured, under the ceiling;
    none did: ``STEP_DOWN_FLOOR`` x where the limit itself is reached, where a load held that
    (the README command on the Xeon, 2026-12-06: one search point held 14.2 req/s with p99 TTFT
    1.7 s by its drift against 1.8 with headroom, and the confirmation began at half of it, 7.1,
    a figure under the baseline's), or half the lowest where none held even that."""
    est = estimate(points, cons, level=-headroom, resamples=0)
    if est is None:
        return axis.minimum
    at_limit = estimate(points, cons, level=0.0, resamples=0)
    cap = _ceiling_of(at_limit, load_margin)
    if est.censored == "below":
        if at_limit is not None and at_limit.censored != "below" and at_limit.load is not None:
            return axis.floor(min(STEP_DOWN_FLOOR * at_limit.load, cap))
        return axis.floor(min(p.load for p in points) / 2)
    assert est.load is not None
    return axis.floor(min(est.load, cap))


def ceiling(points: Sequence[Samples], cons: Sequence[Constraint], load_margin: float) -> float:
    """``(1 - load_margin)`` x the load where the fit crosses the limit itself, or, where every
    load measured held the limit, x the highest of them (the capacity lies at or above it, so
    the margin holds under it too); unbounded where there is no margin."""
    if load_margin <= 0:
        return math.inf
    return _ceiling_of(estimate(points, cons, level=0.0, resamples=0), load_margin)


def _ceiling_of(at_limit: CapacityEstimate | None, load_margin: float) -> float:
    """``ceiling`` from the limit-level estimate already made. (Censored above, its load is the
    highest measured. Left unbounded there, the README command on a fast AMD box, 2026-12-07
    15:56, confirmed its best at 12.5 requests/s, where 336 requests had held at 12.6 in a
    search its time share cut short, with p99 TTFT judged at 1.80 s against a 2 s limit; the
    505-request try broke, no time was left for a second, and the recommendation did not meet
    its SLO.)"""
    if load_margin <= 0 or at_limit is None or at_limit.censored == "below":
        return math.inf
    if at_limit.load is None:
        return math.inf
    return (1.0 - load_margin) * at_limit.load


def confirm(
    measure: Callable[[float], Try],
    *,
    search_points: Sequence[Samples],
    cons: Sequence[Constraint],
    axis: LoadAxis,
    headroom: float,
    max_tries: int = 3,
    may_try: Callable[[float], str | None] = lambda load: None,
    start: float | None = None,
    load_margin: float = 0.0,
) -> ConfirmResult:
    """Confirm a configuration's load (see the module docstring).

    Args:
        measure: one full-size measurement at a load.
        search_points: the configuration's search samples (the fit starts from them).
        cons: the SLO constraints.
        axis: the load axis (rounding, bounds).
        headroom: every latency at most (1 - headroom) x its limit.
        max_tries: the most measurements.
        may_try: asked before every try after the first with its load: a reason to stop
            (the time budget), or None.
        start: the first load (default: ``target_load``).
        load_margin: no try above (1 - load_margin) x the capacity at the limit (module
            docstring); 0: none.
    """
    res = ConfirmResult()
    points = list(search_points)
    x = (
        axis.floor(start)
        if start is not None
        else target_load(points, cons, axis, headroom, load_margin)
    )
    while True:
        t = measure(x)
        res.tries.append(t)
        points.append(t.samples)
        if len(res.tries) >= max_tries:
            res.stopped = f"{max_tries} tries"
            break
        nxt = _next(res.tries, points, cons, axis, headroom, load_margin)
        if nxt is None:
            res.stopped = _margin_stop(res.tries, points, cons, axis, headroom, load_margin) or (
                "no load left worth a try: none between a try that met the SLOs and one that "
                f"did not, or none {MIN_STEP_UP - 1:.0%} above the highest that met them"
            )
            break
        if why := may_try(nxt):
            res.stopped = why
            break
        x = nxt
    met = [t for t in res.tries if t.meets(headroom)]
    res.chosen = max(met, key=lambda t: t.load) if met else None
    return res


def _next(
    tries: list[Try],
    points: list[Samples],
    cons: Sequence[Constraint],
    axis: LoadAxis,
    headroom: float,
    load_margin: float = 0.0,
) -> float | None:
    """The next load to try, strictly between the highest that held with the headroom and the
    lowest that did not; None when no such load is left on the axis. Direction follows the
    headroom, not the sample size: a try too short for its percentile (the time budget cut
    it) is not improved by another load."""
    met = [t.load for t in tries if t.roomy(headroom)]
    missed = [t.load for t in tries if not t.roomy(headroom)]
    lo = max(met, default=-math.inf)
    hi = min(missed, default=math.inf)
    last = tries[-1]
    est = estimate(points, cons, level=-headroom, resamples=0)
    if last.roomy(headroom):
        if est is None or est.censored == "below":
            return None
        # Every load held even with headroom: reach a little higher than the last try.
        want = est.load if est.censored == "none" and est.load else last.load * 1.1
        nxt = axis.floor(min(want, hi, ceiling(points, cons, load_margin)))
        if nxt < MIN_STEP_UP * lo:
            return None
    else:
        over = max(last.verdict.worst_margin + headroom, 0.05)
        # The search's short points were optimistic: step down to where the refit (with this
        # full-size point in it) crosses, and at least as far as the latency must fall; but not
        # below 0.85 x the load in one step, because near saturation latency explodes with load
        # (under open-loop arrivals above all) and falls as steeply below it: a miss at the
        # edge says little about how far under it the SLO holds again.
        by_margin = last.load / (1.0 + over) if math.isfinite(over) else last.load / 2
        refit = est.load if est is not None and est.load is not None else by_margin
        want = max(min(by_margin, refit), STEP_DOWN_FLOOR * last.load)
        nxt = axis.floor(min(want, last.load - axis.step(last.load)))
    if nxt >= hi:
        nxt = axis.floor(hi - axis.step(hi))
    if nxt <= lo or nxt >= hi or nxt in {t.load for t in tries}:
        return None
    if nxt < axis.minimum:
        return None
    return nxt


def _margin_stop(
    tries: list[Try],
    points: list[Samples],
    cons: Sequence[Constraint],
    axis: LoadAxis,
    headroom: float,
    load_margin: float,
) -> str | None:
    """Why refining up ended, where the last try met the headroom and the load margin's ceiling
    leaves no load ``MIN_STEP_UP`` above it, whatever the fit says. (The README command
    on a fast AMD box, 2026-12-07 19:14: a search cut short by its time share held every load up
    to 10.7 requests/s; the confirmation met at 9.09 with p99 TTFT 742 ms against 2 s and
    stopped there, 85 % of the highest load measured, which said nothing of the margin.)"""
    if load_margin <= 0 or not tries[-1].roomy(headroom):
        return None
    at_limit = estimate(points, cons, level=0.0, resamples=0)
    cap = _ceiling_of(at_limit, load_margin)
    if not math.isfinite(cap) or at_limit is None or at_limit.load is None:
        return None
    if cap >= MIN_STEP_UP * tries[-1].load:
        return None
    of = (
        "the highest load measured, where every one held the limit"
        if at_limit.censored == "above"
        else "the capacity fitted at the limit"
    )
    return (
        f"{MARGIN_STOP}: no try above {axis.label(axis.floor(cap))}, {1 - load_margin:.0%} "
        f"of {of} ({axis.label(axis.floor(at_limit.load))})"
    )


class _Claim(Protocol):
    meets_slo: bool

    @property
    def metrics(self) -> LoadMetrics: ...


def weaker_than(rec: _Claim, base: _Claim) -> bool:
    """Whether a confirmed recommendation claims less than the confirmed baseline, both met
    every SLO with the headroom and full samples: then the baseline is the stronger claim."""
    if not (rec.meets_slo and base.meets_slo):
        return False
    return rec.metrics.output_tokens_per_s < base.metrics.output_tokens_per_s
