"""Which measured configurations may lead: a quantised one only where its gain pays its quality.

A trial whose quantisation knobs differ from the defaults carries the quality gate's figure
(``quality``): it costs quality, however small the figure came out. It may lead the run (be
carried into the next stage, confirmed, recommended) only where its capacity's gain over the
best configuration that costs none is established (tuner/scoring/quality_gain.py), by more
than the tie band or the run-to-run spread (``RUN_TO_RUN``), whichever is larger; else that one
leads, and the run says why.
"""

from __future__ import annotations

from collections.abc import Iterable

from tuner.report.schema import TrialReport
from tuner.scoring.compare import TIE_BAND
from tuner.scoring.estimate import CapacityEstimate
from tuner.scoring.quality_gain import unpaid
from tuner.servemodel.spreads import RUN_TO_RUN


def costs_quality(t: TrialReport) -> bool:
    return t.quality is not None


def reference(trials: Iterable[TrialReport]) -> TrialReport | None:
    """The best scoring ok trial that costs no quality."""
    free = [t for t in trials if _eligible(t) and not costs_quality(t)]
    return max(free, key=lambda t: t.score_tokens_per_s or 0.0, default=None)


def unpaid_reason(
    t: TrialReport,
    trials: Iterable[TrialReport],
    band: float = TIE_BAND,
    est: CapacityEstimate | None = None,
) -> str | None:
    """Why ``t``'s quality cost is not paid by an established gain over the best trial that
    costs none (None: it costs none, or the gain is established, or nothing to compare).
    ``est``: ``t``'s estimate so far, where its search is still under way."""
    return _unpaid_over(t, reference(trials), band, est)


def may_lead(trials: list[TrialReport], band: float = TIE_BAND) -> list[TrialReport]:
    """The ok, recommendable trials, less those whose quality cost is not paid (the reference
    found once: ``RunState.best`` calls this at every point)."""
    ref = reference(trials)
    return [t for t in trials if _eligible(t) and _unpaid_over(t, ref, band) is None]


def _unpaid_over(
    t: TrialReport, ref: TrialReport | None, band: float, est: CapacityEstimate | None = None
) -> str | None:
    est = est or t.estimate
    if not costs_quality(t) or ref is None or est is None or ref.estimate is None:
        return None
    high = ref.predicted.high if ref.predicted is not None else None
    # A gain beyond what a fresh start of the same configuration could show.
    why = unpaid(est, ref.estimate, high, max(band, RUN_TO_RUN))
    if why is None:
        return None
    name = "the baseline" if ref.number == 0 else f"trial {ref.number}"
    return (
        f"its gain over {name}, which costs no quality, is not established ({why}): a quality "
        "cost is paid only for an established gain"
    )


def _eligible(t: TrialReport) -> bool:
    return t.status == "ok" and not t.rejected
