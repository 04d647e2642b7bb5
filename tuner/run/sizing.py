"""How many requests a point gets, and whether the time budget holds what comes next.

Estimates from what the run has measured so far (start-up, warm-up and point times, request
rates), weighed against tuner/run/budget.py's deadlines: a search point's size, a confirmation's,
the least a trial needs, what the final confirmation needs, and why a stage or a capacity
search should stop. Reads the run's state; writes only the budget's stage deadline.
"""

from __future__ import annotations

import math
import statistics

from tuner.report.schema import TrialReport
from tuner.run import share
from tuner.run.quality_paid import unpaid_reason
from tuner.run.state import RunState
from tuner.scoring.capacity import bracketed

# The predictions a capacity search starts from (just above them: tuner/run/trial.py): those of a
# build calibrated on the target, by its trials or by the probe's sweeps. A transferred one,
# 30 % away, starts at the best configuration's capacity instead.
BRACKETED = ("calibrated", "probe")


def n_search(st: RunState, x: float, trial: TrialReport | None = None) -> int:
    """A search point's requests: a few per client slot (closed loop); open loop, enough
    arrivals to span ``search_point_s`` and at least three request lifetimes, at most four
    times ``search_point_s``. A rate a little over what the server sustains builds its queue
    slowly: a span shorter than a few lifetimes ends before the queue shows in the latency, and
    the point holds where a longer run breaks. The lifetime is the E2E p50 of the trial's
    highest point that held, or, where a point failed above ``x``, of the lowest such point:
    lifetimes grow with the load (each decoding step slows as the batch grows), so the held
    point's understate them between the two. (The AMD machines, trial 1 of seed 61: held at
    6.49 requests/s with E2E p50 4.9 s and broke at 9.09 with 10.3 s; the 15 s point between,
    at 8.02, held, and 505 requests at 7.13 broke at p99 TTFT 4.43 s.) A search's first point
    that starts just above a prediction is near a capacity by design: its lifetime is the
    predicted one there (TPOT p50 x the output per request). (The README command on the
    Xeon: 161 requests just above the probe's prediction held, the climb broke, and the same
    load with 595 broke: two points more than a first point sized for the edge.)"""
    o = st.opts
    if st.axis.kind == "concurrency":
        return max(o.search_min_requests, math.ceil(o.search_requests_per_slot * x))
    span = o.search_point_s
    points = trial.points if trial is not None else []
    held = [p for p in points if p.verdict.holds]
    above = [p for p in points if not p.verdict.holds and st.point_load(p) > x]
    near = [max(held, key=st.point_load)] if held else []
    if above:
        near.append(min(above, key=st.point_load))
    lives = [e2e for p in near if (e2e := p.metrics.e2e_ms.p50)]
    pred = trial.predicted if trial is not None and not points else None
    if pred is not None and pred.basis in BRACKETED and pred.tpot_ms_p50 and pred.load:
        lives = [pred.tpot_ms_p50 * pred.tokens_per_s / pred.load]
    if lives:
        span = min(max(span, 3.0 * max(lives) / 1000.0), 4.0 * o.search_point_s)
    if trial is not None and math.isfinite(left := st.budget.trial_left()):
        # Within a trial's share of the budget (tuner/run/share.py; the baseline never has
        # one): at most half of what is left of it, so that a second point fits, and at least
        # the shortest a point spans.
        life_s = max(lives, default=0.0) / 1000.0
        span = min(span, max(o.search_point_s, (left - life_s) / 2.0))
    return max(o.search_min_requests, math.ceil(span * x))


# A held point with fewer arrivals than this share of what ``n_search`` gives its load now is
# measured again (``too_short``): two of the three lifetimes it asks for are accepted.
SHORT_SHARE = 2.0 / 3.0


