"""How many requests a point gets, and whether the time budget holds what comes next.

Estimates from what the run has measured so far (start-up, warm-up and point times, request
rates), weighed against tuner/budget.py's deadlines: a search point's size, a confirmation's,
the least a trial needs, what the final confirmation needs, and why a stage or a capacity
search should stop. Reads the run's state; writes only the budget's stage deadline.
"""

from __future__ import annotations

import math

from tuner.report import TrialReport
from tuner.state import RunState


def n_search(st: RunState, x: float, trial: TrialReport | None = None) -> int:
    """A search point's requests: a few per client slot (closed loop); open loop, enough
    arrivals to span ``search_point_s`` and at least three request lifetimes (E2E p50 of the
    trial's highest point that held), at most four times ``search_point_s``. A rate a little
    over what the server sustains builds its queue slowly: a span shorter than a few lifetimes
    ends before the queue shows in the latency, and the point holds where a longer run breaks.
    (An overloaded point's lifetimes are its queue, not a request's.)"""
    o = st.opts
    if st.axis.kind == "concurrency":
        return max(o.search_min_requests, math.ceil(o.search_requests_per_slot * x))
    span = o.search_point_s
    held = [p for p in trial.points if p.verdict.holds] if trial is not None else []
    if held and (e2e := max(held, key=st.point_load).metrics.e2e_ms.p50):
        span = min(max(span, 3.0 * e2e / 1000.0), 4.0 * o.search_point_s)
    return max(o.search_min_requests, math.ceil(span * x))


def n_confirm(st: RunState, c: float) -> int:
    """What a confirmation's SLO percentile needs (with 10 % to spare)."""
    need = st.opts.confirm_requests or math.ceil(st.opts.slos.requests_needed * 1.1)
    return max(need, math.ceil(2 * c)) if st.axis.kind == "concurrency" else need


def n_confirm_fit(st: RunState, c: float, rps: float, left_s: float | None = None) -> int:
    """The confirmation's request count under a time budget: what the SLO percentile needs,
    unless that takes more than a quarter of the budget (or the time left): then what fits,
    and the verdict says it is provisional. A slow server (static batching at 0.4 requests/s)
    would otherwise spend half an hour confirming a p99."""
    n = n_confirm(st, c)
    total = st.opts.time_budget_s
    if total is None:
        return n
    cap_s = 0.25 * total
    if left_s is not None:
        cap_s = min(cap_s, left_s)
    floor = math.ceil(2 * c) if st.axis.kind == "concurrency" else 20
    return max(floor, 20, min(n, math.floor(max(rps, 1e-3) * cap_s)))


def trial_estimate_s(st: RunState) -> float:
    """The mean wall time of the configurations measured so far (the probe, which only the
    baseline runs, left out). A trial that runs into the budget stops measuring early
    (``points_time_left``), so the mean, not the worst case, is the right guard."""
    walls = [t.wall_s for t in st.trials]
    if st.baseline:
        walls.append(st.baseline.wall_s - st.probe_s)
    return sum(walls) / len(walls) if walls else 180.0


def trial_min_s(st: RunState) -> float:
    """The least a trial needs to be worth starting: a start, a warm-up and one load point at
    the best configuration's load. The capacity search stops on its own when more points would
    eat the confirmation's time (``points_time_left``), so this, not a whole trial (a slow
    static baseline's eight minutes, say), is what the budget must hold."""
    measured = [t for t in st.measured() if t.startup_s is not None]
    startup = sum(t.startup_s or 0.0 for t in measured) / len(measured) if measured else 60.0
    warmup = sum(t.warmup_s or 0.0 for t in measured) / len(measured) if measured else 30.0
    best = st.best()
    if best is None or best.metrics is None or not best.load:
        return startup + warmup + 60.0
    x = st.load_of(best) or 1.0
    point = n_search(st, x, best) / max(best.metrics.requests_per_s, 1e-3)
    return startup + warmup + point


def confirm_estimate_s(st: RunState) -> float:
    """What the final confirmation needs: a start, a warm-up and two full-size tries (the
    first at the fitted headroom load is at the edge of the noise often enough that a second,
    lower one must fit)."""
    best = st.best()
    if best is None or best.metrics is None:
        return 0.0
    x = st.load_of(best) or 1.0
    rps = max(best.metrics.requests_per_s, 1e-3)
    per_s = x if st.axis.kind == "rate" else rps
    e2e_s = (best.metrics.e2e_ms.p50 or 0.0) / 1000.0
    one_try = n_confirm_fit(st, x, rps) / max(per_s, 1e-3) + e2e_s
    return (best.startup_s or 60.0) + 30.0 + 2 * one_try


def time_left_reason(st: RunState, started: list[int] | None = None) -> str | None:
    """Why no further trial of this stage should start, or None."""
    left = st.budget.left()
    need = trial_min_s(st) + confirm_estimate_s(st)
    if left < need:
        return (
            f"time budget: {left:.0f} s left; a start, one load point and the confirmation "
            f"need about {need:.0f} s"
        )
    # A stage keeps its share of the budget for the stages after it (its first trial always
    # runs if the whole budget allows).
    if started and not st.budget.stage_fits(trial_estimate_s(st)):
        return "this stage's share of the time budget is spent (later stages keep theirs)"
    return None


def open_stage(st: RunState, n_trials: int, later_trials: int) -> None:
    """This stage's share of the time left, in proportion to its planned trials."""
    share = n_trials / max(1, n_trials + later_trials)
    st.budget.open_stage(share, reserve_s=confirm_estimate_s(st))


def points_time_left(st: RunState, trial: TrialReport | None = None) -> str | None:
    """Stop a capacity search early when the budget must keep time for the confirmation: the
    next point (about as long as the trial's last one) must fit before it."""
    last_s = trial.points[-1].metrics.duration_s if trial is not None and trial.points else 0.0
    if not st.budget.fits(last_s, confirm_estimate_s(st)):
        return "time budget: stopped measuring to keep time for the confirmation"
    return None
