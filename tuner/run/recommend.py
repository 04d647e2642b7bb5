"""Confirmation and the recommendation: what the run tells the user to launch, at what load.

``confirm_on`` confirms a configuration on a running server with tuner/scoring/confirm.py's pure
logic (the estimated capacity less the headroom, the full sample the SLO percentile needs,
refined within the budget). The baseline is confirmed this way right after its search, unless
the time budget would then hold no trial (tuner/run/sizing.py): then ``confirm_baseline_late``
starts it again after the recommendation's confirmation, if time is left. A trial that leads
when the budget holds no further trial is confirmed on its own server after its search
(tuner/run/trial.py). ``recommend`` otherwise starts the search's best configuration again from
its launch command and confirms it, and sets the run's recommendation, with its gain over the
confirmed baseline computed only confirmed over confirmed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from probes.metrics import LoadMetrics
from tuner.engines.base import EngineDied, EngineStartError, RunningServer, raise_if_died
from tuner.report.schema import ConfirmTry, Recommendation, TrialReport
from tuner.run import sizing, stall, stop
from tuner.run.measure import point_line
from tuner.run.scoring import describe
from tuner.run.state import RunState
from tuner.scoring.compare import too_close
from tuner.scoring.confirm import ConfirmResult, Try, confirm, roomy, target_load, weaker_than
from tuner.scoring.estimate import Samples, estimate
from tuner.storage.records import write_records

if TYPE_CHECKING:
    from tuner.run.trial import Evaluator


def confirm_on(
    st: RunState,
    ev: Evaluator,
    server: RunningServer,
    trial: TrialReport,
    cdir: Path,
    label: str,
    *,
    baseline: bool = False,
    reserve_s: float | None = None,
) -> Recommendation | None:
    """Confirm a configuration on a running server (tuner/scoring/confirm.py): its load with
    headroom,
    the full sample, refined within the budget.

    The baseline's confirmation is full-size or not made (a gain divides by it, and a figure
    from fewer requests than the percentile needs is not divided by), has two tries at most
    under a budget, and keeps ``reserve_s`` back: by default, right after the baseline's
    search, what the first trial and its confirmation on its own server need
    (``sizing.baseline_confirm_reserve_s``). None when the budget has no room for
    one full-size try (the baseline's is then put off: ``confirm_baseline_late``).

    A try that missed the headroom only through a stall at its start (probes/transient.py) is
    set aside and measured again once at the same load (tuner/run/stall.py), where the budget
    holds as many requests again; it is not one of the tries counted."""
    assert st.measurer is not None
    measurer, axis, opts = st.measurer, st.axis, st.opts
    rps = trial.metrics.requests_per_s if trial.metrics else 1.0
    e2e_s = (trial.metrics.e2e_ms.p50 or 0.0) / 1000.0 if trial.metrics else 0.0
    # Open loop: a margin in load too (tuner/scoring/confirm.py says why); closed loop: latency's.
    margin = opts.load_margin if axis.kind == "rate" else 0.0
    points = st.samples.get(trial.number, [])
    first = target_load(points, st.cons, axis, opts.headroom, margin)
    budgeted = opts.time_budget_s is not None
    if reserve_s is not None:
        reserve = reserve_s
    elif baseline:
        reserve = sizing.baseline_confirm_reserve_s(st, trial)
    else:
        reserve = 0.0

    def n_for(x: float) -> int:
        if baseline:  # never cut to the time left: a try fits whole, or is not made
            return sizing.n_confirm_fit(st, x, rps)
        left = st.budget.left(10.0 + reserve)
        return sizing.n_confirm_fit(st, x, rps, left if math.isfinite(left) else None)

    def per_s(x: float) -> float:
        """Requests a second at load ``x``: its rate, or the measured rate (closed loop)."""
        return max(x if axis.kind == "rate" else rps, 1e-3)

    def try_s(x: float, n: int | None = None) -> float:
        """About how long one try takes: its arrivals (or its requests at the measured rate),
        then the last ones' lifetime."""
        return (n_for(x) if n is None else n) / per_s(x) + e2e_s

    def room_for(x: float, n: int) -> int:
        """How many more requests a try may grow by where requests over a limit leave its
        sample short of what the percentile then needs (probes/sequential.py): at most ``n``
        more, and only what the time left holds after its own ``n``."""
        spare_s = st.budget.left(10.0 + reserve) - try_s(x, n) if budgeted else None
        return sizing.growth_room(n, spare_s, per_s(x))

    if budgeted and baseline and not st.budget.fits(try_s(first), reserve):
        st.say(
            f"{label}: not now (time budget: one try needs about {try_s(first):.0f} s, and "
            f"a trial and its confirmation about {reserve:.0f} s more)"
        )
        return None
    cdir.mkdir(parents=True, exist_ok=True)

    stalled = False  # a try set aside as a stall at its start (once a confirmation)

    def measure(x: float) -> Try:
        nonlocal stalled
        n = n_for(x)
        if n < sizing.n_confirm(st, x):
            st.notes.append(
                f"{label}: the time budget allowed {n} requests at {axis.label(x)}, fewer than "
                f"the {sizing.n_confirm(st, x)} the SLO percentile needs: provisional"
            )
        m = measurer.measure(server, x, n, st.model_path, room=room_for(x, n))
        j = measurer.judge(m)
        if stall.again_try(
            ev.stalls, m.records, measurer.slos, missed=not roomy(j.verdict, opts.headroom),
            headroom=opts.headroom, planned=n, measured_again=stalled,
            # as many requests again: never a full try for a short one
            budget_left=may_try(x) is None and n_for(x) >= n,
        ):  # fmt: skip
            # A stall at the try's start, not the load (probes/transient.py): once, at the
            # same load, before it steps the claim down.
            stalled = True
            path = cdir / f"{axis.slug(x)}-disturbed.jsonl"
            stall.set_aside(st, server, m, j.verdict, path, label, x, opts.headroom)
            return measure(x)
        if len(m.records) > n:
            over = ", ".join(f"{v} over {k}" for k, v in m.metrics.over_limit.items() if v)
            st.say(
                f"{label}: {axis.label(x)} grown from {n} to {len(m.records)} requests, as "
                f"the percentile needs with the requests over its limit ({over or 'none'})"
            )
        write_records(cdir / f"{axis.slug(x)}.jsonl", m.records)
        st.say(f"{label}: {axis.label(x):<10} {point_line(m.metrics, j.verdict)}")
        raise_if_died(server, f"during its confirmation at {axis.label(x)}", m.metrics.n_failed > 0)
        stop.check()
        window = measurer.score_window(x, len(m.records), m.metrics)
        return Try(x, Samples.from_records(x, j.records, window), j.verdict, m.metrics)

    def may_try(x: float) -> str | None:
        need = try_s(x)
        if not st.budget.fits(need, reserve):
            return f"time budget: another try at {axis.label(x)} needs about {need:.0f} s"
        return None

    where = f"latency at {1 - opts.headroom:.0%} of its limit by the fit" + (
        f", at most {1 - margin:.0%} of the capacity" if margin else ""
    )
    st.say(
        f"{label}: trial {trial.number} at {axis.label(first)} ({where}) with "
        f"{n_for(first)} requests"
    )
    res = confirm(
        measure,
        search_points=points,
        cons=st.cons,
        axis=axis,
        headroom=opts.headroom,
        max_tries=2 if baseline and budgeted else 3,
        may_try=may_try,
        start=first,
        load_margin=margin,
    )
    rec = _recommendation(st, trial, res, label)
    if baseline and res.tries:
        # The search compares every trial with the baseline: from here on, with an estimate
        # that has the full-size tries in it too (short open-loop points are optimistic).
        for t in res.tries:
            st.add_samples(trial.number, t.samples)
        est = ev.rescore(trial, "its confirmation")
        if est is not None and trial.status == "ok" and est.censored != "below":
            st.say(f"trial {trial.number}: with its confirmation, {describe(est, axis)}")
    return rec


def _recommendation(
    st: RunState, trial: TrialReport, res: ConfirmResult, label: str
) -> Recommendation | None:
    pick = res.best_effort
    if pick is None:
        return None
    axis, headroom = st.axis, st.opts.headroom
    m = pick.metrics
    assert isinstance(m, LoadMetrics)
    m.quality = trial.quality
    met = res.chosen is not None
    if not met:
        st.notes.append(
            f"{label}: "
            + (
                f"the SLOs held at {axis.label(pick.load)}, but not with the {headroom:.0%} "
                "headroom and the full sample asked for"
                if pick.verdict.holds
                else f"no confirmation try met the SLOs ({len(res.tries)} tried; {res.stopped})"
            )
        )
    searched = st.samples.get(trial.number, [])
    new = [t.samples for t in res.tries if all(t.samples is not p for p in searched)]
    capacity = estimate([*searched, *new], st.cons, seed=st.opts.seed + trial.number)
    return Recommendation(
        params=trial.params,
        env=trial.env,
        launch_command=trial.launch_command if st.launches else None,
        load=st.load(pick.load),
        achieved_load={
            "concurrency": round(m.mean_in_flight, 2),
            "requests_per_s": round(m.requests_per_s, 3),
        },
        metrics=m,
        verdict=pick.verdict,
        meets_slo=met,
        provisional=pick.verdict.provisional,
        n_requests=m.n_requests,
        from_trial=trial.number,
        search_score_tokens_per_s=trial.score_tokens_per_s or 0.0,
        sustained_output_tokens_per_s=(
            pick.load * (m.mean_output_tokens or 0.0) * (1.0 - m.error_rate)
            if axis.kind == "rate"
            else m.output_tokens_per_s
        ),
        search_estimate=trial.estimate,
        capacity=capacity,
        tries=[
            ConfirmTry(
                load=st.load(t.load),
                output_tokens_per_s=t.metrics.output_tokens_per_s,
                worst_margin=t.verdict.worst_margin,
                provisional=t.verdict.provisional,
                meets=t.meets(headroom),
                n_requests=t.metrics.n_requests,
            )
            for t in res.tries
        ],
        gain_vs_baseline=None,
        confirmation="",
    )


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
        st.recommended = _baseline_recommended(base, f": {_loads(st, base)}")
        return
    placed = st.trial_confirmed
    if placed is not None and placed.from_trial == best.number:
        rec = _in_place(st, placed)
    else:
        fresh = _confirm_fresh(st, ev, best)
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
            f"{_load_label(st, rec)}) came out below the baseline's "
            f"({base.metrics.output_tokens_per_s:.0f} at {_load_label(st, base)}): the "
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


def _in_place(st: RunState, placed: Recommendation) -> Recommendation:
    """A trial's confirmation on its own server after its search, as the recommendation."""
    rec = placed.model_copy()
    rec.confirmation = (
        f"trial {rec.from_trial}'s own start from its launch command, confirmed after its "
        f"search (the time budget held no restart): {_tries(rec)} ({_loads(st, rec)}); "
        "the claim is the highest that met every SLO"
    )
    return rec


def _tries(rec: Recommendation) -> str:
    n = len(rec.tries)
    return f"{n} full-size {'try' if n == 1 else 'tries'}"


def _loads(st: RunState, rec: Recommendation) -> str:
    return ", ".join(st.axis.label(float(t.load[st.axis.key])) for t in rec.tries)


def _load_label(st: RunState, rec: Recommendation) -> str:
    return st.axis.label(float(rec.load[st.axis.key]))


def _confirm_fresh(st: RunState, ev: Evaluator, best: TrialReport) -> Recommendation | None:
    """``best`` started again from its launch command, warmed up and confirmed."""
    axis = st.axis
    # Its own launch command; in a shared study built again from its settings here (another
    # worker, maybe on another machine, measured it).
    spec = (
        ev.target.relaunch(best)
        if st.shared is None
        else ev.target.spec(best.params, best.number == 0)
    )
    cdir = st.out / "confirmation"
    cdir.mkdir(parents=True, exist_ok=True)
    assert st.measurer is not None
    try:
        with ev.target.server(spec, cdir / "server.log") as server:
            st.measurer.warmup(server, axis.floor(st.load_of(best) or 1.0), st.model_path)
            rec = confirm_on(st, ev, server, best, cdir, "confirmation")
    except EngineStartError as exc:
        what = "the engine died" if isinstance(exc, EngineDied) else "failed to start"
        st.notes.append(f"confirmation: {what}: {exc}; nothing is recommended")
        st.say(f"confirmation: {what}: {exc}")
        return None
    if rec is None:
        return None
    rec.fresh_start = spec is not None
    rec.confirmation = (
        f"engine restarted from launch_command, warmed up, then {_tries(rec)} "
        f"({_loads(st, rec)}); the claim is the highest that met every SLO"
        if spec
        else "the running endpoint (not restarted: autotune does not manage it), warmed up, "
        f"then {rec.n_requests} requests"
    )
    return rec


def confirm_baseline_late(st: RunState, ev: Evaluator) -> Recommendation | None:
    """The baseline's confirmation that the budget put off after its search (so that a trial
    would fit): on a fresh start of the baseline after the recommendation's confirmation,
    when a start, a warm-up and one full-size try still fit. Sets ``st.baseline_confirmed``."""
    b = st.baseline
    opts = st.opts
    if b is None or b.status != "ok" or b.metrics is None or b.load is None:
        return None
    if not (opts.confirm_baseline and st.launches and opts.time_budget_s is not None):
        return None
    need = sizing.confirm_estimate_s(st, best=b, tries=1)
    if not st.budget.fits(need):
        st.notes.append(
            f"the time budget left no room to confirm the baseline (about {need:.0f} s for a "
            "start and one full-size try, after the recommendation's): its figure is its "
            "search estimate, and no gain is divided across a confirmed and an unconfirmed "
            "figure"
        )
        st.say("baseline confirmation: skipped (time budget)")
        return None
    spec = ev.target.relaunch(b) if st.shared is None else ev.target.spec(b.params, True)
    tdir = st.trial_dir(0)
    assert st.measurer is not None
    st.say("baseline confirmation: starting the baseline again (put off to make room for a trial)")
    try:
        with ev.target.server(spec, tdir / "server-confirmation.log") as server:
            st.measurer.warmup(server, st.axis.floor(st.load_of(b) or 1.0), st.model_path)
            base = confirm_on(
                st, ev, server, b, tdir, "baseline confirmation", baseline=True, reserve_s=0.0
            )
    except EngineStartError as exc:
        st.notes.append(f"baseline confirmation: {exc}; no gain is computed")
        st.say(f"baseline confirmation: {exc}")
        return None
    if base is not None:
        base.fresh_start = True
        base.confirmation = (
            "the baseline started again from its launch command after the recommendation's "
            f"confirmation (the budget put it off to make room for a trial): {_loads(st, base)}"
        )
    st.baseline_confirmed = base
    return base


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