def too_short(st: RunState, trial: TrialReport, x: float) -> bool:
    """Open loop: whether the trial's points at ``x`` had fewer arrivals, together, than
    ``SHORT_SHARE`` of what a point there gets now that a load above it failed. A point
    measured while every load held was sized by the lifetimes of the loads under it; once one
    above fails, the lifetimes there say how long a run at ``x`` must be to show its queue.
    (The AMD machines, trial 1 of seed 64: 164 requests at 6.66 requests/s held at p99 TTFT
    1.20 s, 6.99 broke; the fit crossed at 6.73, and 505 requests at 6.05 met p99 1.73 s,
    where vLLM's client, with 500, broke at 3.16 s.)"""
    if st.axis.kind != "rate":
        return False
    had = sum(p.metrics.n_requests for p in trial.points if st.point_load(p) == x)
    return had < SHORT_SHARE * n_search(st, x, trial)


def n_confirm(st: RunState, c: float) -> int:
    """What a confirmation's SLO percentile needs (with 10 % to spare)."""
    need = st.opts.confirm_requests or math.ceil(st.opts.slos.requests_needed * 1.1)
    return max(need, math.ceil(2 * c)) if st.axis.kind == "concurrency" else need


def n_confirm_fit(st: RunState, c: float, rps: float, left_s: float | None = None) -> int:
    """The confirmation's request count under a time budget: what the SLO percentile needs,
    unless sending it takes more than a quarter of the budget (or ``left_s``, the time left for
    the sending): then what fits, and the verdict says it is provisional. A slow server (static
    batching at 0.4 requests/s) would otherwise spend half an hour confirming a p99. Requests
    go out at the load itself on the rate axis (open loop), at the measured rate ``rps``
    under a concurrency. (The measured rate of a short open-loop point, its requests over its
    span with the drain, is far under its load: the README command on a fast AMD box,
    2026-12-07 18:17, cut a confirmation try at 10.3 requests/s to 433 of its 505 requests
    with 63 s left, sized at trial 1's 6.93, where 505 arrivals take 49 s; provisional, that
    try could not meet the SLOs it held with room.)"""
    n = n_confirm(st, c)
    total = st.opts.time_budget_s
    if total is None:
        return n
    cap_s = 0.25 * total
    if left_s is not None:
        cap_s = min(cap_s, left_s)
    per_s = c if st.axis.kind == "rate" else rps
    floor = math.ceil(2 * c) if st.axis.kind == "concurrency" else 20
    return max(floor, 20, min(n, math.floor(max(per_s, 1e-3) * cap_s)))


def growth_room(n: int, spare_s: float | None, per_s: float) -> int:
    """How many more requests a confirmation try of ``n`` may grow by where requests over a
    limit leave its sample short of what the percentile then needs (probes/sequential.py): at
    most ``n`` more, and only what ``spare_s`` (the time left after the try's own ``n``; None:
    no time budget) holds at ``per_s`` requests a second."""
    if spare_s is None:
        return n
    return max(0, min(n, math.floor(spare_s * per_s)))


def trial_estimate_s(st: RunState) -> float:
    """The mean wall time of the configurations measured so far (the probe, which only the
    baseline runs, left out). A trial that runs into the budget stops measuring early
    (``points_time_left``), so the mean, not the worst case, is the right guard."""
    walls = [t.wall_s for t in st.trials]
    if st.baseline:
        walls.append(st.baseline.wall_s - st.probe_s)
    mean = sum(walls) / len(walls) if walls else 180.0
    # A trial within a share of the budget takes that share at most.
    shared = share.trial_share_s(st, end_reserve_s(st))
    return mean if shared is None else min(mean, shared)


