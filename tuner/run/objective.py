"""``--objective robust``: every configuration ranked by its worst gain over several workloads.

A configuration tuned for one workload can lose on another (tuner/run/held_out.py's docstring).
Under ``--objective robust`` every configuration the run measures, the baseline first, is
measured, on its own server right after its capacity search on the tuned workload, on each
``--check-workload`` workload too (tuner/run/workload_search.py), and is ranked by the least of
its gains over the baseline: on the tuned workload and on each of those (``worst_gain``).

- A gain on a workload is the configuration's output tokens/s at its capacity there over the
  baseline's, search figure over search figure, as the trials are compared.
- Where the configuration met the SLOs at no load it tried and the baseline did, its gain there
  is 0; where the baseline met them at none and the configuration did, that workload does not
  limit it (it serves what the defaults do not).
- A configuration not measured on every workload (the time budget ran out, its engine died) has
  no worst gain and may not lead: nothing ranks it on the workloads it was not measured on
  (Optuna is told it was cut short, not that it scored nothing).
- The baseline's worst gain is 1. A baseline that met the SLOs at no load on the tuned workload
  leaves nothing to divide by: the run says so, and its tuned score ranks the configurations
  (tuner/run/state.py ``by_worst_gain``).

What Optuna is told, and what a configuration must beat to lead, stay in output tokens/s on the
tuned workload: the baseline's score there times the worst gain (tuner/run/state.py ``value`` and
``to_beat``). A gain on the tuned workload bounds the worst gain from above, so the serving model,
which predicts the tuned workload, proposes only candidates whose tuned gain could beat the
best's worst gain; and a capacity search is not abandoned for trailing the best on the tuned
workload alone (it may lead on the others).

Time: within a trial's share of a time budget (tuner/run/share.py), the tuned search takes
``1 / (1 + n)`` of what is left once the engine is ready, and each of the ``n`` other workloads an
even part of what its search finds left; none ends later than the whole budget allows once the
run's end is kept back (tuner/run/sizing.py ``reserve_s``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tuner.engines.base import RunningServer
from tuner.options.tune import MAX_ROBUST_WORKLOADS
from tuner.report.schema import AcrossReport, TrialReport
from tuner.run import sizing, workload_search
from tuner.run.state import RunState
from tuner.scoring.gain import gain

if TYPE_CHECKING:  # the Evaluator calls this module
    from tuner.run.trial import Evaluator

# A measurement on another workload is numbered apart from the trials and the held-out check's
# (tuner/run/held_out.py: 900 on): ``ACROSS_FIRST + 100 x its trial's number + its workload's``,
# for at most ``MAX_ROBUST_WORKLOADS`` other workloads (the options refuse more).
ACROSS_FIRST = 10_000


def number(trial_number: int, k: int) -> int:
    """The number of trial ``trial_number``'s measurement on its ``k``-th other workload."""
    return ACROSS_FIRST + (MAX_ROBUST_WORKLOADS + 1) * trial_number + k


@contextmanager
def tuned_share(st: RunState) -> Iterator[None]:
    """Within the block (a robust run's tuned capacity search), the trial's share of the time
    budget narrowed to ``1 / (1 + n)`` of what is left of it, so that the other ``n``
    workloads' searches have the rest; restored after."""
    budget = st.budget
    kept = budget.trial_deadline
    n = len(st.opts.check_workloads)
    if st.robust and math.isfinite(kept):
        budget.trial_deadline = budget.now() + max(0.0, budget.trial_left()) / (1 + n)
    try:
        yield
    finally:
        budget.trial_deadline = kept


