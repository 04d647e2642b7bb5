"""One configuration measured: start it, gate it, find its capacity, stop it.

``Evaluator.evaluate`` turns (number, stage, params) into a finished ``TrialReport``, written
to ``trials/NNN/trial.json`` and checkpointed (tuner/run/checkpoint.py) before it returns. This is
the one writer of trial records: the side-by-side repeat and the confirmations add points
through ``point`` and change a score only through ``rescore``.

On a ready engine: the quality gate (a quantisation stage's configuration), warm-up, for the
baseline the probe and the gates' references, the capacity search (tuner/scoring/capacity.py over
the
estimate of tuner/scoring/estimate.py), the baseline's confirmation, the exactness check, and where
two configurations are too close to call, both measured again side by side. The gates' own
steps on the server (quality figure and reference, greedy outputs) are tuner/run/gate_steps.py's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from tuner.engines.base import EngineDied, EngineStartError, RunningServer, raise_if_died
from tuner.report.schema import PointReport, PredictedReport, TrialReport, dump_json, write_atomic
from tuner.run import (
    checkpoint,
    confirmation,
    objective,
    probe_step,
    reach,
    share,
    side_by_side,
    sizing,
    stall,
    start,
    stop,
)
from tuner.run.gate_steps import GateSteps
from tuner.run.gates import quality_rejection
from tuner.run.measure import point_line
from tuner.run.quality_paid import unpaid_reason
from tuner.run.scoring import abandon_reason, under_capacity
from tuner.run.scoring import describe as describe_estimate
from tuner.run.stall import StallRule
from tuner.run.state import RunState
from tuner.run.target import Target
from tuner.scoring.capacity import CapacityResult, PointOutcome, find_capacity
from tuner.scoring.estimate import CapacityEstimate, Samples
from tuner.spaces.space import found_in_log
from tuner.storage.records import write_records


class Evaluator:
    """Measures configurations on the run's target into the run's state."""

    def __init__(self, st: RunState, target: Target, stalls: StallRule | None = None) -> None:
        self.st = st
        self.target = target
        self.gates = GateSteps(st)
        # The serving model's prediction for the baseline, made once the probe's sweeps have
        # calibrated it (tuner/run/guided_stage.py ``before``), published beside its measurement.
        self.predict_first: Callable[[dict[str, Any], int], PredictedReport | None] | None = None
        # The capacity the serving model predicts for a trial from its points so far, where its
        # capacity search goes next (tuner/scoring/capacity.py ``aim``).
        self.aim: Callable[[TrialReport], float | None] | None = None
        # Which tries broke only through a stall at their start (tuner/run/stall.py).
        self.stalls = stalls or StallRule()

    # ------------------------------------------------------------ a whole trial
    def evaluate(
        self,
        number: int,
        stage: str,
        params: dict[str, Any],
        predicted: PredictedReport | None = None,
    ) -> TrialReport:
        """Start one configuration, find its capacity, stop it. Never raises for engine
        trouble. Resumed, a trial that finished before comes back from its checkpoint.
        ``predicted``: the serving model's prediction, kept on the record; its capacity is
        where the capacity search starts where the model was calibrated on this build."""
        st = self.st
        if st.replay is not None and (cp := st.replay.take(number, stage, params)):
            trial = checkpoint.restore(st, cp)
            where = f"; {trial.error}" if trial.error else ""
            st.say(f"trial {number}: {trial.status}, as measured before the resume{where}")
            return trial
        stop.check()
        baseline = stage == "baseline"
        spec = self.target.spec(params, baseline)
        tdir = st.trial_dir(number)
        tdir.mkdir(parents=True, exist_ok=True)
        label = "baseline" if baseline else f"trial {number} ({stage})"
        if not st.launches:
            label = "endpoint"
        trial = TrialReport(
            number=number,
            stage=stage,
            params=params,
            args=spec.config_args if spec else [],
            env=spec.env if spec else {},
            launch_command=spec.argv if spec else [],
            status="failed",
            log_file=str(tdir / "server.log") if spec else None,
            predicted=predicted,
        )
        t_start = time.monotonic()
        shown = " ".join(f"{k}={v}" for k, v in params.items()) or "engine defaults"
        st.doing.trial, st.doing.config = label, shown
        if spec is not None:
            st.say(f"{label}: starting {st.engine.name} with {shown}")
        best = st.best()
        share_s = None if baseline else share.trial_share_s(st, sizing.end_reserve_s(st))
        st.budget.open_trial(share_s)
        if share_s is not None:
            st.say(f"{label}: its share of the time budget: {share_s:.0f} s")
        try:
            with self.target.server(spec, tdir / "server.log") as server:
                trial.startup_s = server.startup_s if spec else None
                if spec:
                    st.say(f"{label}: ready in {server.startup_s or 0:.0f} s")
                if why := self._no_effect(params, tdir / "server.log"):
                    trial.status, trial.error = "no_effect", why
                    st.say(f"{label}: not measured: {why}")
                else:
                    self._measure(server, trial, tdir, label, best)
        except EngineDied as exc:
            trial.status, trial.error = "failed", f"the engine died: {exc}"
            trial.score_tokens_per_s, trial.load = None, None
            st.say(f"{label}: failed: {trial.error}")
        except EngineStartError as exc:
            trial.status, trial.error = "failed", str(exc)
            st.say(f"{label}: failed to start: {exc}")
        finally:
            st.budget.open_trial(None)
        trial.wall_s = time.monotonic() - t_start
        self.save(trial)
        checkpoint.save(st, trial)
        return trial

    def save(self, trial: TrialReport) -> None:
        """The trial's record as it stands, in its folder (atomically)."""
        write_atomic(self.st.trial_dir(trial.number) / "trial.json", dump_json(trial))

    def _measure(
        self,
        server: RunningServer,
        trial: TrialReport,
        tdir: Path,
        label: str,
        best: TrialReport | None,
    ) -> None:
        """On a ready engine: the quality gate, warm-up, the baseline's probe and references,
        the capacity search, then the exactness check."""
        st = self.st
        assert st.measurer is not None
        baseline = trial.stage == "baseline"
        start_at = start.start_load(st, best, trial.predicted)
        quantised = not baseline and st.space and st.space.changed("quantisation", trial.params)
        # Before the warm-up, so that a configuration too slow to time still gets its quality
        # figure (bounded by tuner.run.gates.QUALITY_BUDGET_S).
        if quantised and not self.gates.quality(server, trial, label):
            return
        if quantised and self.gates.refused_unmeasured(trial, label):
            return
        if not baseline and start.no_reference(st, best):
            # No capacity to start from (the baseline met the SLOs at no load): a closed-loop
            # warm-up says what this configuration completes a second, where the rate search
            # starts, instead of climbing x1.4 a point from the baseline's probe rate.
            trial.warmup_s, rps = st.measurer.warmup_closed(
                server, st.opts.start_concurrency, st.model_path
            )
            start_at = st.axis.floor(rps) if rps > 0 else start_at
        else:
            trial.warmup_s = st.measurer.warmup(server, start_at, st.model_path)
        if baseline:
            if st.opts.probe:
                probe_step.diagnose(st, server, ignore_eos=self.target.ignore_eos)
            if why := reach.unreachable(st.diagnosis, st.cons):
                # The quality gate's reference waits for the first configuration that meets
                # the SLOs (unquantised, as the quantisation stage's start is): on this one it
                # would take minutes (emulated bf16: 132 s of a 13-minute budget).
                trial.status, trial.error = "infeasible", why
                st.say(f"{label}: infeasible, not searched: {why}")
                return
            if st.wants("quantisation"):
                self.gates.baseline_quality(server)
            if self.predict_first is not None:
                # Published beside the measurement (the probe-only error), and bracketed like
                # a calibrated prediction: the climb from the probe's load point took seven
                # points (3 m) in the README command on the Xeon, where the probe's
                # prediction was 7-10 % high.
                trial.predicted = self.predict_first(trial.params, trial.number)
            start_at = start.start_load(st, None, trial.predicted)
        elif best is not None and best.warmup_s and trial.warmup_s > 3 * best.warmup_s + 20:
            trial.status, trial.error = (
                "abandoned",
                f"warm-up took {trial.warmup_s:.0f} s against {best.warmup_s:.0f} s for the best "
                "configuration at the same load: far slower",
            )
            st.say(f"{label}: abandoned: {trial.error}")
            return

        def abandon(points: list[PointOutcome]) -> str | None:
            if best is None or st.robust:  # it may lead on the other workloads (objective.py)
                return None
            est = st.estimate(trial.number)
            return abandon_reason(est, best.estimate, best.number, len(points), st.opts.tie_band)

        with objective.tuned_share(st):
            cap = self._search(server, trial, label, start_at, baseline, abandon)
        self._score(trial, cap.abandoned)
        objective.across(st, self, server, trial, label)
        self._after_search(server, trial, tdir, label, best, quantised=bool(quantised))

    def _search(
        self,
        server: RunningServer,
        trial: TrialReport,
        label: str,
        start_at: float,
        baseline: bool,
        abandon: Callable[[list[PointOutcome]], str | None],
    ) -> CapacityResult:
        """The trial's capacity search on the tuned workload."""
        st = self.st
        return find_capacity(
            lambda x: self.point(server, trial, x, sizing.n_search(st, x, trial), label),
            start=start_at,
            axis=st.axis,
            rate_step=st.opts.rate_step,
            abandon=None if baseline else abandon,
            max_points=7 if st.launches else max(1, st.opts.trials),
            should_stop=partial(sizing.points_time_left, st, trial),
            too_short=partial(sizing.too_short, st, trial),
            # A start just above a calibrated prediction that fails failed by a little (the
            # model's capacity error here was 4-16 %): step down by that, not by half.
            descend=start.PREDICTED_DESCEND if start.at_prediction(st, trial, start_at) else 0.5,
            aim=partial(self._aim, trial, label) if self.aim is not None else None,
        )

    def _after_search(
        self,
        server: RunningServer,
        trial: TrialReport,
        tdir: Path,
        label: str,
        best: TrialReport | None,
        *,
        quantised: bool,
    ) -> None:
        """Once scored: the deferred quality reference, the baseline's confirmation, the
        quality and exactness verdicts, the side-by-side repeat and the confirmation in place."""
        st = self.st
        baseline = trial.stage == "baseline"
        if (
            trial.status == "ok"
            and not quantised
            and st.wants("quantisation")
            and st.quality.ref is None
            and st.quality.ref_error is None
        ):
            self.gates.deferred_reference(server, trial)
        if baseline and trial.status == "ok" and st.opts.confirm_baseline and st.launches:
            st.baseline_confirmed = confirmation.confirm_on(
                st, self, server, trial, tdir, "baseline confirmation", baseline=True
            )
        if trial.quality is not None:
            if trial.metrics is not None:
                trial.metrics.quality = trial.quality
            if not trial.quality.holds:
                trial.rejected = quality_rejection(trial.quality, st.quality_limit)
        if trial.status in ("ok", "abandoned", "infeasible"):
            # Also where it lost on speed: whether speculation changed outputs is a finding.
            self.gates.exactness(server, trial, tdir, label, best)
        if trial.rejected:
            st.say(f"{label}: not recommendable: {trial.rejected}")
        elif trial.status == "ok" and best is not None:
            if not st.robust:  # close on the tuned workload decides nothing there
                side_by_side.repeat(st, self, server, trial, best)
            if why := unpaid_reason(trial, st.measured(), st.opts.tie_band):
                st.notes.append(f"trial {trial.number} is not carried: {why}")
                st.say(f"{label}: not carried: {why}")
        if not baseline and sizing.confirm_in_place(st, trial, best):
            # It leads, and the budget holds no further trial: confirmed here, on its own
            # start from its launch command, instead of a restart that only takes time.
            st.say(f"{label}: leads, and the time budget holds no further trial")
            if st.trial_confirmed is not None:
                st.displaced_confirmed = st.trial_confirmed
            st.trial_confirmed = confirmation.confirm_on(
                st, self, server, trial, st.out / "confirmation", "confirmation", in_place=True
            )

    def _aim(self, trial: TrialReport, label: str) -> float | None:
        """The serving model's capacity for ``trial`` from its points so far, said."""
        assert self.aim is not None
        x = self.aim(trial)
        if x is not None:
            shown = self.st.axis.label(self.st.axis.quantize(x))
            self.st.say(
                f"{label}: the model, refitted on its {len(trial.points)} point(s), "
                f"puts its capacity at {shown}"
            )
        return x

    # ------------------------------------------------------------ one load point
    def point(
        self,
        server: RunningServer,
        trial: TrialReport,
        x: float,
        n: int,
        label: str,
        beside: bool = False,
        again: bool = False,
    ) -> PointOutcome:
        """Measure one load point of a trial; its records, samples and summary are kept.

        A point that broke only through a stall at its start (probes/transient.py) is measured
        again once, where the time budget allows: the first try's records are written as
        ``*-disturbed.jsonl`` and counted as warm-up, not as a point.

        Raises:
            EngineDied: the engine exited during the point (after it is written down)."""
        st = self.st
        assert st.measurer is not None
        tdir = st.trial_dir(trial.number)
        # A search point stops sending once its verdict is decided (its requests over a limit
        # break it whatever the rest would do); a side-by-side repeat runs whole, as its
        # twin did.
        m = st.measurer.measure(server, x, n, st.model_path, cut=not beside)
        metrics = m.metrics
        j = st.measurer.judge(m)
        slug = f"{st.axis.slug(x)}-{len(trial.points)}"
        if stall.again_point(
            self.stalls, m.records, st.measurer.slos, j.verdict, measured_again=again,
            budget_left=not sizing.points_time_left(st, trial),
        ):  # fmt: skip
            path = tdir / f"{slug}-disturbed.jsonl"
            stall.set_aside(st, server, m, j.verdict, path, label, x)
            return self.point(server, trial, x, n, label, beside, again=True)
        rfile = tdir / f"{slug}.jsonl"
        write_records(rfile, m.records)
        window = st.measurer.score_window(x, len(m.records), metrics)
        st.add_samples(trial.number, Samples.from_records(x, j.records, window))
        trial.points.append(
            PointReport(
                load=st.load(x),
                metrics=metrics,
                verdict=j.verdict,
                records_file=str(rfile),
                server=m.server,
                side_by_side=beside,
            )
        )
        self.save(trial)
        st.say(f"{label}: {st.axis.label(x):<10} {point_line(metrics, j.verdict)}")
        raise_if_died(server, f"while measured at {st.axis.label(x)}", metrics.n_failed > 0)
        stop.check()  # a first Ctrl-C stops here, with this point written
        return PointOutcome(x, j.verdict.holds, j.verdict.worst_margin, metrics.output_tokens_per_s)

    # ------------------------------------------------------------ scores
    def _score(self, trial: TrialReport, abandoned: str | None) -> None:
        """The trial's status and score from the estimate over all its points."""
        st = self.st
        est = self._apply_estimate(trial)
        if abandoned:
            trial.status, trial.error = "abandoned", abandoned
        elif est is None or est.censored == "below":
            trial.status = "infeasible"
            low = min((st.point_load(p) for p in trial.points), default=None)
            where = st.axis.label(low) if low is not None else "none"
            trial.error = f"no load met the SLOs (lowest tried: {where})"
        else:
            trial.status = "ok"
        if trial.status == "ok" and est is not None:
            st.say(f"trial {trial.number}: capacity {describe_estimate(est, st.axis)}")
        else:
            trial.score_tokens_per_s, trial.load = None, None
            if trial.points:  # no score; its last point's figures (acceptance included) stay
                trial.metrics = trial.points[-1].metrics
            st.say(f"trial {trial.number}: {trial.status}: {trial.error}")

    def rescore(self, trial: TrialReport, after: str) -> CapacityEstimate | None:
        """The estimate again, with points measured later (side by side, a confirmation); a
        configuration none of whose loads holds any more has no score and is infeasible."""
        est = self._apply_estimate(trial)
        if trial.status == "ok" and trial.score_tokens_per_s is None:
            trial.status = "infeasible"
            trial.error = f"no load met the SLOs once measured again ({after})"
            self.st.say(f"trial {trial.number}: infeasible: {trial.error}")
        return est

    def _apply_estimate(self, trial: TrialReport) -> CapacityEstimate | None:
        """Score = output tokens/s at the estimated capacity; ``load`` = that capacity;
        ``metrics`` = the measured point closest under it."""
        st = self.st
        est = trial.estimate = st.estimate(trial.number)
        if est is None or est.censored == "below" or est.load is None:
            trial.score_tokens_per_s, trial.load = None, None
            return est
        trial.score_tokens_per_s = est.tokens_per_s
        trial.load = {st.axis.key: round(est.load, 3)}
        if (p := under_capacity(trial.points, st.axis)) is not None:
            trial.metrics = p.metrics
        return est

    # ------------------------------------------------------------ the engine's log
    def _no_effect(self, params: dict[str, Any], log: Path) -> str | None:
        """A chosen option the engine's log says did nothing (the space's ``no_effect_log``)."""
        space = self.st.space
        if space is None:
            return None
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        for choice, pattern in space.no_effect_patterns(params):
            if line := found_in_log(pattern, text):
                return f"{choice} had no effect: the server log says {line[-200:]!r}"
        return None