def start_estimate_s(st: RunState, also: TrialReport | None = None) -> float:
    """What starting one more configuration takes: the median start after the run's first,
    else the first (``also``: one being measured, not in the run's lists yet). The first
    start on a machine fills the compile cache the later ones load from (fresh 2-core AMD
    machines: 122-176 s, then 42-82 s for every configuration after it), so the first alone
    overstates the rest; it is all there is to go on until a second."""
    done = st.measured()
    with_also = [*done, also] if also is not None and all(t is not also for t in done) else done
    starts = [t.startup_s for t in with_also if t.startup_s is not None]
    if len(starts) > 1:
        return statistics.median(starts[1:])
    return starts[0] if starts else 60.0


def trial_min_s(st: RunState, best: TrialReport | None = None) -> float:
    """The least a trial needs to be worth starting: a start, a warm-up and one load point at
    the best configuration's load. The capacity search stops on its own when more points would
    eat the confirmation's time (``points_time_left``), so this, not a whole trial (a slow
    static baseline's eight minutes, say), is what the budget must hold."""
    measured = [t for t in st.measured() if t.startup_s is not None]
    startup = start_estimate_s(st, best)
    warmup = sum(t.warmup_s or 0.0 for t in measured) / len(measured) if measured else 30.0
    best = best or st.best()
    if best is None or best.metrics is None or not best.load:
        return startup + warmup + 60.0
    x = st.load_of(best) or 1.0
    point = n_search(st, x, best) / max(best.metrics.requests_per_s, 1e-3)
    # --objective robust: a warm-up and a point on each other workload too, on the same server
    return startup + warmup + point + _others(st) * (warmup + point)


def _others(st: RunState) -> int:
    """The other workloads each configuration is searched on (``--objective robust``)."""
    return len(st.opts.check_workloads) if st.robust else 0


def confirm_try_s(st: RunState, best: TrialReport | None = None) -> float:
    """One full-size confirmation try of the best configuration (or of ``best``): its arrivals
    (or its requests at the measured rate), then the last ones' lifetime. Not scored yet (a
    search under way): at its highest load that held so far. 0 before anything held."""
    best = best or st.best()
    if best is None:
        return 0.0
    if best.metrics is not None:
        x, m = st.load_of(best) or 1.0, best.metrics
    else:
        held = [p for p in best.points if p.verdict.holds]
        if not held:
            return 0.0
        top = max(held, key=st.point_load)
        x, m = st.point_load(top), top.metrics
    return _try_s(st, x, m.requests_per_s, m.e2e_ms.p50)


def _try_s(st: RunState, x: float, rps: float, e2e_ms: float | None) -> float:
    """One full-size confirmation try of a configuration whose capacity is ``x``. Open loop,
    at the load margin under it, where the confirmation's first try goes at most
    (tuner/scoring/confirm.py): its arrivals take ``1 / (1 - load_margin)`` as long as at the
    capacity. (Costed at the capacity, the README command on a fast AMD box, 2026-12-07 18:17,
    kept 86 s back for two tries of trial 1, 12.9 requests/s, that went to 10.9 and 10.3 and
    took 103 s before any grew.)"""
    if st.axis.kind == "rate":
        x *= 1.0 - st.opts.load_margin
    return _point_s(st, n_confirm_fit(st, x, max(rps, 1e-3)), x, rps, e2e_ms)


def _point_s(st: RunState, n: int, x: float, rps: float, e2e_ms: float | None) -> float:
    """About how long ``n`` requests at load ``x`` take: their arrivals (or, closed loop, the
    requests at the measured ``rps``), then the last ones' lifetime."""
    per_s = x if st.axis.kind == "rate" else max(rps, 1e-3)
    return n / max(per_s, 1e-3) + (e2e_ms or 0.0) / 1000.0


def confirm_estimate_s(
    st: RunState, fresh: bool = True, best: TrialReport | None = None, tries: int = 2
) -> float:
    """What the final confirmation needs: a start and a warm-up (``fresh``; not on the
    trial's own server) and two full-size tries of the best configuration (or of ``best``):
    the first, at the fitted headroom load, is at the edge of the noise often enough that a
    second, lower one must fit. ``tries``: the least confirmation that still gives a figure is
    one."""
    all_tries = tries * confirm_try_s(st, best)
    if (best or st.best()) is None or not fresh:
        return all_tries
    return start_estimate_s(st, best) + 30.0 + all_tries


