"""Checked on traffic it was not tuned for: the recommendation and the baseline on each
held-out workload (``--check-workload W``, repeatable), after the confirmation.

A configuration tuned for one workload can lose on another (a hand-tuned GLM deployment on
H200 gained 220 % on its target workload and lost 53 % against the defaults on ShareGPT-like
traffic: GPUStack's performance lab, PR 5845). So, once the recommendation is confirmed, the
baseline and then the recommendation are each started again from their launch commands, and on
each server every held-out workload gets a capacity search of its own: tuner/scoring/capacity.py's
``find_capacity`` over the Evaluator's own load points (tuner/run/trial.py ``point``: a fresh
salt per point, its records, samples and verdict kept), scored as a trial is, by output tokens/s
at the capacity estimated from all its points (tuner/scoring/estimate.py). The gain on a workload
is the recommendation's score over the baseline's, search figure over search figure (as the
trials are compared), shown beside the tuned gain. ``derived`` is a workload derived from the
tuned one with another length shape (probes/derive.py says what).

Each measurement is a ``TrialReport`` numbered from ``FIRST_NUMBER`` on (its points' records in
``trials/NNN/``, like a trial's, but never one of the run's trials: it is not in the search, the
checkpoints or the recommendation); the two servers' logs are in ``held_out/``. Engines are
started and stopped by the run's target (stopped by their process group, also on Ctrl-C); a
first Ctrl-C ends the load point being measured, and what was measured is scored and reported.

Under ``--time-budget`` the check takes what the confirmation left: it is skipped, with the
reason in the report, where that holds no two starts and a warm-up and a load point per
configuration and workload; else each of its capacity searches stops at its share of the time
left.
"""

from __future__ import annotations

import copy
import math
from functools import partial
from typing import Literal

from probes.derive import lengths
from probes.describe import describe, sent
from probes.records import RequestRecord
from probes.workload import Workload
from tuner.engines.base import EngineStartError, RunningServer
from tuner.report.held_out_view import loses_sentence
from tuner.report.schema import HeldOutReport, TrialReport
from tuner.run import sizing
from tuner.run.scoring import describe as describe_estimate
from tuner.run.scoring import under_capacity
from tuner.run.state import RunState
from tuner.run.trial import Evaluator
from tuner.scoring.capacity import find_capacity
from tuner.storage.records import RecordsMissing, read_records, records_path

Side = Literal["baseline", "recommended"]
FIRST_NUMBER = 900  # the first held-out measurement's number (above every trial's)
WARMUP_S = 30.0  # a warm-up's time before any was measured
POINT_S = 60.0  # a load point's time before any was measured


def check(st: RunState, ev: Evaluator) -> None:
    """Measure the recommendation and the baseline on every ``--check-workload`` workload
    into ``st.held_out`` (see the module docstring); nothing where none was asked."""
    opts = st.opts
    if not opts.check_workloads:
        return
    workloads = opts.held_out
    st.held_out = [
        _entry(st, w, given) for w, given in zip(workloads, opts.check_workloads, strict=True)
    ]
    rec = st.recommended
    trials = {t.number: t for t in st.measured()}
    why = _why_not(st, trials)
    least = _least_s(st, len(workloads))
    if why is None and not st.budget.fits(least):
        left = max(0.0, st.budget.left())
        why = (
            f"time budget: {left:.0f} s left after the confirmation, under the about "
            f"{least:.0f} s the check needs (two engine starts, then a warm-up and a load point "
            f"per configuration and workload); a --time-budget about {least - left:.0f} s "
            "longer holds it"
        )
    if why is not None or rec is None:
        for e in st.held_out:
            e.skipped = why
        st.say(f"held-out check: skipped: {why}")
        return
    shown = "; ".join(f"{k + 1}: {e.workload['spec']}" for k, e in enumerate(st.held_out))
    st.say(
        f"held-out check: the baseline and trial {rec.from_trial} (the recommendation) on "
        f"{len(workloads)} workload(s) the run was not tuned on: {shown}"
    )
    for e in st.held_out:
        if e.derived:
            st.say(f"held-out check: derived from the tuned workload: {e.derived}")
    first = max(FIRST_NUMBER, 1 + max(trials))
    sides: tuple[Side, Side] = ("baseline", "recommended")
    for i, side in enumerate(sides):
        source = trials[0 if side == "baseline" else rec.from_trial]
        numbers = [first + 2 * k + i for k in range(len(workloads))]
        _side(st, ev, side, source, workloads, numbers, starts_after=1 - i)
    for k, e in enumerate(st.held_out):
        st.say(f"held-out {k + 1}: {_gain_line(e)}")
    if sentence := loses_sentence(st.held_out):
        st.say(f"held-out check: {sentence}")


