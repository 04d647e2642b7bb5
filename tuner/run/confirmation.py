"""A configuration confirmed on a running server: the one executor of tuner/scoring/confirm.py's
pure rules (where a try goes, when the claim is met, when to stop).

``Confirmation`` runs the tries on one server: the estimated capacity less the headroom, the
full sample the SLO percentile needs (grown where requests over a limit leave it short), a try
set aside once where only a stall at its start broke it (tuner/run/stall.py), and the time
budget's say on every try (tuner/run/sizing.py sizes them). A try stops sending once the
requests over a limit after its first fifth already break it (probes/sequential.py's
``decided``): the README command's confirmation on the Xeon, 2026-12-06, broke from its 10th
second on (the machine was paused and its memory restored as the try ran), grew from 505 to
1010 requests as the percentile asks where requests go over, and took 127 s of the 13-minute
budget's last 130, leaving no time for the try under it. ``confirm_on`` is that, with the
configuration's ``Recommendation`` built from the tries. Where a confirmation runs:
- the baseline's, on its own server right after its search (tuner/run/trial.py), unless the
  budget would then hold no trial: then ``confirm_baseline_late``, on a fresh start after the
  recommendation's;
- a trial that leads when the budget holds no further trial, on its own server after its
  search (tuner/run/trial.py, as ``sizing.confirm_in_place`` decides);
- otherwise the search's best, on a fresh start from its launch command (``confirm_fresh``).
Which one is recommended, and the gain, is tuner/run/recommend.py's.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from probes.metrics import LoadMetrics, Verdict
from probes.transient import START_SHARE
from tuner.engines.base import EngineDied, EngineStartError, RunningServer, raise_if_died
from tuner.report.schema import ConfirmTry, Recommendation, TrialReport
from tuner.run import objective, sizing, stall, stop, tighten
from tuner.run.measure import point_line
from tuner.run.scoring import describe
from tuner.run.state import RunState
from tuner.scoring.confirm import (
    MARGIN_STOP,
    STEP_DOWN_FLOOR,
    ConfirmResult,
    Try,
    confirm,
    roomy,
    target_load,
)
from tuner.scoring.estimate import Samples, estimate
from tuner.storage.records import write_records

if TYPE_CHECKING:
    from tuner.run.trial import Evaluator


class Confirmation:
    """The tries of one configuration's confirmation on ``server`` (see ``confirm_on``)."""

    def __init__(
        self,
        st: RunState,
        ev: Evaluator,
        server: RunningServer,
        trial: TrialReport,
        cdir: Path,
        label: str,
        *,
        baseline: bool,
        reserve_s: float | None,
        in_place: bool = False,
    ) -> None:
        assert st.measurer is not None
        self.st, self.ev, self.server, self.trial = st, ev, server, trial
        self.cdir, self.label, self.baseline = cdir, label, baseline
        self.in_place = in_place  # a trial's, mid-search: a held claim may leave time to it
        opts = st.opts
        self.rps = trial.metrics.requests_per_s if trial.metrics else 1.0
        self.e2e_s = (trial.metrics.e2e_ms.p50 or 0.0) / 1000.0 if trial.metrics else 0.0
        # Open loop: a margin in load too (tuner/scoring/confirm.py says why); closed loop:
        # latency's.
        self.margin = opts.load_margin if st.axis.kind == "rate" else 0.0
        self.points = st.samples.get(trial.number, [])
        self.first = target_load(self.points, st.cons, st.axis, opts.headroom, self.margin)
        self.budgeted = opts.time_budget_s is not None
        if reserve_s is not None:
            self.reserve = reserve_s
        elif baseline:
            self.reserve = sizing.baseline_confirm_reserve_s(st, trial)
        else:  # the held-out check after it (--check-workload), where asked for
            self.reserve = sizing.held_out_s(st)
        self.stalled = False  # a try set aside as a stall at its start (once a confirmation)
        self.held = False  # whether a try has met the SLOs yet (with headroom, full-size)
        self.tries = 0  # tries measured so far (a stall set aside not counted)
        self.max_tries = 2 if baseline and self.budgeted else 3

    def n_for(self, x: float) -> int:
        st = self.st
        if self.baseline:  # never cut to the time left: a try fits whole, or is not made
            return sizing.n_confirm_fit(st, x, self.rps)
        # the sending, within the time left less the last requests' lifetime
        left = st.budget.left(10.0 + self.reserve) - self.e2e_s
        return sizing.n_confirm_fit(st, x, self.rps, left if math.isfinite(left) else None)

    def per_s(self, x: float) -> float:
        """Requests a second at load ``x``: its rate, or the measured rate (closed loop)."""
        return max(x if self.st.axis.kind == "rate" else self.rps, 1e-3)

    def try_s(self, x: float, n: int | None = None) -> float:
        """About how long one try takes: its arrivals (or its requests at the measured rate),
        then the last ones' lifetime."""
        return (self.n_for(x) if n is None else n) / self.per_s(x) + self.e2e_s

    def room_for(self, x: float, n: int) -> int:
        """How many more requests a try may grow by where requests over a limit leave its
        sample short of what the percentile then needs (probes/sequential.py): at most ``n``
        more, and only what the time left holds after its own ``n`` and, until a try has held
        (the baseline's aside: it has one try or two, each whole), a second try of as many
        requests: the first, at the fitted load, breaks often enough that the one after it
        must fit. (A run tuned on a heavy-tailed workload on a slow AMD box, 2026-12-06 17:30:
        its one try grew from 505 to 819 requests, broke, and left 64 s too few for a second,
        so the recommendation did not meet the SLOs.)"""
        spare_s = (
            self.st.budget.left(10.0 + self.reserve + self.keep_s(x, n)) - self.try_s(x, n)
            if self.budgeted
            else None
        )
        return sizing.growth_room(n, spare_s, self.per_s(x))

    def keep_s(self, x: float, n: int) -> float:
        """What a try at ``x`` of ``n`` requests keeps back from its growth: a second try of as
        many requests at the lower load the next try would be at, where no try has met the SLOs
        yet, another is allowed, and the time left holds both whole (else a kept-back second
        try would be cut short, provisional, and could not meet them either; growth is then
        this try's one chance). The baseline's tries are whole or not made: nothing. A trial's
        try in place after a held one: the next trial's room (tuner/run/tighten.py)."""
        if self.in_place and self.held:
            return tighten.kept_from_growth(self.st, self.trial, self.try_s(x, n), self.reserve)
        if self.held or self.baseline or self.tries + 1 >= self.max_tries:
            return 0.0
        second = self.try_s(x * STEP_DOWN_FLOOR, n)
        if self.st.budget.left(10.0 + self.reserve) < self.try_s(x, n) + second:
            return 0.0
        return second

    def took(self, verdict: Verdict) -> None:
        """A try was measured: whether it met the SLOs (with the headroom, full-size)."""
        self.tries += 1
        self.held = self.held or (roomy(verdict, self.st.opts.headroom) and not verdict.provisional)

    def may_try(self, x: float) -> str | None:
        need = self.try_s(x)
        if not self.st.budget.fits(need, self.reserve):
            return f"time budget: another try at {self.st.axis.label(x)} needs about {need:.0f} s"
        whole = sizing.n_confirm_fit(self.st, x, self.rps)  # not cut to the time left
        if self.held and self.n_for(x) < whole:
            # Cut to the time left, it would be provisional, and a provisional try never
            # raises a claim that held: it only ends the run later. (The README command on a
            # slow AMD box, 2026-12-07 06:17: after 505 requests held, tries of 259 and 45
            # took the last 77 s and changed nothing.)
            return (
                f"time budget: a try at {self.st.axis.label(x)} now would be cut to "
                f"{self.n_for(x)} of its {whole} requests"
            )
        if self.in_place and self.held:
            return tighten.search_instead(self.st, self.trial, need, self.reserve)
        return None

    def measure(self, x: float) -> Try:
        st, label = self.st, self.label
        measurer, axis, opts = st.measurer, st.axis, st.opts
        assert measurer is not None
        n = self.n_for(x)
        if n < sizing.n_confirm(st, x):
            st.notes.append(
                f"{label}: the time budget allowed {n} requests at {axis.label(x)}, fewer than "
                f"the {sizing.n_confirm(st, x)} the SLO percentile needs: provisional"
            )
        m = measurer.measure(
            self.server, x, n, st.model_path, room=self.room_for(x, n), cut=True,
            cut_skip=math.ceil(START_SHARE * n),
        )  # fmt: skip
        j = measurer.judge(m)
        if stall.again_try(
            self.ev.stalls, m.records, measurer.slos, missed=not roomy(j.verdict, opts.headroom),
            headroom=opts.headroom, planned=n, measured_again=self.stalled,
            # as many requests again: never a full try for a short one
            budget_left=self.may_try(x) is None and self.n_for(x) >= n,
        ):  # fmt: skip
            # A stall at the try's start, not the load (probes/transient.py): once, at the
            # same load, before it steps the claim down.
            self.stalled = True
            path = self.cdir / f"{axis.slug(x)}-disturbed.jsonl"
            stall.set_aside(st, self.server, m, j.verdict, path, label, x, opts.headroom)
            return self.measure(x)
        if len(m.records) > n:
            over = ", ".join(f"{v} over {k}" for k, v in m.metrics.over_limit.items() if v)
            st.say(
                f"{label}: {axis.label(x)} grown from {n} to {len(m.records)} requests, as "
                f"the percentile needs with the requests over its limit ({over or 'none'})"
            )
        write_records(self.cdir / f"{axis.slug(x)}.jsonl", m.records)
        self.took(j.verdict)
        st.say(f"{label}: {axis.label(x):<10} {point_line(m.metrics, j.verdict)}")
        raise_if_died(
            self.server, f"during its confirmation at {axis.label(x)}", m.metrics.n_failed > 0
        )
        stop.check()
        window = measurer.score_window(x, len(m.records), m.metrics)
        return Try(x, Samples.from_records(x, j.records, window), j.verdict, m.metrics)

    def run(self) -> ConfirmResult | None:
        """The tries (None: the baseline's, with no room for one full-size try now)."""
        st, label, axis, opts, first = self.st, self.label, self.st.axis, self.st.opts, self.first
        if self.budgeted and self.baseline and not st.budget.fits(self.try_s(first), self.reserve):
            st.say(
                f"{label}: not now (time budget: one try needs about {self.try_s(first):.0f} s, "
                f"and a trial and its confirmation about {self.reserve:.0f} s more)"
            )
            return None
        self.cdir.mkdir(parents=True, exist_ok=True)
        where = f"latency at {1 - opts.headroom:.0%} of its limit by the fit" + (
            f", at most {1 - self.margin:.0%} of the capacity" if self.margin else ""
        )
        st.say(
            f"{label}: trial {self.trial.number} at {axis.label(first)} ({where}) with "
            f"{self.n_for(first)} requests"
        )
        return confirm(
            self.measure,
            search_points=self.points,
            cons=st.cons,
            axis=axis,
            headroom=opts.headroom,
            max_tries=self.max_tries,
            may_try=self.may_try,
            start=first,
            load_margin=self.margin,
        )


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
    in_place: bool = False,
) -> Recommendation | None:
    """Confirm a configuration on a running server (tuner/scoring/confirm.py): its load with
    headroom, the full sample, refined within the budget.

    The baseline's confirmation is full-size or not made (a gain divides by it, and a figure
    from fewer requests than the percentile needs is not divided by), has two tries at most
    under a budget, and keeps ``reserve_s`` back: by default, right after the baseline's
    search, what the first trial and its confirmation on its own server need
    (``sizing.baseline_confirm_reserve_s``). None when the budget has no room for
    one full-size try (the baseline's is then put off: ``confirm_baseline_late``).

    A try that missed the headroom only through a stall at its start (probes/transient.py) is
    set aside and measured again once at the same load (tuner/run/stall.py), where the budget
    holds as many requests again; it is not one of the tries counted.

    ``in_place``: a trial's confirmation on its own server mid-search; once a try has held,
    a higher one is made only where it leaves the next trial's room (tuner/run/tighten.py)."""
    res = Confirmation(
        st, ev, server, trial, cdir, label, baseline=baseline, reserve_s=reserve_s,
        in_place=in_place,
    ).run()  # fmt: skip
    if res is None:
        return None
    rec = _recommendation(st, trial, res, label)
    if baseline and res.tries:
        # The search compares every trial with the baseline: from here on, with an estimate
        # that has the full-size tries in it too (short open-loop points are optimistic).
        for t in res.tries:
            st.add_samples(trial.number, t.samples)
        est = ev.rescore(trial, "its confirmation")
        objective.settle(st)  # every gain divides by the baseline's score
        if est is not None and trial.status == "ok" and est.censored != "below":
            st.say(f"trial {trial.number}: with its confirmation, {describe(est, st.axis)}")
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
    elif res.stopped.startswith(MARGIN_STOP):
        # met with room, and held back from a higher try by the margin, not by the fit
        line = f"{label}: the claim ends at {axis.label(pick.load)}: {res.stopped}"
        st.notes.append(line)
        st.say(line)
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