def held_out_s(st: RunState) -> float:
    """What ``--check-workload`` needs after the confirmation (tuner/run/held_out.py): the
    baseline and the recommendation started again, and on each held-out workload a capacity
    search as long as the baseline's own warm-up and points (210 s before it has any); 0
    without one, and under --objective robust (whose other workloads are not held out)."""
    n = len(st.opts.check_workloads)
    if not n or not st.launches or st.robust:
        return 0.0
    b = st.baseline
    search = _searched_s(b) if b is not None and b.points else 210.0
    return 2 * (start_estimate_s(st) + STOP_S) + 2 * n * search


def _searched_s(t: TrialReport) -> float:
    """What a configuration's warm-up and capacity search took on its server."""
    return (t.warmup_s or 0.0) + sum(p.metrics.duration_s for p in t.points)


def end_reserve_s(st: RunState) -> float:
    """What the run keeps back for its end: the confirmation (on a fresh start, with
    ``fresh_tries``) and the held-out check."""
    return confirm_estimate_s(st, tries=fresh_tries(st)) + held_out_s(st)


def fresh_tries(st: RunState, also: TrialReport | None = None) -> int:
    """The full-size tries a confirmation on a fresh start is costed with where a trial could
    still lose and leave the best one: one while the run has measured fewer than
    ``TRIALS_FIRST`` trials (``also``: one just measured, not in the run's list yet), two
    after. The second try is the fallback for a first one at the edge of the noise (the first
    is at 85 % of the fitted capacity at most, ``tuner/run/confirmation.py``); costed from the
    second trial on, it held no second trial on a slow box: the README command on the 2-core
    AMD EPYC of 2026-12-07 03:02 (13 minutes, the defaults at 3.5 requests/s, so that one
    505-request try takes 146 s) had trial 1 lead at 6:50 with 370 s left, against a gate of
    a start, a point and a fresh start with two tries (about 490 s), and measured 2
    configurations where four were asked for. With one try kept back the gate is about 335 s.
    A first try that then breaks with no time for a second leaves the recommendation that
    try's verdict, said as not met."""
    n = len(st.trials)
    if also is not None and also.number != 0 and all(t is not also for t in st.trials):
        n += 1
    return 1 if n < TRIALS_FIRST else 2


# Configurations a run measures after the baseline before the baseline's confirmation is made
# (``baseline_confirm_reserve_s``), and before a fresh confirmation is costed with a second try
# (``fresh_tries``): the README command on the Xeon (13 minutes, 2026-12-05) confirmed the
# baseline in 71 s right after its search and then had time for two trials.
TRIALS_FIRST = 3


def baseline_confirm_reserve_s(st: RunState, baseline: TrialReport) -> float:
    """What the baseline's confirmation, right after its search, keeps back: nothing where no
    trial follows; else ``TRIALS_FIRST`` trials (each the longer of a trial's gate, a start, a
    warm-up and one load point, and what the baseline's own start, warm-up and search took),
    the server's stops, and two tries on the last trial's own server, costed at the baseline's
    load (the longest a trial that beats it needs). No fresh start: a first trial that leads and
    leaves no room for another is confirmed where it runs (``confirm_in_place``); one that
    loses leaves the baseline, confirmed now, the best; and a further trial starts only where
    the best's confirmation on a fresh start fits after it (``another_trial_fits``). In a
    shared study nothing is confirmed in place, so the fresh start is kept back too. (The
    2-core Xeon, seed 125, 2026-12-05: kept back for a fresh start as well, the baseline's
    confirmation waited, and the run ended with 148 s unused, too few for a start and a try:
    the gain went unconfirmed.)"""
    if not (st.launches and st.opts.trials):
        return 0.0
    fresh = st.shared is not None
    gate = trial_min_s(st, baseline) + STOP_S
    # The trials first: the run's first configurations after the baseline, each costed as the
    # baseline's own start, warm-up and search took (the probe left out), must fit before its
    # confirmation is made; else it is put off to the end (``confirm_baseline_late``), where a
    # budget that then has no room leaves the baseline's figure its search estimate.
    # (under --objective robust, a search on each other workload too, on the same server)
    searched = _searched_s(baseline) * (1 + _others(st))
    like_baseline = (baseline.startup_s or 0.0) + searched + STOP_S
    trials = max(gate, like_baseline) * min(TRIALS_FIRST, st.opts.trials)
    return trials + confirm_estimate_s(st, fresh=fresh, best=baseline) + held_out_s(st)


