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
measured. (The README command on a slow AMD box, 2026-12-07 02:40: trial 1 led at 7:08 of
13 minutes and was confirmed in place; its first try held at 9:16, a second, 10 % higher,
held at 11:16, and the run ended with two configurations measured.)

The last trial the run's ``--trials`` allows, and a confirmation with no try held, keep every
try.
"""

from __future__ import annotations

from tuner.report.schema import TrialReport
from tuner.run import sizing
from tuner.run.state import RunState


def search_instead(st: RunState, trial: TrialReport, try_s: float) -> str | None:
    """Why ``trial``'s confirmation in place, a try of it having held, stops before a further
    try of about ``try_s`` seconds (None: it goes on)."""
    if not st.budget.bounded or len(st.trials) + 1 >= st.opts.trials:
        return None  # no trial can follow this one
    gate = sizing.gate_s(st, trial, strict=False) + sizing.STOP_S
    if not st.budget.fits(gate) or st.budget.fits(try_s + gate):
        return None
    return (
        f"a try more (about {try_s:.0f} s) would leave no room for a further trial (a start, "
        f"a load point and a try: about {gate:.0f} s); the search goes on with this claim"
    )
