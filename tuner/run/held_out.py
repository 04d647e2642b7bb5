"""Checked on traffic it was not tuned for: the recommendation and the baseline on each
held-out workload (``--check-workload W``, repeatable), after the confirmation.

A configuration tuned for one workload can lose on another (a hand-tuned GLM deployment on
H200 gained 220 % on its target workload and lost 53 % against the defaults on ShareGPT-like
traffic: GPUStack's performance lab, PR 5845). So, once the recommendation is confirmed, the
baseline and then the recommendation are each started again from their launch commands, and on
each server every held-out workload gets a capacity search of its own
(tuner/run/workload_search.py), scored as a trial is, by output tokens/s at the capacity
estimated from all its points. The gain on a workload
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

Under ``--objective robust`` there is no such check: each ``--check-workload`` workload was
measured on every configuration and ranked the search (tuner/run/objective.py), so none is held
out, and its gains are in the report's table of gains instead.
"""

from __future__ import annotations

import math
from typing import Literal

from probes.describe import describe, sent
from probes.records import RequestRecord
from probes.workload import Workload
from tuner.engines.base import EngineStartError
from tuner.report.held_out_view import loses_sentence
from tuner.report.schema import HeldOutReport, TrialReport
from tuner.run import sizing, workload_search
from tuner.run.state import RunState
from tuner.run.trial import Evaluator
from tuner.scoring.gain import gain
from tuner.storage.records import RecordsMissing, read_records, records_path

Side = Literal["baseline", "recommended"]
FIRST_NUMBER = 900  # the first held-out measurement's number (above every trial's)


def check(st: RunState, ev: Evaluator) -> None:
    """Measure the recommendation and the baseline on every ``--check-workload`` workload
    into ``st.held_out`` (see the module docstring); nothing where none was asked."""
    opts = st.opts
    if not opts.check_workloads:
        return
    if st.robust:  # the workloads ranked the search: not held out (the module docstring)
        st.say(
            "held-out check: none: under --objective robust the --check-workload workloads "
            "ranked every configuration (report.md's table of gains), so none is held out"
        )
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
        if best and base:
            tuned = gain(best.score_tokens_per_s, base.score_tokens_per_s)
            basis = "search" if tuned is not None else ""
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
    starts = 2 * (sizing.start_estimate_s(st) + sizing.STOP_S)
    return starts + 2 * n_workloads * workload_search.one_s(st)


def _deadline(st: RunState, left_here: int, starts_after: int) -> float:
    """This capacity search's share of the time left: what the starts still to come leave,
    split evenly over the searches still to come (this one's included)."""
    if not st.budget.bounded:
        return math.inf
    after_s = starts_after * (sizing.start_estimate_s(st) + sizing.STOP_S)
    share = max(0.0, st.budget.left(after_s)) / max(1, left_here)
    return st.budget.now() + share


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

    if not st.budget.fits(sizing.start_estimate_s(st) + len(workloads) * workload_search.one_s(st)):
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
                    start = workload_search.start_from(st, _tuned_load(st, source), wl)
                    workload_search.search(st, ev, server, trial, wl, start, label, deadline)
                finally:
                    _settle(st)
                    _describe(st, k, wl)
    except EngineStartError as exc:
        what = "failed to start" if k < 0 else "died"
        not_measured(max(k, 0), f"the engine {what}: {exc}")
        st.say(f"held-out check: {name}: the engine {what}: {exc}")


def _tuned_load(st: RunState, source: TrialReport) -> float | None:
    """The configuration's capacity on the tuned workload (the recommendation's, where the
    baseline had none): where its searches on the held-out workloads start, scaled."""
    rec = st.recommended
    x = st.load_of(source)
    if x is None and rec is not None:
        x = next((st.load_of(t) for t in st.measured() if t.number == rec.from_trial), None)
    return x


def _settle(st: RunState) -> None:
    """Every held-out workload's gain from the scores measured so far."""
    for e in st.held_out:
        b, r = e.baseline, e.recommended
        e.gain = gain(r.score_tokens_per_s, b.score_tokens_per_s) if b and r else None
        if e.gain is not None:
            e.basis = "search figure over search figure: output tokens/s at each capacity"
            continue
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