def another_trial_fits(
    st: RunState,
    best: TrialReport | None = None,
    *,
    strict: bool | None = None,
    slack_s: float = 0.0,
) -> bool:
    """Whether the budget holds one more trial (a start, a warm-up, one load point) and the
    confirmation the run could then end with. If the trial leads, one full-size try on its own
    server (``confirm_in_place``); if it does not, and the best is not confirmed yet, the
    best's whole confirmation on a fresh start too, with ``fresh_tries``: once the run has
    measured ``TRIALS_FIRST`` trials, two, since a first one at the edge of the noise needs a
    second, lower one. (The AMD machines, seed 61: a trial whose gate kept one try back ran,
    lost, and left the best's second try 379 of the 505 requests its p99 needs, so the
    recommendation did not meet the SLO. With two kept back, the best is confirmed on its own
    server instead, and a restart is saved.) Before it, one: two held no second trial on a
    slow box. The run's first trial is spared the fresh start: it is the one the probe
    expects most of, and the start it is costed with is the run's first, which filled the
    compile cache (``start_estimate_s``).
    ``strict``: the fresh confirmation counted (or not) whatever the run has measured;
    ``slack_s``: time that passes before the next trial's gate is asked."""
    if strict is None:
        lead = best or st.best()
        strict = bool(st.trials) and lead is not None and not _confirmed(st, lead)
    return st.budget.fits(gate_s(st, best, strict) + slack_s)


def gate_s(st: RunState, best: TrialReport | None, strict: bool) -> float:
    one_try = confirm_try_s(st, best)
    fresh = confirm_estimate_s(st, best=best, tries=fresh_tries(st, best)) if strict else 0.0
    return trial_min_s(st, best) + max(one_try, fresh) + held_out_s(st)


def _confirmed(st: RunState, t: TrialReport) -> bool:
    if t.number == 0:
        return st.baseline_confirmed is not None
    return st.trial_confirmed is not None and st.trial_confirmed.from_trial == t.number


def confirm_in_place(st: RunState, trial: TrialReport, best: TrialReport | None) -> bool:
    """Whether ``trial``, just measured, is confirmed on its own server right after its
    search: it beat ``best`` (the best before it), and the time budget holds no further trial
    with it as the best, unconfirmed (so a later trial that lost would leave it a fresh
    start and a try). A fresh start would then only take from the confirmation's tries."""
    if trial.status != "ok" or trial.rejected or trial.score_tokens_per_s is None:
        return False
    if st.by_worst_gain and trial.worst_gain is None:
        return False  # not measured on every workload: not ranked (tuner/run/objective.py)
    if unpaid_reason(trial, st.measured(), st.opts.tie_band):
        return False  # it does not lead: its quality cost is not paid (quality_paid.py)
    if best is not None and st.value(trial) < st.value(best):
        return False
    return (
        st.budget.bounded
        and st.shared is None
        and st.launches
        and not another_trial_fits(st, trial, strict=True, slack_s=IN_PLACE_SLACK_S)
    )


