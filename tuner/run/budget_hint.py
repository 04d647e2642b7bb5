"""What a time budget that held few configurations would have needed, said at the run's end.

The boxes differ: on a 2-core AMD EPYC half as fast as the Xeon before it (vLLM's defaults 3.9
requests/s against 10), the README command's 13 minutes measured two configurations, the
baseline and one batching trial, and the quantisation and speculative stages none (2026-12-06
16:41): a start, the probe and three baseline points took 5 m 40 s, and the 505-request
confirmation at 4.6 requests/s about 2 minutes a try. A user whose budget held fewer than the
first few trials (tuner/run/share.py ``FEW_TRIALS``) is told what a configuration cost here and
about what budget would hold them, rather than left to guess.
"""

from __future__ import annotations

import math
import statistics

from tuner.run import share, sizing
from tuner.run.state import RunState


def configuration_s(st: RunState) -> float:
    """What one more configuration costs on this machine: a start (the median after the run's
    first, which fills the compile cache), a warm-up and two load points, as measured here (a
    trial's wall time is no guide: one that ran into the budget took one point, and one that
    led took its confirmation on its own server too)."""
    points = [p.metrics.duration_s for t in st.measured() for p in t.points]
    warmups = [t.warmup_s for t in st.measured() if t.warmup_s]
    return (
        sizing.start_estimate_s(st)
        + (statistics.median(warmups) if warmups else 0.0)
        + 2 * (statistics.median(points) if points else 0.0)
    )


def hint(st: RunState, out_of_time: bool) -> str | None:
    """The line said and noted at the end of a time-bounded run that started fewer trials than
    the first few it shares its budget between. ``out_of_time``: whether the search ended
    with too little time for another trial (``sizing.another_trial_fits``, asked when it
    ended, before the confirmation took what was left). None: it started them, or its search
    stopped for another reason (the model expected no gain), no budget, an attached endpoint,
    or a shared study, whose workers measure side by side."""
    budget = st.opts.time_budget_s
    few = min(share.FEW_TRIALS, st.opts.trials)
    if not out_of_time or budget is None or not st.launches or st.shared is not None:
        return None
    if st.baseline is None:
        return None
    missing = few - len(st.trials)
    if missing <= 0:
        return None
    per = configuration_s(st)
    # The whole budget, not what the run used: a search that ended for lack of time left a
    # tail too short for a trial and the confirmation it would need (the README command on the
    # slow box, 18:48: 177 s, and "14m" would have held no more than 13 did).
    need = max(st.clock.elapsed(), budget) + missing * per
    minutes = math.ceil(need / 60.0)
    measured = 1 + len(st.trials)
    return (
        f"time budget: {budget / 60:.3g} min started {measured} configuration"
        f"{'s' if measured > 1 else ''} (the baseline and {len(st.trials)} trial"
        f"{'s' if len(st.trials) != 1 else ''}); here one more took about {per:.0f} s (a start, "
        f"a warm-up and its load points), so --time-budget {minutes}m would hold about the "
        f"{few + 1} a run shares its budget between (the baseline and {few} trials)"
    )
