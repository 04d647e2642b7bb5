"""The recommendation: what the run tells the user to launch, at what load, and its gain.

``recommend`` takes the search's best configuration confirmed (tuner/run/confirmation.py): on
its own server after its search where the budget held no restart, else on a fresh start from
its launch command; keeps an earlier confirmation that met every SLO where the later one did
not and the two were too close to call; recommends the baseline where the winner's confirmation
came out below the confirmed baseline's; and sets the gain over the baseline, computed only
confirmed over confirmed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.report.schema import Recommendation, TrialReport
from tuner.run.confirmation import (
    confirm_baseline_late,
    confirm_fresh,
    load_label,
    loads_text,
    tries_text,
)
from tuner.run.state import RunState
from tuner.scoring.compare import too_close
from tuner.scoring.confirm import weaker_than

if TYPE_CHECKING:
    from tuner.run.trial import Evaluator


def _baseline_recommended(base: Recommendation, why: str) -> Recommendation:
    out = base.model_copy()
    out.gain_vs_baseline, out.gain_basis = 1.0, "the baseline is the recommendation"
    out.confirmation = (
        f"{base.confirmation}{why}"
        if base.confirmation  # confirmed late (confirm_baseline_late)
        else f"the baseline's own fresh start from its launch command, confirmed after its "
        f"search{why}"
    )
    return out


def recommend(st: RunState, ev: Evaluator) -> None:
    """Confirm the search's best configuration (on a fresh start, unless it was confirmed on
    its own server after its search because the budget held no restart); set
    ``st.recommended``, with the gain over the baseline's confirmation (made here if the
    budget put it off)."""
    best = st.best()
    if best is None or best.load is None:
        st.say("no configuration met the SLOs at any load: nothing to recommend")
        st.notes.append("no configuration met the SLOs; loosen the SLOs or the workload")
        return
    base = st.baseline_confirmed
    if best.number == 0 and base is not None:
        # Nothing beat the baseline, and it was confirmed on its own fresh start already.
        st.recommended = _baseline_recommended(base, f": {loads_text(st, base)}")
        return
    placed = st.trial_confirmed
    if placed is not None and placed.from_trial == best.number:
        rec = _in_place(st, placed)
    else:
        fresh = confirm_fresh(st, ev, best)
        if fresh is None:
            return
        rec = fresh
    rec = _keep_confirmed(st, rec)
    if base is None and best.number != 0:
        base = confirm_baseline_late(st, ev)
    if base is not None and weaker_than(rec, base):
        # Measured the same way (full sample, fresh start, the headroom), the baseline's claim
        # is the stronger: recommend it, and say what the winner confirmed.
        st.notes.append(
            f"trial {rec.from_trial} led the search, but its confirmation "
            f"({rec.metrics.output_tokens_per_s:.0f} output tokens/s at "
            f"{load_label(st, rec)}) came out below the baseline's "
            f"({base.metrics.output_tokens_per_s:.0f} at {load_label(st, base)}): the "
            "baseline is recommended"
        )
        st.say(f"confirmation: below the confirmed baseline; {st.notes[-1]}")
        st.recommended = _baseline_recommended(
            base, f"; trial {rec.from_trial}'s confirmation came out lower"
        )
        return
    _set_gain(st, rec, base, best)
    st.recommended = rec


def _keep_confirmed(st: RunState, rec: Recommendation) -> Recommendation:
    """An earlier configuration's confirmation that met every SLO with the full sample, rather
    than ``rec``'s that did not, when their search estimates are too close to call and were
    not measured side by side: nothing says the later one is faster, and the earlier one's
    claim is the one that holds (README command, seed 81, 2026-12-03: KV cache fp8 led both
    cores bound by 3.5 %, 503 against 486 tok/s, and its in-place confirmation had time for 369
    of the 505 requests p99 needs, so it said "meets SLO: no" where the one it displaced had
    said yes)."""
    earlier = (st.trial_confirmed, st.displaced_confirmed)
    prev = next((c for c in earlier if c and c.meets_slo and c.from_trial != rec.from_trial), None)
    if prev is None or rec.meets_slo:
        return rec
    a, b = prev.search_estimate, rec.search_estimate
    if a is None or b is None or not too_close(a, b, st.opts.tie_band):
        return rec
    if st.by_worst_gain and not _as_robust(st, prev.from_trial, rec.from_trial):
        return rec  # close on the tuned workload, but behind on another
    kept = _in_place(st, prev)
    st.notes.append(
        f"trial {rec.from_trial} led trial {prev.from_trial} by "
        f"{b.tokens_per_s / a.tokens_per_s - 1:+.1%} in the search, within the "
        f"{st.opts.tie_band:.0%} tie band and not measured side by side, and its confirmation "
        f"did not meet the SLOs with the full sample; trial {prev.from_trial}'s did: it is "
        "recommended"
    )
    st.say(f"confirmation: {st.notes[-1]}")
    return kept


def _as_robust(st: RunState, earlier: int, later: int) -> bool:
    """Whether trial ``earlier``'s worst gain is within the tie band of trial ``later``'s or
    above it (``--objective robust``)."""
    gains = {t.number: t.worst_gain for t in st.measured()}
    a, b = gains.get(earlier), gains.get(later)
    return a is not None and b is not None and a >= b * (1 - st.opts.tie_band)


def _in_place(st: RunState, placed: Recommendation) -> Recommendation:
    """A trial's confirmation on its own server after its search, as the recommendation."""
    rec = placed.model_copy()
    rec.confirmation = (
        f"trial {rec.from_trial}'s own start from its launch command, confirmed after its "
        f"search (the time budget held no restart): {tries_text(rec)} ({loads_text(st, rec)}); "
        "the claim is the highest that met every SLO"
    )
    return rec


def _set_gain(
    st: RunState, rec: Recommendation, base: Recommendation | None, best: TrialReport
) -> None:
    """The headline gain, confirmed over confirmed only (else why it is not given)."""
    need = st.opts.confirm_requests or st.opts.slos.requests_needed
    if base is not None and min(rec.n_requests, base.n_requests) < need:
        # A figure from fewer requests than the percentile needs (the budget cut it) has a
        # window mostly of ramp-up and drain: no ratio of it means anything.
        short = "the recommendation's" if rec.n_requests < need else "the baseline's"
        rec.gain_basis = (
            f"not computed: {short} confirmation had fewer requests than the SLO percentile "
            "needs; compare the search estimates (trials[].estimate) instead"
        )
    elif base is not None and base.metrics.output_tokens_per_s > 0:
        rec.gain_vs_baseline = rec.metrics.output_tokens_per_s / base.metrics.output_tokens_per_s
        met = [name for name, r in (("it", rec), ("the baseline", base)) if not r.meets_slo]
        rec.gain_basis = "confirmed over confirmed" + (
            f" (full-size measurements; {' and '.join(met)} did not meet every SLO with the "
            "headroom)"
            if met
            else " (both full-sample, with the headroom)"
        )
    elif best.number == 0:
        rec.gain_vs_baseline = 1.0
        rec.gain_basis = "the baseline is the recommendation"
    elif st.baseline is not None and st.baseline.status == "infeasible":
        rec.gain_basis = (
            f"none: the baseline meets the SLOs at no load, so no ratio exists: {st.baseline.error}"
        )
    else:
        rec.gain_basis = (
            "not computed: the baseline was not confirmed; compare the search estimates "
            "(trials[].estimate) with each other instead"
        )