# What passes between the choice of a confirmation in place and the next trial's gate, and what
# that gate then counts that this one did not: the server's stop, the stage's bookkeeping, and
# the trial's own start and warm-up joining the run's estimates. Without it, the README command
# on the AMD box (2026-12-07 13:19) found that another trial fitted when its second trial led,
# stopped that trial's server, and 5 s later found too little time (250 s) for a trial: no
# fourth configuration, and the leader confirmed on a fresh start that took 55 s. With 15 s
# (13:55) the same happened with 263 s left, 10 s after the trial's score.
IN_PLACE_SLACK_S = 30.0


def time_left_reason(st: RunState, started: list[int] | None = None) -> str | None:
    """Why no further trial of this stage should start, or None."""
    if not another_trial_fits(st):
        return (
            f"time budget: {st.budget.left():.0f} s left, too little for a start, one load "
            "point and a confirmation"
        )
    # A stage keeps its share of the budget for the stages after it (its first trial always
    # runs if the whole budget allows).
    if started and not st.budget.stage_fits(trial_estimate_s(st)):
        return "this stage's share of the time budget is spent (later stages keep theirs)"
    return None


def last_of_stage(st: RunState, started: list[int], planned: int) -> bool:
    """Whether the trial about to start is its stage's last after one of its own
    (``started``): the stage's planned trials, or its share of the time budget, hold no other
    after it (``time_left_reason`` asks the same of the next one). The serving model chooses
    such a trial for its surest gain (tuner/search/choice.py)."""
    if not started:
        return False
    if planned - len(started) <= 1:
        return True
    est = trial_estimate_s(st)
    # the stage's share, or the whole budget with the run's end kept back (as
    # ``another_trial_fits`` asks, after this trial)
    return not st.budget.stage_fits(2 * est) or not st.budget.fits(est + gate_s(st, None, False))


def open_stage(st: RunState, n_trials: int, later_trials: int) -> None:
    """This stage's share of the time left, in proportion to its planned trials."""
    share = n_trials / max(1, n_trials + later_trials)
    st.budget.open_stage(share, reserve_s=end_reserve_s(st))


def points_time_left(
    st: RunState, trial: TrialReport | None = None, x: float | None = None
) -> str | None:
    """Stop a capacity search early when the budget must keep time for the confirmation: the
    next point (at load ``x``, where given: its arrivals as ``n_search`` sizes them and its
    last requests' lifetime; at least as long as the trial's last point) must fit before it.
    (The README command on the Xeon, 2026-12-05 21:38: a point costed as the last one, 35 s,
    fitted with a second to spare; measured again with more requests it took 59 s, and the
    trial that then led had time for 108 of the 505 requests its confirmation needed.)"""
    last_s = trial.points[-1].metrics.duration_s if trial is not None and trial.points else 0.0
    need_s = last_s
    if x is not None and trial is not None and trial.points and st.axis.kind == "rate":
        m = trial.points[-1].metrics
        need_s = max(
            last_s, _point_s(st, n_search(st, x, trial), x, m.requests_per_s, m.e2e_ms.p50)
        )
    if not st.budget.fits(need_s, reserve_s(st, trial)):
        return "time budget: stopped measuring to keep time for the confirmation"
    if trial is not None and not st.budget.trial_fits(need_s + STOP_S) and not _unscored(trial):
        return (
            "its share of the time budget is spent (the budget is shared so that several "
            "configurations are measured)"
        )
    return None


def _unscored(trial: TrialReport) -> bool:
    """A trial whose one point broke: it has cost a start and scores nothing, so it takes one
    step down past its share of the budget (the whole budget permitting), where a point that
    holds gives it a score. (The README command on the Xeon, 2026-12-06 13:31: both batching
    trials broke at their first point, 11.2 and 12.2 requests/s, just under transferred
    predictions, and were abandoned there; the quantisation stage then started from the
    defaults, where a grid measured with vLLM's client an hour before put those builds' capacity
    at 1.3-1.45x the defaults'.)"""
    return len(trial.points) == 1 and not trial.points[0].verdict.holds