def _entry(st: RunState, wl: Workload, given: object) -> HeldOutReport:
    rec = st.recommended
    tuned = rec.gain_vs_baseline if rec else None
    basis = "confirmed" if tuned is not None else ""
    if tuned is None and rec is not None:
        best = next((t for t in st.measured() if t.number == rec.from_trial), None)
        base = st.baseline
        if best and base and best.score_tokens_per_s and base.score_tokens_per_s:
            tuned, basis = best.score_tokens_per_s / base.score_tokens_per_s, "search"
    return HeldOutReport(
        workload=describe(wl, []),
        derived=st.opts.derived()[1] if given == "derived" else None,
        tuned_gain=tuned,
        tuned_basis=basis,
    )


def _why_not(st: RunState, trials: dict[int, TrialReport]) -> str | None:
    """Why there is nothing to check, or None."""
    rec = st.recommended
    if rec is None:
        return "nothing was recommended"
    if rec.from_trial == 0:
        return "the recommendation is the baseline (the engine's defaults): nothing to compare"
    base = trials.get(0)
    if base is None or not base.launch_command or rec.from_trial not in trials:
        return "the baseline was not measured"
    return None


# ------------------------------------------------------------------ time
def _least_s(st: RunState, n_workloads: int) -> float:
    """The least the check takes: two starts (and stops), then a warm-up and one load point
    per configuration and workload, costed from what the run measured."""
    return 2 * (sizing.start_estimate_s(st) + sizing.STOP_S) + 2 * n_workloads * _one_s(st)


def _one_s(st: RunState) -> float:
    """A warm-up and one load point, as the run's measured configurations took them."""
    measured = st.measured()
    warm = [t.warmup_s for t in measured if t.warmup_s]
    points = [p.metrics.duration_s for t in measured for p in t.points if p.metrics.duration_s]
    return (sum(warm) / len(warm) if warm else WARMUP_S) + (
        sum(points) / len(points) if points else POINT_S
    )


def _deadline(st: RunState, left_here: int, starts_after: int) -> float:
    """This capacity search's share of the time left: what the starts still to come leave,
    split evenly over the searches still to come (this one's included)."""
    if not st.budget.bounded:
        return math.inf
    after_s = starts_after * (sizing.start_estimate_s(st) + sizing.STOP_S)
    share = max(0.0, st.budget.left(after_s)) / max(1, left_here)
    return st.budget.now() + share


def _time_left(st: RunState, trial: TrialReport, deadline: float, x: float) -> str | None:
    """Stop a held-out capacity search whose next point (at load ``x``) would end after its
    share of the budget: its arrivals as ``sizing.n_search`` sizes them (or its requests at
    the last point's rate), then the last requests' lifetime; at least as long as the last."""
    if not math.isfinite(deadline) or not trial.points:
        return None
    m = trial.points[-1].metrics
    per_s = x if st.axis.kind == "rate" else max(m.requests_per_s, 1e-3)
    need = sizing.n_search(st, x, trial) / max(per_s, 1e-3) + (m.e2e_ms.p50 or 0.0) / 1000.0
    if st.budget.now() + max(need, m.duration_s) > deadline:
        return "time budget: stopped at its share of the time left after the confirmation"
    return None


# ------------------------------------------------------------------ measuring
def _side(
    st: RunState,
    ev: Evaluator,
    side: Side,
    source: TrialReport,
    workloads: list[Workload],
    numbers: list[int],
    starts_after: int,
) -> None:
    """One configuration started again from its launch command, and a capacity search on
    each held-out workload on that one server."""
    name = "the baseline" if side == "baseline" else f"trial {source.number}"
    spec = (
        ev.target.relaunch(source)
        if st.shared is None
        else ev.target.spec(source.params, source.number == 0)
    )
    log = st.out / "held_out" / f"{side}.server.log"
    log.parent.mkdir(parents=True, exist_ok=True)

    def record(k: int, number: int) -> TrialReport:
        trial = TrialReport(
            number=number,
            stage="held-out",
            params=source.params,
            args=source.args,
            env=source.env,
            launch_command=spec.argv if spec else [],
            status="failed",
            log_file=str(log),
        )
        setattr(st.held_out[k], side, trial)
        return trial

    def not_measured(first: int, why: str) -> None:
        for k in range(first, len(workloads)):
            t = getattr(st.held_out[k], side) or record(k, numbers[k])
            t.status, t.error, t.score_tokens_per_s, t.load = "failed", why, None, None
        _settle(st)

    if not st.budget.fits(sizing.start_estimate_s(st) + len(workloads) * _one_s(st)):
        not_measured(0, "not measured: the time budget ran out before it could be started")
        st.say(f"held-out check: {name} not started again (time budget)")
        return
    st.say(f"held-out check: starting {name} again from its launch command")
    st.doing.stage, st.doing.trial, st.doing.config = "held-out check", name, ""
    k = -1  # the workload being measured (-1: the server is not ready yet)
    try:
        with ev.target.server(spec, log) as server:
            st.say(f"held-out check: {name} ready in {server.startup_s or 0:.0f} s")
            for k, (wl, number) in enumerate(zip(workloads, numbers, strict=True)):
                trial = record(k, number)
                st.trial_dir(number).mkdir(parents=True, exist_ok=True)
                left_here = (len(workloads) - k) + starts_after * len(workloads)
                deadline = _deadline(st, left_here, starts_after)
                label = f"held-out {k + 1}, {name}"
                st.doing.config = wl.label
                try:
                    _capacity(st, ev, server, trial, wl, source, label, deadline)
                finally:
                    _describe(st, k, wl)
    except EngineStartError as exc:
        what = "failed to start" if k < 0 else "died"
        not_measured(max(k, 0), f"the engine {what}: {exc}")
        st.say(f"held-out check: {name}: the engine {what}: {exc}")


