"""Whether a confirmation in place, once a try has met the SLOs, tries a higher load or leaves
the time to the search.

A trial that leads when the time budget holds no further trial with the run's end kept back
(a fresh start and two tries for the best, should the next trial lose) is confirmed on its own
server (``sizing.confirm_in_place``). Its first try that holds makes it the confirmed best:
from then on a further trial needs only its start, a load point and, should it lead, one try
on its own server (``sizing.gate_s``). The tries after a held one only raise the claim on the
same configuration (tuner/scoring/confirm.py). Where the budget holds that next trial's gate
now but would not after another such try, the confirmation stops at the claim it has and the
search goes on: a configuration not measured yet can gain more than a tighter claim on one
measured. A higher try that is made keeps the next trial's gate back from its growth (the
requests a try adds where some went over a limit). (The README command on a slow AMD box,
2026-12-07 02:40: trial 1 led at 7:08 of 13 minutes and was confirmed in place; its first try
held at 9:16, a second, 10 % higher, held at 11:16, a third ran to the end, and the run
measured two configurations.)

Where no trial can follow (the last ``--trials`` allows, or no stage left with trials to
measure), and until a try has held, every try is kept.
"""

from __future__ import annotations

from tuner.report.schema import TrialReport
from tuner.run import sizing
from tuner.run.state import RunState


def next_trial_s(st: RunState, trial: TrialReport) -> float | None:
    """What the budget must hold for a trial after ``trial`` (its gate, with ``trial`` the
    confirmed best, and the server's stop), as the stage loop will cost it once ``trial``'s
    own share of the budget is closed; None where no trial can follow."""
    if not st.budget.bounded or len(st.trials) + 1 >= st.opts.trials:
        return None
    d = st.doing
    held = st.budget.trial_deadline
    st.budget.open_trial(None)
    try:
        gate = sizing.gate_s(st, trial, strict=False) + sizing.STOP_S
    finally:
        st.budget.trial_deadline = held
    this_stage = d.stage_started < d.stage_trials and st.budget.stage_fits(gate)
    return gate if this_stage or d.later_trials > 0 else None


def search_instead(
    st: RunState, trial: TrialReport, try_s: float, reserve_s: float = 0.0
) -> str | None:
    """Why ``trial``'s confirmation in place, a try of it having held, stops before a further
    try of about ``try_s`` seconds (None: it goes on); ``reserve_s``: what the confirmation
    keeps back besides."""
    gate = next_trial_s(st, trial)
    if gate is None or not st.budget.fits(gate, reserve_s):
        return None
    if st.budget.fits(try_s + gate, reserve_s):
        return None
    return (
        f"a try more (about {try_s:.0f} s) would leave no room for a further trial (a start, "
        f"a load point and a try: about {gate:.0f} s); the search goes on with this claim"
    )


def kept_from_growth(
    st: RunState, trial: TrialReport, try_s: float, reserve_s: float = 0.0
) -> float:
    """What a try of about ``try_s`` seconds after a held one keeps back from its growth: the
    next trial's gate, where the two fit together (else 0: this try is the time's last use)."""
    gate = next_trial_s(st, trial)
    return gate if gate is not None and st.budget.fits(try_s + gate, reserve_s) else 0.0