def reserve_s(st: RunState, trial: TrialReport | None) -> float:
    """What a trial's capacity search keeps back for the confirmation. While the trial leads
    (its estimate so far at least what it must beat, ``RunState.to_beat``, or every load
    held; at a quality cost, with a gain that pays it, tuner/run/quality_paid.py), tries at its
    own estimated capacity on its own server, where it is confirmed if time runs short
    (``confirm_in_place``): two once its capacity is bracketed as narrowly as the search refines
    it, else one, so that a point which narrows a wide bracket still fits. (Every load
    held: the capacity lies above the highest, and a try there is the longest the confirmation
    could take. A wide bracket: its straight-line crossing lies under the capacity, and a
    first try at the load margin under that meets the SLOs with room.) Else the best's
    confirmation on a fresh start. The baseline, while trials are to follow, keeps back the
    first trial's gate (``_first_trial_s``), once one of its loads has held: it is the reference
    every gain divides by, so until it has a figure it keeps back nothing. (The README command
    on a Xeon four times slower than the day before, 2026-12-06: the probe's prediction, 2.0
    requests/s, broke, 1.57 broke by 10 %, and the search stopped to keep the first trial's
    gate; the trial that followed had no load to start from and the run no gain to state.)"""
    if trial is not None and trial.number == 0 and st.launches and st.opts.trials and not st.trials:
        if not any(p.verdict.holds for p in trial.points):
            return 0.0
        return _first_trial_s(st, trial)
    best = st.best()
    if trial is None or best is None or best is trial:
        return end_reserve_s(st)
    est = st.estimate(trial.number)
    held = [p for p in trial.points if p.verdict.holds]
    if est is None or est.censored == "below" or not held:
        return end_reserve_s(st)
    if est.censored != "above" and est.tokens_per_s < st.to_beat(best):
        # Behind the best. (Censored above, every load held: its capacity lies above its
        # highest load, which is the best's capacity or more, and it leads so far.)
        return end_reserve_s(st)
    if unpaid_reason(trial, st.measured(), st.opts.tie_band, est):
        # Ahead, at a quality cost its gain does not pay so far: it would not lead, and the
        # best is confirmed on a fresh start. (The README command on a fast AMD box,
        # 2026-12-07 16:25: an fp8 KV cache ahead of a batching trial's lower bound took two
        # more points, 64 and 75 s, keeping back one try on its own server; it was not carried,
        # and the best's fresh start left time for 387 of the 459 requests its p99 needs.)
        return end_reserve_s(st)
    top = max(held, key=st.point_load)
    x = est.load if est.censored == "none" and est.load else st.point_load(top)
    one = _try_s(st, x, top.metrics.requests_per_s, top.metrics.e2e_ms.p50)
    narrow = bracketed((st.point_load(p), p.verdict.holds) for p in trial.points)
    return (2 * one if narrow else one) + held_out_s(st)


# Between a capacity search's last point and the next trial's gate: stopping the server,
# scoring, saving the checkpoint (16 s on a 2-core Intel Xeon, 2026-12-02).
STOP_S = 20.0


def _first_trial_s(st: RunState, baseline: TrialReport) -> float:
    """What the baseline's search keeps back while trials are to follow: the first trial's
    gate (``another_trial_fits``: a start, a warm-up, one load point, one try on its own
    server), estimated from the baseline's points so far, and the baseline server's stop. The
    baseline is the reference and the trials the product: on a 2-core Intel Xeon (2026-12-02,
    a 13-minute budget, a 163 s cold start), a baseline search that kept nothing back
    bisected its edge with 60 s points until 222 s were left, no trial fitted, and the run
    recommended the defaults."""
    return gate_s(st, baseline, strict=False) + STOP_S
