"""A configuration's capacity on another workload than the tuned one, on its running server.

Two steps measure a configuration on a workload it was not searched on: the held-out check after
the confirmation (tuner/run/held_out.py: the baseline and the recommendation started again) and,
under ``--objective robust``, every configuration on its own server right after its tuned search
(tuner/run/objective.py). Both run the same capacity search: tuner/scoring/capacity.py's
``find_capacity`` over the Evaluator's own load points (tuner/run/trial.py ``point``: a fresh salt
per point, its records, samples and verdict kept), with the run's measurer given the other
workload for the search's span, and score it as a trial is scored, by output tokens/s at the
capacity estimated from all its points (tuner/scoring/estimate.py).
"""

from __future__ import annotations

import copy
import math
from functools import partial
from typing import TYPE_CHECKING

from probes.derive import lengths
from probes.workload import Workload
from tuner.engines.base import RunningServer
from tuner.report.schema import TrialReport
from tuner.run import sizing
from tuner.run.scoring import describe as describe_estimate
from tuner.run.scoring import under_capacity
from tuner.run.state import RunState
from tuner.scoring.capacity import find_capacity

if TYPE_CHECKING:  # the Evaluator measures across workloads through this module
    from tuner.run.trial import Evaluator


WARMUP_S = 30.0  # a warm-up's time before any was measured
POINT_S = 60.0  # a load point's time before any was measured


def one_s(st: RunState) -> float:
    """A warm-up and one load point, as the run's measured configurations took them: the
    least a capacity search on another workload takes."""
    measured = st.measured()
    warm = [t.warmup_s for t in measured if t.warmup_s]
    points = [p.metrics.duration_s for t in measured for p in t.points if p.metrics.duration_s]
    return (sum(warm) / len(warm) if warm else WARMUP_S) + (
        sum(points) / len(points) if points else POINT_S
    )


def search(
    st: RunState,
    ev: Evaluator,
    server: RunningServer,
    trial: TrialReport,
    wl: Workload,
    start: float,
    label: str,
    deadline: float,
) -> None:
    """A trial's capacity search on workload ``wl`` from load ``start``, its points measured by
    the run's measurer with ``wl`` for its workload; stopped where its next point would end
    after ``deadline`` (on the run's monotonic clock); scored from what it measured, also when
    a Ctrl-C or a dying engine cut it short."""
    assert st.measurer is not None
    kept = st.measurer
    measurer = copy.copy(kept)
    measurer.workload = wl
    abandoned: str | None = None
    st.measurer = measurer
    try:
        trial.warmup_s = measurer.warmup(server, start, st.model_path)
        cap = find_capacity(
            lambda x: ev.point(server, trial, x, sizing.n_search(st, x, trial), label),
            start=start,
            axis=st.axis,
            rate_step=st.opts.rate_step,
            should_stop=partial(time_left, st, trial, deadline),
            too_short=partial(sizing.too_short, st, trial),
        )
        abandoned = cap.abandoned
    finally:
        st.measurer = kept
        score(st, trial, abandoned)
        ev.save(trial)
    if trial.status == "ok" and trial.estimate is not None:
        st.say(f"{label}: capacity {describe_estimate(trial.estimate, st.axis)}")
    else:
        st.say(f"{label}: {trial.status}: {trial.error}")


def start_from(st: RunState, x: float | None, wl: Workload) -> float:
    """Where a capacity search on ``wl`` starts: the configuration's capacity ``x`` on the tuned
    workload, under the rate model scaled by the tokens a request carries there against here (a
    first guess the search climbs or descends from); the run's first load where ``x`` is None."""
    if x is None:
        opts = st.opts
        return (
            float(opts.start_concurrency)
            if st.axis.kind == "concurrency"
            else (opts.start_rate_rps or 1.0)
        )
    tuned, here = lengths(st.opts.workload), lengths(wl)
    if st.axis.kind == "rate" and tuned is not None and here is not None:
        x *= (tuned.input_mean + tuned.output_mean) / (here.input_mean + here.output_mean)
    return st.axis.floor(x)


def time_left(st: RunState, trial: TrialReport, deadline: float, x: float) -> str | None:
    """Stop a capacity search whose next point (at load ``x``) would end after ``deadline``:
    its arrivals as ``sizing.n_search`` sizes them (or its requests at the last point's rate),
    then the last requests' lifetime; at least as long as the last point."""
    if not math.isfinite(deadline) or not trial.points:
        return None
    m = trial.points[-1].metrics
    per_s = x if st.axis.kind == "rate" else max(m.requests_per_s, 1e-3)
    need = sizing.n_search(st, x, trial) / max(per_s, 1e-3) + (m.e2e_ms.p50 or 0.0) / 1000.0
    if st.budget.now() + max(need, m.duration_s) > deadline:
        return "time budget: stopped at its share of the time left"
    return None


def score(st: RunState, trial: TrialReport, abandoned: str | None) -> None:
    """Status and score from the estimate over all the measurement's points, as a trial's."""
    est = trial.estimate = st.estimate(trial.number)
    if est is not None and est.censored != "below" and est.load is not None and not abandoned:
        trial.status, trial.error = "ok", None
        trial.score_tokens_per_s = est.tokens_per_s
        trial.load = {st.axis.key: round(est.load, 3)}
        if (p := under_capacity(trial.points, st.axis)) is not None:
            trial.metrics = p.metrics
        return
    trial.score_tokens_per_s, trial.load = None, None
    if trial.points:
        trial.metrics = trial.points[-1].metrics
    if abandoned:
        trial.status, trial.error = "abandoned", abandoned
    elif trial.points:
        low = min(st.point_load(p) for p in trial.points)
        trial.status = "infeasible"
        trial.error = f"no load met the SLOs (lowest tried: {st.axis.label(low)})"
    else:
        trial.status, trial.error = "failed", "no load point was measured"