def across(
    st: RunState, ev: Evaluator, server: RunningServer, trial: TrialReport, label: str
) -> None:
    """Under ``--objective robust``: ``trial``, just scored on the tuned workload, measured on
    each other workload on ``server``, into ``trial.across``; then every worst gain settled.
    Nothing for a trial with no score on the tuned workload: its worst gain is 0 there (a
    baseline with none leaves the tuned score to rank the configurations, and says so)."""
    if not st.robust:
        return
    if trial.number == 0 and trial.status != "ok":
        why = (
            "--objective robust: the baseline met the SLOs at no load on the tuned workload, "
            "so no gain over it can be formed; configurations are ranked by their score there"
        )
        if why not in st.notes:  # a resumed run that measures its baseline again says it once
            st.notes.append(why)
        st.say(why)
    if trial.status == "ok":
        workloads = st.opts.held_out
        for k, wl in enumerate(workloads):
            left = len(workloads) - k
            sub = TrialReport(
                number=number(trial.number, k),
                stage="across",
                params=trial.params,
                args=trial.args,
                env=trial.env,
                launch_command=trial.launch_command,
                status="failed",
                log_file=trial.log_file,
            )
            if st.trial_dir(sub.number).exists():  # its trial measured again after a resume
                st.store.set_aside(sub.number, f"trial {trial.number} was measured again")
            st.trial_dir(sub.number).mkdir(parents=True)
            where = f"{label}, workload {k + 2} of {len(workloads) + 1} ({wl.label})"
            if not st.budget.fits(workload_search.one_s(st), _reserve_s(st, trial)):
                sub.status, sub.error = "failed", "not measured: the time budget ran out"
                st.say(f"{where}: not measured (time budget)")
            else:
                start = workload_search.start_from(st, st.load_of(trial), wl)
                workload_search.search(
                    st, ev, server, sub, wl, start, where, _deadline(st, trial, left)
                )
            trial.across.append(
                AcrossReport(
                    workload=wl.label,
                    number=sub.number,
                    status=sub.status,
                    error=sub.error,
                    score_tokens_per_s=sub.score_tokens_per_s,
                    load=sub.load,
                    points=len(sub.points),
                )
            )
    settle(st, trial)
    if trial.worst_gain is not None:
        st.say(
            f"{label}: worst gain over the {1 + len(st.opts.check_workloads)} workloads "
            f"{trial.worst_gain:.2f}x the baseline ({gains_text(trial)})"
        )


def _reserve_s(st: RunState, trial: TrialReport) -> float:
    """What a search on another workload keeps back: a trial's, what its tuned search keeps
    (``sizing.reserve_s``); the baseline's, only the run's end. Every gain divides by the
    baseline's figures: without them no configuration is ranked, so they come before the first
    trial's gate. (A robust run of 18 minutes on a slow AMD box, 2026-12-06 21:54: the
    baseline's search on the other workload was refused to keep the first trial's gate, and no
    trial fitted after it either.)"""
    if trial.number == 0:
        return sizing.end_reserve_s(st)
    return sizing.reserve_s(st, trial)


def _deadline(st: RunState, trial: TrialReport, searches_left: int) -> float:
    """When the next of a trial's searches on other workloads must end: an even part of what
    is left of the trial's share (or, the baseline's, of what the run's end leaves), and no
    later than the run's end allows."""
    budget = st.budget
    end = budget.deadline - _reserve_s(st, trial)
    left = min(budget.trial_left(), end - budget.now())  # the baseline has no share of its own
    return budget.now() + max(0.0, left) / max(1, searches_left)


def settle(st: RunState, trial: TrialReport | None = None) -> None:
    """Every measured configuration's gains and worst gain from what is measured so far
    (``trial``: one being measured, not among the run's trials yet)."""
    if st.robust:
        measured = st.measured()
        if trial is not None and all(t is not trial for t in measured):
            measured.append(trial)
        # the baseline, while it is being measured, is the reference already
        base = st.baseline or (trial if trial is not None and trial.number == 0 else None)
        settle_all(base, measured, len(st.opts.check_workloads))


def settle_all(base: TrialReport | None, measured: list[TrialReport], n: int) -> None:
    """Each of ``measured``'s gains over ``base`` on its ``n`` other workloads, and its worst
    gain (``worst_gain``), set on it."""
    for t in measured:
        for k, a in enumerate(t.across):
            b = base.across[k] if base is not None and k < len(base.across) else None
            a.gain = gain(a.score_tokens_per_s, b.score_tokens_per_s) if b is not None else None
        t.worst_gain = worst_gain(base, t, n)


def worst_gain(base: TrialReport | None, t: TrialReport, n: int) -> float | None:
    """The least of ``t``'s gains over ``base`` on the tuned workload and its ``n`` others (the
    module docstring's rules); None where it was not measured on every workload."""
    if base is None or base.status != "ok" or not base.score_tokens_per_s:
        return None
    if t is base:
        return 1.0
    if t.status != "ok" or not t.score_tokens_per_s:
        return 0.0 if t.status == "infeasible" else None
    if len(t.across) < n or len(base.across) < n:
        return None
    gains = [t.score_tokens_per_s / base.score_tokens_per_s]
    for mine, theirs in zip(t.across, base.across, strict=False):
        if "failed" in (mine.status, theirs.status) or "abandoned" in (mine.status, theirs.status):
            return None  # not measured there
        if (g := gain(mine.score_tokens_per_s, theirs.score_tokens_per_s)) is not None:
            gains.append(g)
        elif theirs.score_tokens_per_s and mine.status == "infeasible":
            gains.append(0.0)  # it fails where the defaults serve
        # else the baseline met the SLOs at no load there: no limit
    return min(gains)


def gains_text(t: TrialReport) -> str:
    """Its gain on each other workload, as the progress line shows them."""
    return "; ".join(
        f"{a.workload}: {a.gain:.2f}x" if a.gain is not None else f"{a.workload}: {a.status}"
        for a in t.across
    )