def tries_text(rec: Recommendation) -> str:
    n = len(rec.tries)
    return f"{n} full-size {'try' if n == 1 else 'tries'}"


def loads_text(st: RunState, rec: Recommendation) -> str:
    return ", ".join(st.axis.label(float(t.load[st.axis.key])) for t in rec.tries)


def load_label(st: RunState, rec: Recommendation) -> str:
    return st.axis.label(float(rec.load[st.axis.key]))


def confirm_fresh(st: RunState, ev: Evaluator, best: TrialReport) -> Recommendation | None:
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
        f"engine restarted from launch_command, warmed up, then {tries_text(rec)} "
        f"({loads_text(st, rec)}); the claim is the highest that met every SLO"
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
    if not st.budget.fits(need, sizing.held_out_s(st)):
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
                st,
                ev,
                server,
                b,
                tdir,
                "baseline confirmation",
                baseline=True,
                reserve_s=sizing.held_out_s(st),
            )
    except EngineStartError as exc:
        st.notes.append(f"baseline confirmation: {exc}; no gain is computed")
        st.say(f"baseline confirmation: {exc}")
        return None
    if base is not None:
        base.fresh_start = True
        base.confirmation = (
            "the baseline started again from its launch command after the recommendation's "
            f"confirmation (the budget put it off to make room for a trial): {loads_text(st, base)}"
        )
    st.baseline_confirmed = base
    return base
