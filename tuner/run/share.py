"""A trial's share of a time-bounded run, so that a short budget still measures several
configurations instead of refining one.

Every configuration costs a start, a warm-up and load points near its capacity; a capacity
search left to itself refines its bracket for as long as the budget allows. The README command
on the Xeon (13 minutes, 2026-12-06) spent 415 s on its first trial (five points, 268 s of
them measuring), and the budget then held nothing more: two configurations measured, the
quantisation and speculative stages none. So the time left, once the final confirmation is
kept back, is shared evenly between the trials still to come of the first ``FEW_TRIALS``: a
trial's capacity search stops at its share (tuner/run/sizing.py ``points_time_left``), and its
points are sized to leave room for a second one (``sizing.n_search``). The recommendation is
confirmed afterwards with a full-size sample, on a fresh start, whatever its search found.
From the ``FEW_TRIALS``-th trial on, a trial may take what the budget holds.
"""

from __future__ import annotations

from tuner.run.state import RunState

# Trials after the baseline that a time-bounded run shares its budget between: with the
# baseline, four configurations (issue 30's least for the README command).
FEW_TRIALS = 3


def trial_share_s(st: RunState, reserve_s: float) -> float | None:
    """The wall time the trial about to start may take (its start and warm-up included), or
    None where it may take what the budget holds: no time budget, an attached endpoint, a
    shared study (its workers' trials run side by side), or the last of the few.
    ``reserve_s``: what the run keeps back for its end (the final confirmation, and the
    held-out check where one is asked for: ``sizing.end_reserve_s``)."""
    if not (st.budget.bounded and st.launches) or st.shared is not None:
        return None
    to_come = min(FEW_TRIALS, st.opts.trials) - len(st.trials)  # this one included
    if to_come <= 1:
        return None
    return max(0.0, st.budget.left(reserve_s)) / to_come