def _capacity(
    st: RunState,
    ev: Evaluator,
    server: RunningServer,
    trial: TrialReport,
    wl: Workload,
    source: TrialReport,
    label: str,
    deadline: float,
) -> None:
    """A trial's capacity search on workload ``wl``: the Evaluator's load points, measured by
    the run's measurer with ``wl`` for its workload; scored from what it measured, also when
    a Ctrl-C or a dying engine cut it short."""
    assert st.measurer is not None
    kept = st.measurer
    measurer = copy.copy(kept)
    measurer.workload = wl
    start = _start(st, source, wl)
    abandoned: str | None = None
    st.measurer = measurer
    try:
        trial.warmup_s = measurer.warmup(server, start, st.model_path)
        cap = find_capacity(
            lambda x: ev.point(server, trial, x, sizing.n_search(st, x, trial), label),
            start=start,
            axis=st.axis,
            rate_step=st.opts.rate_step,
            should_stop=partial(_time_left, st, trial, deadline),
            too_short=partial(sizing.too_short, st, trial),
        )
        abandoned = cap.abandoned
    finally:
        st.measurer = kept
        _score(st, trial, abandoned)
        _settle(st)
        ev.save(trial)
    if trial.status == "ok" and trial.estimate is not None:
        st.say(f"{label}: capacity {describe_estimate(trial.estimate, st.axis)}")
    else:
        st.say(f"{label}: {trial.status}: {trial.error}")


def _start(st: RunState, source: TrialReport, wl: Workload) -> float:
    """Where a held-out capacity search starts: the configuration's capacity on the tuned
    workload (the recommendation's, where the baseline had none), under the rate model scaled
    by the tokens a request carries there against here: a first guess the search climbs or
    descends from."""
    rec = st.recommended
    x = st.load_of(source)
    if x is None and rec is not None:
        x = next((st.load_of(t) for t in st.measured() if t.number == rec.from_trial), None)
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


def _score(st: RunState, trial: TrialReport, abandoned: str | None) -> None:
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


def _settle(st: RunState) -> None:
    """Every held-out workload's gain from the scores measured so far."""
    for e in st.held_out:
        b, r = e.baseline, e.recommended
        if b is not None and r is not None and b.score_tokens_per_s and r.score_tokens_per_s:
            e.gain = r.score_tokens_per_s / b.score_tokens_per_s
            e.basis = "search figure over search figure: output tokens/s at each capacity"
            continue
        e.gain = None
        missing = [(n, t) for n, t in (("baseline", b), ("recommendation", r)) if t is not None]
        why = [f"the {n} {t.status}: {t.error}" for n, t in missing if not t.score_tokens_per_s]
        if why:
            e.basis = "not computed: " + "; ".join(why)


def _describe(st: RunState, k: int, wl: Workload) -> None:
    """The held-out workload described with what both configurations' points sent."""
    e = st.held_out[k]
    records: list[RequestRecord] = []
    for t in (e.baseline, e.recommended):
        if t is None:
            continue
        for p in t.points:
            try:
                records += read_records(records_path(st.out, t, p))
            except (RecordsMissing, OSError, ValueError, TypeError):
                continue
    e.workload = describe(wl, sent(records))


def _gain_line(e: HeldOutReport) -> str:
    spec = e.workload.get("spec") or e.workload.get("kind")
    tuned = f" (tuned: {e.tuned_gain:.2f}x)" if e.tuned_gain else ""
    if e.gain is None:
        return f"{spec}: no gain ({e.basis or e.skipped or 'not measured'}){tuned}"
    assert e.baseline is not None and e.recommended is not None
    return (
        f"{spec}: {e.recommended.score_tokens_per_s or 0:.0f} against "
        f"{e.baseline.score_tokens_per_s or 0:.0f} output tokens/s, {e.gain:.2f}x the "
        f"baseline{tuned}"
    )
