"""The tuning run: wires the engine, the load client, the stages and the results folder.

Order of a run:
1. Resolve the model, the engine, the machine and its search space; open ``results/<run-id>/``.
2. The baseline: the engine's defaults (plus what the space's ``baseline`` says it needs to
   start here), scored by a capacity search like every trial.
3. The stages in the space's order, each an Optuna search starting from the previous winner.
   ``--trials`` counts configurations started after the baseline, across all stages; the time
   budget is shared between the stages and stops the search early enough to leave time for
   step 4. A configuration with a non-default quantisation knob is measured against the
   baseline's quality (perplexity) and barred from the recommendation when it breaks the quality
   SLO; one with speculative decoding has its greedy outputs compared with the configuration it
   started from, and is barred when they differ unless the user accepts it.
4. Confirmation: the winner is started again from its launch command and measured at its load
   with enough requests for the SLO percentile; if the SLOs fail there, the load steps down until
   they hold. Only then is ``meets_slo`` set.
5. report.json and report.md, written atomically; every trial's records and server log are kept.

Each trial and point is written as soon as it is measured, and an interrupted run (Ctrl-C)
still writes its report, marked ``interrupted``. Every engine is stopped by its process group.
"""

from __future__ import annotations

import contextlib
import math
import random
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, Literal

import orjson

from probes.client import LoadClient
from probes.diagnose import Diagnosis, run_diagnosis
from probes.exactness import Exactness, describe
from probes.metrics import LoadMetrics
from probes.quality import (
    Quality,
    QualityError,
)
from probes.workload import SyntheticWorkload, Tokenizer
from tuner import checkpoint, stop
from tuner.budget import Budget, PhaseTimes
from tuner.capacity import LoadAxis, PointOutcome, find_capacity
from tuner.checkpoint import Replay
from tuner.compare import ComparisonReport, beaten, side_by_side, too_close, verdict
from tuner.confirm import ConfirmResult, Try, confirm, target_load, weaker_than
from tuner.engines import get_engine
from tuner.engines.base import (
    Engine,
    EngineDied,
    EngineStartError,
    LaunchSpec,
    RunningServer,
    ServerProcess,
    free_port,
)
from tuner.engines.endpoint import AttachedServer, EndpointError, attach
from tuner.engines.lifetime import sweep
from tuner.estimate import CapacityEstimate, Samples, constraints, estimate
from tuner.gates import ExactnessGate, QualityGate, rejection
from tuner.hardware import Hardware, detect_hardware, template_context
from tuner.launch import launch_settings
from tuner.measure import PointMeasurer, point_line, write_records
from tuner.models import resolve_model
from tuner.options import TuneOptions
from tuner.report import (
    ConfirmTry,
    ContrastReport,
    PointReport,
    Recommendation,
    Report,
    SLOReport,
    StageReport,
    Timing,
    TrialReport,
    dump_json,
    write_atomic,
)
from tuner.search import Outcome, StageResult, run_stage
from tuner.space import (
    STAGE_ORDER,
    SearchSpace,
    SpaceError,
    Stage,
    found_in_log,
    load_space,
    space_path,
)
from tuner.store import FolderStore, RunMeta, RunStore, lock_folder

Progress = Callable[[str], None]
RunStatus = Literal["complete", "interrupted", "failed"]
DEFAULT_QUALITY_PCT = 1.0  # perplexity may rise by at most 1 % unless --slo quality=X% says


class RunInterrupted(KeyboardInterrupt):
    pass


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", Path(text).name or text).strip("-").lower()[:40]


class Runner:
    def __init__(
        self,
        opts: TuneOptions,
        progress: Progress = lambda m: print(m, file=sys.stderr, flush=True),
        *,
        engine: Engine | None = None,
        hardware: Hardware | None = None,
        tokenizer_loader: Callable[[str], Tokenizer] | None = None,
        resume: Path | None = None,
    ) -> None:
        self.opts = opts
        self._progress = progress
        self.engine = engine or get_engine(opts.engine)
        self.hw = hardware or detect_hardware()
        self.clock = PhaseTimes()
        self.budget = Budget(opts.time_budget_s, start=self.clock.t0)
        # A resumed run (--resume) keeps its run id, folder and salt; its finished trials come
        # back from their checkpoints (tuner/checkpoint.py).
        self.replay: Replay | None = None
        self.meta: RunMeta | None = None
        if resume is not None:
            store = FolderStore(resume)
            self.meta = store.load_meta()
            self.replay = Replay(store, store.checkpoints())
        # A fresh salt per run (recorded; --salt reproduces it): prompts differ between runs,
        # so a prefix cache never serves one run's prompts to the next.
        self.salt = self.meta.salt if self.meta else opts.salt or secrets.token_hex(4)
        self.rng = random.Random(f"{opts.seed}:{self.salt}")
        self.axis = (
            LoadAxis("rate", minimum=0.01, maximum=opts.max_rate_rps)
            if opts.load_model == "rate"
            else LoadAxis("concurrency", minimum=1, maximum=opts.max_concurrency)
        )
        self.cons = constraints(opts.slos, opts.max_error_rate)
        self.samples: dict[int, list[Samples]] = {}  # trial number -> its points' samples
        self.comparisons: list[ComparisonReport] = []
        self.baseline_confirmed: Recommendation | None = None
        self.run_id = (
            self.meta.run_id
            if self.meta
            else datetime.now().strftime("%Y%m%d-%H%M%S")
            + f"-{_slug(opts.model or opts.served_model or 'served')}-{self.engine.name}-"
            + secrets.token_hex(2)
        )
        self.out = resume if resume is not None else opts.output_dir / self.run_id
        self.store: RunStore = FolderStore(self.out)
        self.tokenizer_loader = tokenizer_loader
        self.trials: list[TrialReport] = []
        self.baseline: TrialReport | None = None
        self.stage_reports: list[StageReport] = []
        self.recommended: Recommendation | None = None
        self.notes: list[str] = []
        self.space: SearchSpace | None = None
        self.diagnosis: Diagnosis | None = None
        self.probe_s = 0.0
        self.model_path = ""
        # An endpoint is attached to, never launched: only the client-side load is searched.
        self.attached: AttachedServer | None = None
        self.launches = bool(getattr(self.engine, "launches", True))
        self.exactness = ExactnessGate()
        slo_q = opts.slos.quality
        self.quality_limit = slo_q.max_degradation_pct if slo_q else DEFAULT_QUALITY_PCT
        self.quality = QualityGate(self.quality_limit)

    # ----------------------------------------------------------------- helpers
    def say(self, msg: str) -> None:
        e = int(self.clock.elapsed())
        self._progress(f"[{e // 60:02d}:{e % 60:02d}] {msg}")

    def _fresh_seed(self) -> int:
        # A different seed (so a different salt) per load point: no prefix-cache reuse.
        return self.rng.getrandbits(31)

    def _n_search(self, x: float, trial: TrialReport | None = None) -> int:
        """A search point's requests: a few per client slot (closed loop); open loop, enough
        arrivals to span ``search_point_s`` and at least three request lifetimes (E2E p50 of
        the trial's highest point that held), at most four times ``search_point_s``. A rate a
        little over what the server sustains builds its queue slowly: a span shorter than a
        few lifetimes ends before the queue shows in the latency, and the point holds where a
        longer run breaks. (An overloaded point's lifetimes are its queue, not a request's.)"""
        if self.axis.kind == "concurrency":
            return max(
                self.opts.search_min_requests, math.ceil(self.opts.search_requests_per_slot * x)
            )
        span = self.opts.search_point_s
        held = [p for p in trial.points if p.verdict.holds] if trial is not None else []
        if held and (e2e := max(held, key=self._point_load).metrics.e2e_ms.p50):
            span = min(max(span, 3.0 * e2e / 1000.0), 4.0 * self.opts.search_point_s)
        return max(self.opts.search_min_requests, math.ceil(span * x))

    def _load(self, x: float) -> dict[str, float]:
        """A load as report.json writes it: ``{"concurrency": N}`` or ``{"rate_rps": R}``."""
        return {self.axis.key: int(x) if self.axis.kind == "concurrency" else x}

    def _load_of(self, t: TrialReport) -> float | None:
        return float(t.load[self.axis.key]) if t.load and self.axis.key in t.load else None

    def _n_confirm_fit(self, c: float, rps: float, left_s: float | None = None) -> int:
        """The confirmation's request count under a time budget: what the SLO percentile needs,
        unless that takes more than a quarter of the budget (or the time left): then what fits,
        and the verdict says it is provisional. A slow server (static batching at 0.4
        requests/s) would otherwise spend half an hour confirming a p99."""
        n = self._n_confirm(c)
        if self.opts.time_budget_s is None:
            return n
        cap_s = 0.25 * self.opts.time_budget_s
        if left_s is not None:
            cap_s = min(cap_s, left_s)
        floor = math.ceil(2 * c) if self.axis.kind == "concurrency" else 20
        return max(floor, 20, min(n, math.floor(max(rps, 1e-3) * cap_s)))

    def _n_confirm(self, c: float) -> int:
        need = self.opts.confirm_requests or math.ceil(self.opts.slos.requests_needed * 1.1)
        return max(need, math.ceil(2 * c)) if self.axis.kind == "concurrency" else need

    # ----------------------------------------------------------------- run
    def run(self) -> Report:
        self.out.mkdir(parents=True, exist_ok=True)
        lock = lock_folder(self.out)  # held while this run works in its folder
        try:
            return self._run()
        finally:
            lock.close()

    def _run(self) -> Report:
        self._open_store()
        status: RunStatus = "complete"
        error: str | None = None
        try:
            self._prepare()
            self._search()
            self._confirm()
            self._close_store()
        except KeyboardInterrupt:
            status = "interrupted"
            self.say(
                f"interrupted; what was measured is kept in {self.out} "
                f"(autotune --resume {self.out} continues it)"
            )
        except Exception as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            self.say(f"run failed: {error}")
            self._write_report(status, error)
            raise
        return self._write_report(status, error)

    def _open_store(self) -> None:
        """A new run records what it was asked; a resumed one counts the resume and starts
        its Optuna journal afresh (the seeded sampler, fed the same outcomes, replays it). The
        folder is locked while a run works in it: a second --resume of a live run is refused
        (its sweep would stop the live run's engines)."""
        if self.meta is None:
            self.meta = RunMeta(
                run_id=self.run_id, salt=self.salt, options=self.opts.model_dump(mode="json")
            )
        else:
            self.meta.resumes += 1
            # What the stopped part left running (a tuner killed with SIGKILL cannot stop its
            # engines' children itself): found by the run's marker in their environment.
            if left := sweep(self.run_id):
                self.say(f"stopped {len(left)} processes the interrupted run left running")
            journal = self.out / "optuna.journal"
            if journal.exists():
                journal.rename(self.out / f"optuna.journal.before-resume-{self.meta.resumes}")
            assert self.replay is not None
            self.say(
                f"resuming {self.run_id}: {len(self.replay.pending)} finished trials kept "
                "from before (not measured again)"
            )
        self.store.save_meta(self.meta)

    def _close_store(self) -> None:
        assert self.meta is not None
        if self.replay is not None and self.replay.pending:  # the resumed search stopped sooner
            self.replay.drop_from(min(self.replay.pending), "not reached by the resumed search")
        self.meta.done = True
        self.store.save_meta(self.meta)

    def _add_samples(self, number: int, samples: Samples) -> None:
        """A point's samples join its trial's estimate, and the store, at once."""
        kept = self.samples.setdefault(number, [])
        self.store.add_samples(number, len(kept), samples)
        kept.append(samples)

    def _prepare(self) -> None:
        self.say(f"run {self.run_id}; results in {self.out}")
        if not self.launches:
            self._prepare_endpoint()
            return
        model = resolve_model(self.opts.model)
        self.model_path = model.path
        path = self.opts.space_file or space_path(self.engine.name, self.hw.device)
        self.ctx = {
            **template_context(self.hw),
            "draft_model": self.opts.draft_model or "",
            "eagle_model": self.opts.eagle_model or "",
            "quantized_model": self.opts.quantized_model or "",
        }
        if (n := _max_positions(model.path)) is not None:
            self.ctx["max_model_len"] = n
        self.space = load_space(path).for_machine(len(self.hw.gpus), self.ctx)
        if self.opts.stages is not None:
            known = {s.name for s in self.space.stages} | set(STAGE_ORDER)
            if bad := [s for s in self.opts.stages if s not in known]:
                raise SpaceError(
                    f"--stages {','.join(self.opts.stages)!r}: unknown stage(s) {bad}; this "
                    f"search space has {', '.join(s.name for s in self.space.stages)} (or give "
                    f"a kind: {', '.join(STAGE_ORDER)})"
                )
        if isinstance(self.opts.workload, SyntheticWorkload):
            self.tokenizer: Tokenizer | None = self._load_tokenizer(model.path)
        else:
            self.tokenizer = None
        self.client = LoadClient("http://127.0.0.1:1", timeout_s=self.opts.request_timeout_s)
        self.measurer = self._measurer()
        self.say(
            f"model {model.name} ({model.path}); engine {self.engine.version()}; "
            f"{self.hw.label}; search space {path.name}"
        )
        quality = (
            ""
            if self.opts.slos.quality
            else f"; quality degradation <= {self.quality_limit:g} % (the default)"
        )
        self.say(
            "SLOs: "
            + "; ".join(self.opts.slos.labels)
            + quality
            + f"; error rate <= {self.opts.max_error_rate:.1%}"
        )

    def _prepare_endpoint(self) -> None:
        """Attach to the running server; no search space: nothing of the server is tuned."""
        if not self.opts.endpoint:
            raise EndpointError("--engine endpoint needs --endpoint URL")
        self.say(f"attaching to {self.opts.endpoint} (nothing is launched)")
        self.attached = attach(self.opts.endpoint, self.opts.served_model)
        a = self.attached
        self.model_path = a.served_model
        self.ctx = template_context(self.hw)
        self.space = SearchSpace(engine="endpoint", device=self.hw.device, stages=[])
        self.tokenizer = None
        if isinstance(self.opts.workload, SyntheticWorkload):
            source = self.opts.tokenizer or self.opts.model or a.served_model
            try:
                self.tokenizer = self._load_tokenizer(source)
            except Exception as exc:
                raise EndpointError(
                    f"synthetic prompts need the served model's tokenizer; {source!r} does not "
                    f"load ({type(exc).__name__}); give --tokenizer FOLDER_OR_ID"
                ) from None
        self.client = LoadClient(a.base_url, timeout_s=self.opts.request_timeout_s)
        self.measurer = self._measurer()
        self.say(
            f"endpoint {a.base_url} serves {a.served_model}; ignore_eos "
            f"{'accepted' if a.ignore_eos else 'refused: output lengths are what the server gives'}"
            f"; {self.hw.label}"
        )
        self.say("SLOs: " + "; ".join(self.opts.slos.labels))
        self.notes.append(
            "endpoint mode: the server's settings were not tuned (autotune did not start it); "
            "only the client-side load was searched, and the recommendation is a load"
        )

    def _measurer(self) -> PointMeasurer:
        def spent(phase: str, seconds: float) -> None:
            if phase == "warmup":
                self.clock.warmup_s += seconds
            else:
                self.clock.measure_s += seconds

        return PointMeasurer(
            client=self.client,
            axis=self.axis,
            slos=self.opts.slos,
            max_error_rate=self.opts.max_error_rate,
            workload=self.opts.workload,
            tokenizer=self.tokenizer,
            ignore_eos=self.ignore_eos,
            series=self.engine.series,
            seeds=self._fresh_seed,
            spent=spent,
            neighbour_pct=self.opts.neighbour_cpu_pct,
        )

    @property
    def ignore_eos(self) -> bool:
        return self.attached.ignore_eos if self.attached else self.engine.supports_ignore_eos

    def _load_tokenizer(self, path: str) -> Tokenizer:
        if self.tokenizer_loader:
            return self.tokenizer_loader(path)
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(path)  # type: ignore[return-value]

    # ----------------------------------------------------------------- trials
    def _spec(self, params: dict[str, Any], baseline: bool) -> LaunchSpec:
        assert self.space is not None
        args, env = launch_settings(self.space, {} if baseline else params, self.ctx)
        return self.engine.launch_spec(self.model_path, args, env, free_port())

    @contextlib.contextmanager
    def _server(self, spec: LaunchSpec | None, log_path: Path) -> Iterator[RunningServer]:
        """A started, ready engine (stopped by its process group on exit); start-up is timed.
        In endpoint mode, the attached server, checked again.

        Raises:
            EngineStartError: it did not become ready (or the endpoint stopped answering).
        """
        if self.attached is not None:
            try:
                yield attach(self.attached.base_url, self.attached.served_model)
            except EndpointError as exc:
                raise EngineStartError("the endpoint stopped answering", str(exc)) from None
            return
        assert spec is not None
        t0 = time.monotonic()
        with ServerProcess(
            spec,
            log_path,
            startup_timeout_s=self.opts.startup_timeout_s,
            classify=self.engine.classify_failure,
            run_id=self.run_id,
            on_wait=lambda _: stop.check(),
        ) as server:
            self.clock.engine_starts += 1
            try:
                # The model's path: what vLLM and transformers serve it as (the latter does not
                # list it in /v1/models).
                server.wait_ready(served_model=self.model_path)
            finally:
                self.clock.startup_s += time.monotonic() - t0
            yield server

    def _best(self) -> TrialReport | None:
        ok = [t for t in [self.baseline, *self.trials] if t and t.status == "ok"]
        ok = [t for t in ok if not t.rejected]
        return max(ok, key=lambda t: t.score_tokens_per_s or 0.0) if ok else None

    def _abandon_rule(
        self, trial: TrialReport, best: TrialReport | None
    ) -> Callable[[list[PointOutcome]], str | None]:
        """Clearly beaten: stop the capacity search once the estimate from this trial's points
        so far is beaten, at the most its points allow, by the best configuration's pessimistic
        end (tuner/compare.py); never on a coin flip at the SLO's edge."""

        def rule(points: list[PointOutcome]) -> str | None:
            if best is None or best.estimate is None or best.estimate.censored == "below":
                return None
            est = self._estimate(trial.number)
            if est is None or not beaten(est, best.estimate, self.opts.tie_band):
                return None
            return (
                f"beaten: at most {est.most:.0f} tokens/s (the most its {len(points)} points "
                f"allow) against at least {best.estimate.low:.0f} for trial {best.number}"
            )

        return rule

    def _estimate(self, number: int, level: float = 0.0) -> CapacityEstimate | None:
        """The capacity estimate from all of a trial's points (seeded: reproducible)."""
        return estimate(
            self.samples.get(number, []), self.cons, level=level, seed=self.opts.seed + number
        )

    def evaluate(self, number: int, stage: str, params: dict[str, Any]) -> TrialReport:
        """Start one configuration, find its capacity, stop it. Never raises for engine trouble.
        Resumed, a trial that finished before comes back from its checkpoint instead."""
        if self.replay is not None and (cp := self.replay.take(number, stage, params)):
            trial = checkpoint.restore(self, cp)
            where = f"; {trial.error}" if trial.error else ""
            self.say(f"trial {number}: {trial.status}, as measured before the resume{where}")
            return trial
        stop.check()
        baseline = stage == "baseline"
        spec = self._spec(params, baseline) if self.launches else None
        tdir = self.out / "trials" / f"{number:03d}"
        tdir.mkdir(parents=True, exist_ok=True)
        label = "baseline" if baseline else f"trial {number} ({stage})"
        if not self.launches:
            label = "endpoint"
        trial = TrialReport(
            number=number,
            stage=stage,
            params=params,
            args=spec.argv[spec.argv.index("--port") + 2 :] if spec else [],
            env=spec.env if spec else {},
            launch_command=spec.argv if spec else [],
            status="failed",
            log_file=str(tdir / "server.log") if spec else None,
        )
        t_start = time.monotonic()
        shown = " ".join(f"{k}={v}" for k, v in params.items()) or "engine defaults"
        if spec is not None:
            self.say(f"{label}: starting {self.engine.name} with {shown}")
        best = self._best()
        try:
            with self._server(spec, tdir / "server.log") as server:
                trial.startup_s = server.startup_s if spec else None
                if spec:
                    self.say(f"{label}: ready in {server.startup_s or 0:.0f} s")
                if why := self._no_effect(params, tdir / "server.log"):
                    trial.status, trial.error = "no_effect", why
                    self.say(f"{label}: not measured: {why}")
                else:
                    self._measure_trial(server, trial, tdir, label, best)
        except EngineDied as exc:
            trial.status, trial.error = "failed", f"the engine died: {exc}"
            trial.score_tokens_per_s, trial.load = None, None
            self.say(f"{label}: failed: {trial.error}")
        except EngineStartError as exc:
            trial.status, trial.error = "failed", str(exc)
            self.say(f"{label}: failed to start: {exc}")
        trial.wall_s = time.monotonic() - t_start
        write_atomic(tdir / "trial.json", dump_json(trial))
        checkpoint.save(self, trial)
        return trial

    def _measure_trial(
        self,
        server: RunningServer,
        trial: TrialReport,
        tdir: Path,
        label: str,
        best: TrialReport | None,
    ) -> None:
        """On a ready engine: the quality gate, warm-up, the baseline's probe and references,
        the capacity search, then the exactness check."""
        baseline = trial.stage == "baseline"
        start = self._start_load(best)
        if not baseline and self.space and self.space.changed("quantisation", trial.params):
            # Before the warm-up, so that a configuration too slow to time still gets its
            # quality figure (bounded by tuner.gates.QUALITY_BUDGET_S).
            try:
                trial.quality = self.quality.check(
                    server.base_url, server.served_model or self.model_path
                )
            except QualityError as exc:
                _raise_if_died(server, "during its quality check")
                trial.status, trial.error = "failed", f"quality could not be measured: {exc}"
                self.say(f"{label}: {trial.error}")
                return
            q = trial.quality
            self.say(
                f"{label}: quality {q.metric} {q.value:.4g} against {q.baseline_value:.4g} "
                f"({q.degradation_pct:+.2f} %, limit {self.quality_limit:g} %)"
            )
        trial.warmup_s = self.measurer.warmup(server, start, self.model_path)
        if baseline:
            if self.opts.probe:
                self._diagnose(server)
            if self._wants("quantisation"):
                self._baseline_quality(server)
            start = self._start_load(None)
        elif best is not None and best.warmup_s and trial.warmup_s > 3 * best.warmup_s + 20:
            trial.status, trial.error = (
                "abandoned",
                f"warm-up took {trial.warmup_s:.0f} s against {best.warmup_s:.0f} s for the best "
                "configuration at the same load: far slower",
            )
            self.say(f"{label}: abandoned: {trial.error}")
            return
        cap = find_capacity(
            lambda x: self._point(server, trial, tdir, x, self._n_search(x, trial), label),
            start=start,
            axis=self.axis,
            abandon=None if baseline else self._abandon_rule(trial, best),
            max_points=7 if self.launches else max(1, self.opts.trials),
            should_stop=partial(self._points_time_left, trial),
        )
        self._score(trial, cap.abandoned)
        if baseline and trial.status == "ok" and self.opts.confirm_baseline and self.launches:
            self.baseline_confirmed = self._confirm_on(
                server, trial, tdir, "baseline confirmation", baseline=True
            )
        if trial.quality is not None:
            if trial.metrics is not None:
                trial.metrics.quality = trial.quality
            if not trial.quality.holds:
                trial.rejected = (
                    f"quality: {trial.quality.metric} degraded {trial.quality.degradation_pct:.2f} "
                    f"% against the baseline, over the {self.quality_limit:g} % allowed"
                )
        if trial.status in ("ok", "abandoned", "infeasible"):
            # Also where it lost on speed: whether speculation changed outputs is a finding.
            self._exactness(server, trial, tdir, label, best)
        if trial.rejected:
            self.say(f"{label}: not recommendable: {trial.rejected}")
        elif trial.status == "ok" and best is not None:
            self._side_by_side(server, trial, tdir, best)

    def _side_by_side(
        self, server: RunningServer, trial: TrialReport, tdir: Path, best: TrialReport
    ) -> None:
        """Too close to call (each estimate inside the other's interval): start the best
        configuration again beside this one and measure both at their capacities, interleaved
        with fresh salts (tuner/compare.py); both are then scored from all their points."""
        a, b = best.estimate, trial.estimate
        if not (self.opts.side_by_side and self.launches and a is not None and b is not None):
            return
        if not too_close(a, b, self.opts.tie_band):
            return
        loads = sorted(
            {self.axis.floor(x) for x in (self._load_of(best), self._load_of(trial)) if x}
        )
        rounds = 1
        if len(loads) == 2 and loads[1] <= loads[0] * 1.05:
            loads, rounds = loads[:1], 2  # one load, measured twice each (A-B-B-A)
        rps = trial.metrics.requests_per_s if trial.metrics else 1.0
        point_s = sum(self._n_search(x, trial) for x in loads) * 2 * rounds / max(rps, 1e-3)
        need = (best.startup_s or 60.0) + (best.warmup_s or 20.0) + point_s
        if not self.budget.fits(need, self._confirm_estimate_s()):
            self.notes.append(
                f"trials {best.number} and {trial.number} are within each other's intervals; "
                "the time budget left no room to measure them side by side"
            )
            return
        self.say(
            f"trial {trial.number} ({b.tokens_per_s:.0f} tok/s) and trial {best.number} "
            f"({a.tokens_per_s:.0f}) are too close to call: measuring both again side by side"
        )
        bdir = self.out / "trials" / f"{best.number:03d}"
        spec = LaunchSpec(best.launch_command, best.env).with_port(free_port())
        labels = (f"trial {best.number} (side by side)", f"trial {trial.number} (side by side)")
        try:
            with self._server(spec, bdir / f"server-beside-{trial.number:03d}.log") as other:
                self.measurer.warmup(other, loads[0], self.model_path)
                run = side_by_side(
                    {
                        "a": lambda x: self._point(
                            other, best, bdir, x, self._n_search(x, best), labels[0], True
                        ),
                        "b": lambda x: self._point(
                            server, trial, tdir, x, self._n_search(x, trial), labels[1], True
                        ),
                    },
                    loads,
                    rounds=rounds,
                    should_stop=partial(self._points_time_left, trial),
                )
        except EngineStartError as exc:
            _raise_if_died(server, "during a side-by-side repeat")  # this trial's own engine
            what = "died" if isinstance(exc, EngineDied) else "failed to start"
            self.notes.append(f"side by side with trial {best.number}: it {what}: {exc}")
            return
        after = (self._rescore(best, "side by side"), self._rescore(trial, "side by side"))
        report = verdict((best.number, trial.number), loads, run, (a, b), after)
        self.comparisons.append(report)
        write_atomic(bdir / "trial.json", dump_json(best))
        self.say(f"side by side: trial {report.winner} goes on; {report.note}")

    def _start_load(self, best: TrialReport | None) -> float:
        """Where a capacity search starts: the best configuration's capacity (so two are
        compared at the same load first); for the first, the start option, or under the rate
        model what the probe's load point sustained."""
        if best is not None and (x := self._load_of(best)) is not None:
            return self.axis.floor(x)
        if self.axis.kind == "concurrency":
            return float(self.opts.start_concurrency)
        if self.opts.start_rate_rps is not None:
            return self.opts.start_rate_rps
        d = self.diagnosis
        if d is not None and d.load_metrics is not None and d.load_metrics.requests_per_s > 0:
            return self.axis.floor(d.load_metrics.requests_per_s)
        return 1.0

    def _selected(self, stage: Stage) -> bool:
        """Whether --stages (names or kinds) leaves this stage in."""
        chosen = self.opts.stages
        return chosen is None or stage.name in chosen or stage.stage_kind in chosen

    def _wants(self, kind: str) -> bool:
        """Whether the space has a stage of this kind that --stages does not leave out."""
        return self.space is not None and any(self._selected(s) for s in self.space.of_kind(kind))

    def _no_effect(self, params: dict[str, Any], log: Path) -> str | None:
        """A chosen option the engine's log says did nothing (the space's ``no_effect_log``)."""
        if self.space is None:
            return None
        text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        for choice, pattern in self.space.no_effect_patterns(params):
            if line := found_in_log(pattern, text):
                return f"{choice} had no effect: the server log says {line[-200:]!r}"
        return None

    def _baseline_quality(self, server: RunningServer) -> None:
        """The quality gate's reference, on the baseline server (tuner/gates.py)."""
        notes = self.quality.take_reference(server.base_url, server.served_model or self.model_path)
        self.notes += notes
        if isinstance(self.quality.ref, Quality):
            self.say(f"quality reference: perplexity {self.quality.ref.value:.4g}")

    def _exactness(
        self,
        server: RunningServer,
        trial: TrialReport,
        tdir: Path,
        label: str,
        best: TrialReport | None,
    ) -> None:
        """Greedy outputs at concurrency 1: kept as the reference by a configuration that may
        be carried into the speculative stage, compared with that reference by one that uses
        speculative decoding (tuner/gates.py)."""
        if self.space is None or not self._wants("speculative"):
            return
        speculative = bool(self.space.changed("speculative", trial.params))
        new_best = not trial.rejected and (
            best is None or (trial.score_tokens_per_s or 0.0) > (best.score_tokens_per_s or 0.0)
        )
        if not speculative and not (new_best and trial.status == "ok"):
            return
        try:
            outs = self.exactness.outputs(server.base_url, server.served_model or self.model_path)
        except QualityError as exc:
            _raise_if_died(server, "during its exactness check")
            if speculative:
                trial.exactness = Exactness(checked=False, reason=f"greedy outputs: {exc}")
                trial.rejected = trial.rejected or f"exactness not checked: {exc}"
            return
        write_atomic(tdir / "greedy.json", orjson.dumps([o.model_dump() for o in outs]))
        if not speculative:
            self.exactness.keep(trial.number, outs)
            return
        trial.exactness = self.exactness.compare(outs)
        self.say(f"{label}: exactness: {describe(trial.exactness)}")
        trial.rejected = trial.rejected or rejection(trial.exactness, self.opts.accept_divergence)

    def _diagnose(self, server: RunningServer) -> None:
        """The probe, on the baseline server: where the time goes, which stages can pay off."""
        t0 = time.monotonic()
        self.say("probe: measuring where the time goes on the baseline server")
        self.client.base_url = server.base_url
        try:
            self.diagnosis = run_diagnosis(
                self.client,
                served_model=server.served_model or self.model_path,
                tokenizer=self.tokenizer,
                workload=self.opts.workload,
                load_concurrency=self.opts.start_concurrency,
                series=self.engine.series,
                model_dir=self.model_path if Path(self.model_path).is_dir() else None,
                llc_text=self.hw.l3_cache,
                device=self.hw.device,
                seed=self._fresh_seed(),
                ignore_eos=self.ignore_eos,
                progress=self.say,
            )
            self.say(f"probe: {self.diagnosis.verdict.summary}")
        except Exception as exc:  # the probe informs the plan; the search can go on without it
            self.notes.append(f"the probe failed ({type(exc).__name__}: {exc}); stages unplanned")
            self.say(f"probe failed: {exc}")
        self.probe_s = time.monotonic() - t0
        self.clock.measure_s += self.probe_s

    def _score(self, trial: TrialReport, abandoned: str | None) -> None:
        """The trial's status and score from the estimate over all its points."""
        est = self._apply_estimate(trial)
        if abandoned:
            trial.status, trial.error = "abandoned", abandoned
        elif est is None or est.censored == "below":
            trial.status = "infeasible"
            low = min((self._point_load(p) for p in trial.points), default=None)
            where = self.axis.label(low) if low is not None else "none"
            trial.error = f"no load met the SLOs (lowest tried: {where})"
        else:
            trial.status = "ok"
        if trial.status == "ok" and est is not None:
            self.say(f"trial {trial.number}: capacity {_describe(est, self.axis)}")
        else:
            trial.score_tokens_per_s, trial.load = None, None
            if trial.points:  # no score; its last point's figures (acceptance included) stay
                trial.metrics = trial.points[-1].metrics
            self.say(f"trial {trial.number}: {trial.status}: {trial.error}")

    def _rescore(self, trial: TrialReport, after: str) -> CapacityEstimate | None:
        """The estimate again, with points measured later (side by side, a confirmation); a
        configuration none of whose loads holds any more has no score and is infeasible."""
        est = self._apply_estimate(trial)
        if trial.status == "ok" and trial.score_tokens_per_s is None:
            trial.status = "infeasible"
            trial.error = f"no load met the SLOs once measured again ({after})"
            self.say(f"trial {trial.number}: infeasible: {trial.error}")
        return est

    def _apply_estimate(self, trial: TrialReport) -> CapacityEstimate | None:
        """Score = output tokens/s at the estimated capacity; ``load`` = that capacity;
        ``metrics`` = the measured point closest under it (the highest that held below every
        load that failed)."""
        est = trial.estimate = self._estimate(trial.number)
        if est is None or est.censored == "below" or est.load is None:
            trial.score_tokens_per_s, trial.load = None, None
            return est
        trial.score_tokens_per_s = est.tokens_per_s
        trial.load = {self.axis.key: round(est.load, 3)}
        lowest_fail = min(
            (self._point_load(p) for p in trial.points if not p.verdict.holds), default=math.inf
        )
        held = [p for p in trial.points if p.verdict.holds and self._point_load(p) < lowest_fail]
        if held:
            trial.metrics = max(held, key=self._point_load).metrics
        return est

    def _point_load(self, p: PointReport) -> float:
        return float(p.load[self.axis.key])

    def _point(
        self,
        server: RunningServer,
        trial: TrialReport,
        tdir: Path,
        x: float,
        n: int,
        label: str,
        side_by_side: bool = False,
    ) -> PointOutcome:
        """Measure one load point of a trial; its records, samples and summary are kept.

        Raises:
            EngineDied: the engine exited during the point (after it is written down)."""
        m = self.measurer.measure(server, x, n, self.model_path)
        metrics, records, server_delta = m.metrics, m.records, m.server
        j = self.measurer.judge(m)
        verdict = j.verdict
        rfile = tdir / f"{_load_slug(self.axis, x)}-{len(trial.points)}.jsonl"
        write_records(rfile, records)
        window = self.measurer.score_window(x, len(records), metrics)
        self._add_samples(trial.number, Samples.from_records(x, j.records, window))
        trial.points.append(
            PointReport(
                load=self._load(x),
                metrics=metrics,
                verdict=verdict,
                records_file=str(rfile),
                server=server_delta,
                side_by_side=side_by_side,
            )
        )
        write_atomic(tdir / "trial.json", dump_json(trial))
        self.say(f"{label}: {self.axis.label(x):<10} {point_line(metrics, verdict)}")
        _raise_if_died(server, f"while measured at {self.axis.label(x)}", metrics.n_failed > 0)
        stop.check()  # a first Ctrl-C stops here, with this point written
        return PointOutcome(x, verdict.holds, verdict.worst_margin, metrics.output_tokens_per_s)

    # ----------------------------------------------------------------- search
    def _trial_estimate_s(self) -> float:
        """The mean wall time of the configurations measured so far (the probe, which only the
        baseline runs, left out). A trial that runs into the budget stops measuring early
        (``_points_time_left``), so the mean, not the worst case, is the right guard."""
        walls = [t.wall_s for t in self.trials]
        if self.baseline:
            walls.append(self.baseline.wall_s - self.probe_s)
        return sum(walls) / len(walls) if walls else 180.0

    def _trial_min_s(self) -> float:
        """The least a trial needs to be worth starting: a start, a warm-up and one load point
        at the best configuration's load. The capacity search stops on its own when more
        points would eat the confirmation's time (``_points_time_left``), so this, not a whole
        trial (a slow static baseline's eight minutes, say), is what the budget must hold."""
        measured = [t for t in [self.baseline, *self.trials] if t and t.startup_s is not None]
        startup = sum(t.startup_s or 0.0 for t in measured) / len(measured) if measured else 60.0
        warmup = sum(t.warmup_s or 0.0 for t in measured) / len(measured) if measured else 30.0
        best = self._best()
        if best is None or best.metrics is None or not best.load:
            return startup + warmup + 60.0
        x = self._load_of(best) or 1.0
        point = self._n_search(x, best) / max(best.metrics.requests_per_s, 1e-3)
        return startup + warmup + point

    def _confirm_estimate_s(self) -> float:
        """What the final confirmation needs: a start, a warm-up and two full-size tries (the
        first at the fitted headroom load is at the edge of the noise often enough that a
        second, lower one must fit)."""
        best = self._best()
        if best is None or best.metrics is None:
            return 0.0
        x = self._load_of(best) or 1.0
        rps = max(best.metrics.requests_per_s, 1e-3)
        per_s = x if self.axis.kind == "rate" else rps
        e2e_s = (best.metrics.e2e_ms.p50 or 0.0) / 1000.0
        one_try = self._n_confirm_fit(x, rps) / max(per_s, 1e-3) + e2e_s
        return (best.startup_s or 60.0) + 30.0 + 2 * one_try

    def _time_left_reason(self, started: list[int] | None = None) -> str | None:
        left = self.budget.left()
        need = self._trial_min_s() + self._confirm_estimate_s()
        if left < need:
            return (
                f"time budget: {left:.0f} s left; a start, one load point and the confirmation "
                f"need about {need:.0f} s"
            )
        # A stage keeps its share of the budget for the stages after it (its first trial
        # always runs if the whole budget allows).
        if started and not self.budget.stage_fits(self._trial_estimate_s()):
            return "this stage's share of the time budget is spent (later stages keep theirs)"
        return None

    def _set_stage_deadline(self, n_trials: int, later_trials: int) -> None:
        """This stage's share of the time left, in proportion to its planned trials."""
        share = n_trials / max(1, n_trials + later_trials)
        self.budget.open_stage(share, reserve_s=self._confirm_estimate_s())

    def _points_time_left(self, trial: TrialReport | None = None) -> str | None:
        """Stop a capacity search early when the budget must keep time for the confirmation:
        the next point (about as long as the trial's last one) must fit before it."""
        last_s = 0.0
        if trial is not None and trial.points:
            m = trial.points[-1].metrics
            last_s = m.duration_s
        if not self.budget.fits(last_s, self._confirm_estimate_s()):
            return "time budget: stopped measuring to keep time for the confirmation"
        return None

    def _plan(self) -> list[tuple[str, int | None, str, str | None]]:
        """Per stage in the space's order: (name, trials or None if skipped, reason, expected).

        The probe's verdict (per stage kind) weighs the budget; a stage it does not expect to
        pay off still gets at least one trial, so the prediction is checked by measurement. A
        kind the search space has no stage of, or a stage --stages leaves out, is skipped with
        its reason.
        """
        assert self.space is not None
        if not self.launches:
            why = "endpoint: the server's settings are not tuned (autotune did not start it)"
            return [(name, None, why, None) for name in STAGE_ORDER]
        verdict = {p.name: p for p in self.diagnosis.verdict.stages} if self.diagnosis else {}
        rows: list[tuple[str, float | None, str, str | None]] = []
        for kind in STAGE_ORDER:
            v = verdict.get(kind)
            expected = v.expected if v else None
            why = f"probe: {v.expected} to pay off: {v.reason}" if v else "no probe verdict"
            stages = self.space.of_kind(kind)
            if not stages:
                rows.append(
                    (
                        kind,
                        None,
                        f"the search space ({self.space.engine}, {self.space.device}) has no "
                        f"{kind} knobs; {why}",
                        expected,
                    )
                )
            for stage in stages:
                if not self._selected(stage):
                    rows.append((stage.name, None, f"left out by --stages; {why}", expected))
                else:
                    rows.append((stage.name, v.weight if v else 1.0, why, expected))
        run = [(n, w) for n, w, _, _ in rows if w is not None]
        total_w = sum(w for _, w in run) or 1.0
        left = self.opts.trials
        alloc: dict[str, int] = {}
        for i, (name, w) in enumerate(run):
            later = len(run) - i - 1  # keep one trial for each later stage where possible
            share = round(self.opts.trials * w / total_w)
            n = max(1, min(share, left - later)) if left > 0 else 0
            alloc[name] = n
            left -= n
        if run and left > 0:
            alloc[run[0][0]] += left  # rounding leftovers go to the first stage run
        return [
            (name, alloc.get(name) if w is not None else None, why, exp)
            for name, w, why, exp in rows
        ]

    def _search(self) -> None:
        assert self.space is not None
        self.baseline = self.evaluate(0, "baseline", {})
        if self.space.common.reason:
            self.notes.append(self.space.common.reason)
        carried: dict[str, Any] = {}
        spare = 0  # trials a stage did not use pass on to the next
        number = 1
        plan = self._plan()
        for i_stage, (name, planned, why, expected) in enumerate(plan):
            stage = self.space.stage(name)
            if planned is None or stage is None or planned + spare <= 0:
                reason = why if planned is None else f"no trials left in --trials; {why}"
                self.stage_reports.append(
                    StageReport(
                        name=name,
                        status="skipped",
                        reason=reason,
                        expected=expected,
                        trials=[],
                        best_params=None,
                        best_score=None,
                        gain=None,
                    )
                )
                self.say(f"stage {name} skipped: {reason}")
                continue
            n_trials = planned + spare
            before = self._best()
            score_before = before.score_tokens_per_s if before else None
            if stage.stage_kind == "speculative":
                # Speculative configurations are checked against the one they start from.
                self.exactness.reference = before.number if before else None
            later = sum(p or 0 for _, p, _, _ in plan[i_stage + 1 :])
            self._set_stage_deadline(n_trials, later)
            known: list[tuple[dict[str, Any], Outcome]] = []
            stage_defaults = stage.defaults()
            if before is not None and None not in stage_defaults.values():
                # The configuration carried in is this stage's defaults: already measured.
                known.append((stage_defaults, self._outcome(before)))
            numbers: list[int] = []

            def evaluate(
                params: dict[str, Any],
                stage_name: str = name,
                numbers: list[int] = numbers,
                carried: dict[str, Any] = carried,
            ) -> Outcome:
                nonlocal number
                t = self.evaluate(number, stage_name, {**carried, **params})
                self.trials.append(t)
                numbers.append(number)
                number += 1
                return self._outcome(t)

            self.say(f"stage {name}: up to {n_trials} configurations ({why})")
            result: StageResult = run_stage(
                stage,
                evaluate,
                storage_path=self.out / "optuna.journal",
                n_trials=n_trials,
                seed=self.opts.seed,
                known=known,
                should_stop=partial(self._time_left_reason, started=numbers),
                refuse=partial(self._refuse, dict(carried)),
            )
            refused = ""
            if result.refused:
                refused = (
                    f"; {len(result.refused)} sampled configurations were not started: the engine "
                    f"refuses them (first: {result.refused[0][1]})"
                )
            spare = n_trials - result.started
            if before is not None:  # its current record (a resume restores new objects)
                before = next(
                    t for t in [self.baseline, *self.trials] if t and t.number == before.number
                )
            # What goes on is the best configuration by its current estimate (a side-by-side
            # repeat may have changed the order since Optuna was told its score).
            best_trial = self._best()
            if best_trial is not None:
                carried = dict(best_trial.params)
            gain = (
                best_trial.score_tokens_per_s / score_before
                if best_trial and best_trial.score_tokens_per_s and score_before
                else None
            )
            self.stage_reports.append(
                StageReport(
                    name=name,
                    status="run",
                    expected=expected,
                    reason=f"{result.started} configurations; stopped: {result.stopped_because}"
                    f"{refused}; {why}",
                    trials=numbers,
                    best_params=best_trial.params if best_trial else None,
                    best_score=best_trial.score_tokens_per_s if best_trial else None,
                    best_trial=best_trial.number if best_trial else None,
                    gain=gain,
                    contrast=self._contrast(stage, numbers, before),
                    # Without a trial of its own, the stage checked no prediction.
                    prediction_held=_prediction_held(expected, gain) if numbers else None,
                )
            )
            self.say(
                f"stage {name} done: {result.started} configurations, "
                f"stopped: {result.stopped_because}"
            )

    def _refuse(self, carried: dict[str, Any], params: dict[str, Any]) -> str | None:
        """Why the engine would refuse this configuration at start-up (the space's rules)."""
        assert self.space is not None
        return self.space.broken_rule({**carried, **params}, self.ctx)

    def _contrast(
        self, stage: Stage, numbers: list[int], before: TrialReport | None
    ) -> ContrastReport | None:
        """The stage's own figure (``contrast`` in its space): best score with the knob on over
        the best with it off, among this stage's trials and the configuration carried in."""
        c = stage.contrast
        if c is None:
            return None
        default = next(k.default for k in stage.knobs if k.name == c.knob)
        pool = [t for t in self.trials if t.number in numbers]
        if before is not None:
            pool.append(before)
        ok = [t for t in pool if t.status == "ok" and not t.rejected]

        def top(on: bool) -> TrialReport | None:
            side = [t for t in ok if (t.params.get(c.knob, default) == c.on) == on]
            return max(side, key=lambda t: t.score_tokens_per_s or 0.0) if side else None

        hi, lo = top(True), top(False)
        hs = hi.score_tokens_per_s if hi else None
        ls = lo.score_tokens_per_s if lo else None
        report = ContrastReport(
            label=c.label,
            knob=c.knob,
            factor=hs / ls if hs and ls else None,
            on_score=hs,
            off_score=ls,
            on_trial=hi.number if hi else None,
            off_trial=lo.number if lo else None,
        )
        if report.factor is not None:
            self.say(f"stage {stage.name}: {c.label} {report.factor:.2f}x ({hs:.0f} / {ls:.0f})")
        return report

    @staticmethod
    def _outcome(t: TrialReport) -> Outcome:
        if t.status == "ok" and t.rejected:
            m = t.quality.margin if t.quality and not t.quality.holds else 1.0
            return Outcome("infeasible", 0.0, max(m, 1e-6), t)
        if t.status == "ok":
            held = [p.verdict.worst_margin for p in t.points if p.verdict.holds]
            attrs = {}
            if (e := t.estimate) is not None:
                attrs = {
                    "capacity_load": e.load,
                    "tokens_per_s_low": e.low,
                    "tokens_per_s_high": e.high,
                    "censored": e.censored,
                    "points": e.n_points,
                }
            return Outcome(
                "ok", t.score_tokens_per_s or 0.0, min(held, default=0.0), t, attrs=attrs
            )
        if t.status == "infeasible":
            m = min((p.verdict.worst_margin for p in t.points), default=1.0)
            return Outcome("infeasible", 0.0, max(m, 1e-6), t)
        if t.status in ("abandoned", "no_effect"):
            return Outcome("pruned", 0.0, 1.0, t)
        return Outcome("failed", 0.0, 1.0, t)

    # ----------------------------------------------------------------- confirmation
    def _confirm_on(
        self,
        server: RunningServer,
        trial: TrialReport,
        cdir: Path,
        label: str,
        *,
        baseline: bool = False,
    ) -> Recommendation | None:
        """Confirm a configuration on a running server (tuner/confirm.py): its load with
        headroom, the full sample, refined within the budget. The baseline's confirmation
        keeps the time one trial and the final confirmation need, and has two tries at most
        under a budget. None when the budget has no room for even one full-size try."""
        rps = trial.metrics.requests_per_s if trial.metrics else 1.0
        e2e_s = (trial.metrics.e2e_ms.p50 or 0.0) / 1000.0 if trial.metrics else 0.0
        # Open loop: a margin in load too (tuner/confirm.py says why); closed loop: latency's.
        margin = self.opts.load_margin if self.axis.kind == "rate" else 0.0
        points = self.samples.get(trial.number, [])
        first = target_load(points, self.cons, self.axis, self.opts.headroom, margin)
        budgeted = self.opts.time_budget_s is not None
        reserve = self._trial_min_s() + self._confirm_estimate_s() if baseline else 0.0

        def n_for(x: float) -> int:
            left = self.budget.left(10.0 + reserve)
            return self._n_confirm_fit(x, rps, left if math.isfinite(left) else None)

        def try_s(x: float) -> float:
            """About how long one try takes: its arrivals (or its requests at the measured
            rate), then the last ones' lifetime."""
            per_s = x if self.axis.kind == "rate" else rps
            return n_for(x) / max(per_s, 1e-3) + e2e_s

        if budgeted and baseline and not self.budget.fits(try_s(first), reserve):
            self.notes.append(
                f"the time budget left no room to confirm the baseline (about "
                f"{try_s(first):.0f} s for one try): its figure is the search estimate, and no "
                "gain is divided across a confirmed and an unconfirmed figure"
            )
            self.say(f"{label}: skipped (time budget)")
            return None
        cdir.mkdir(parents=True, exist_ok=True)

        def measure(x: float) -> Try:
            n = n_for(x)
            if n < self._n_confirm(x):
                self.notes.append(
                    f"{label}: the time budget allowed {n} requests at {self.axis.label(x)}, "
                    f"fewer than the {self._n_confirm(x)} the SLO percentile needs: provisional"
                )
            m = self.measurer.measure(server, x, n, self.model_path)
            j = self.measurer.judge(m)
            metrics, v = m.metrics, j.verdict
            write_records(cdir / f"{_load_slug(self.axis, x)}.jsonl", m.records)
            self.say(f"{label}: {self.axis.label(x):<10} {point_line(metrics, v)}")
            _raise_if_died(
                server, f"during its confirmation at {self.axis.label(x)}", metrics.n_failed > 0
            )
            stop.check()
            window = self.measurer.score_window(x, len(m.records), metrics)
            samples = Samples.from_records(x, j.records, window)
            return Try(x, samples, v, metrics)

        def may_try(x: float) -> str | None:
            need = try_s(x)
            if not self.budget.fits(need, reserve):
                return f"time budget: another try at {self.axis.label(x)} needs about {need:.0f} s"
            return None

        where = f"latency at {1 - self.opts.headroom:.0%} of its limit by the fit" + (
            f", at most {1 - margin:.0%} of the capacity" if margin else ""
        )
        self.say(
            f"{label}: trial {trial.number} at {self.axis.label(first)} ({where}) with "
            f"{n_for(first)} requests"
        )
        res = confirm(
            measure,
            search_points=points,
            cons=self.cons,
            axis=self.axis,
            headroom=self.opts.headroom,
            max_tries=2 if baseline and budgeted else 3,
            may_try=may_try,
            start=first,
            load_margin=margin,
        )
        rec = self._recommendation(trial, res, label)
        if baseline and res.tries:
            # The search compares every trial with the baseline: from here on, with an estimate
            # that has the full-size tries in it too (short open-loop points are optimistic).
            for t in res.tries:
                self._add_samples(trial.number, t.samples)
            est = self._rescore(trial, "its confirmation")
            if est is not None and trial.status == "ok" and est.censored != "below":
                self.say(
                    f"trial {trial.number}: with its confirmation, {_describe(est, self.axis)}"
                )
        return rec

    def _recommendation(
        self, trial: TrialReport, res: ConfirmResult, label: str
    ) -> Recommendation | None:
        pick = res.best_effort
        if pick is None:
            return None
        m = pick.metrics
        assert isinstance(m, LoadMetrics)
        m.quality = trial.quality
        met = res.chosen is not None
        if not met:
            held = pick.verdict.holds
            self.notes.append(
                f"{label}: "
                + (
                    f"the SLOs held at {self.axis.label(pick.load)}, but not with the "
                    f"{self.opts.headroom:.0%} headroom and the full sample asked for"
                    if held
                    else f"no confirmation try met the SLOs ({len(res.tries)} tried; {res.stopped})"
                )
            )
        searched = self.samples.get(trial.number, [])
        new = [t.samples for t in res.tries if all(t.samples is not p for p in searched)]
        all_points = [*searched, *new]
        capacity = estimate(all_points, self.cons, seed=self.opts.seed + trial.number)
        return Recommendation(
            params=trial.params,
            env=trial.env,
            launch_command=trial.launch_command if self.launches else None,
            load=self._load(pick.load),
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
                if self.axis.kind == "rate"
                else m.output_tokens_per_s
            ),
            search_estimate=trial.estimate,
            capacity=capacity,
            tries=[
                ConfirmTry(
                    load=self._load(t.load),
                    output_tokens_per_s=t.metrics.output_tokens_per_s,
                    worst_margin=t.verdict.worst_margin,
                    provisional=t.verdict.provisional,
                    meets=t.meets(self.opts.headroom),
                    n_requests=t.metrics.n_requests,
                )
                for t in res.tries
            ],
            gain_vs_baseline=None,
            confirmation="",
        )

    def _confirm(self) -> None:
        best = self._best()
        if best is None or best.load is None:
            self.say("no configuration met the SLOs at any load: nothing to recommend")
            self.notes.append("no configuration met the SLOs; loosen the SLOs or the workload")
            return
        if best.number == 0 and self.baseline_confirmed is not None:
            # Nothing beat the baseline, and it was confirmed on its own fresh start already.
            rec = self.baseline_confirmed.model_copy()
            rec.gain_vs_baseline, rec.gain_basis = 1.0, "the baseline is the recommendation"
            rec.confirmation = (
                "the baseline's own fresh start from its launch command, confirmed after its "
                "search: "
                + ", ".join(self.axis.label(float(t.load[self.axis.key])) for t in rec.tries)
            )
            self.recommended = rec
            return
        spec = (
            LaunchSpec(best.launch_command, best.env).with_port(free_port())
            if self.launches
            else None
        )
        cdir = self.out / "confirmation"
        cdir.mkdir(parents=True, exist_ok=True)
        try:
            with self._server(spec, cdir / "server.log") as server:
                self.measurer.warmup(
                    server, self.axis.floor(self._load_of(best) or 1.0), self.model_path
                )
                confirmed = self._confirm_on(server, best, cdir, "confirmation")
        except EngineStartError as exc:
            what = "the engine died" if isinstance(exc, EngineDied) else "failed to start"
            self.notes.append(f"confirmation: {what}: {exc}; nothing is recommended")
            self.say(f"confirmation: {what}: {exc}")
            return
        if confirmed is None:
            return
        rec = confirmed
        base = self.baseline_confirmed
        if base is not None and weaker_than(rec, base):
            # Measured the same way (full sample, fresh start, the headroom), the baseline's
            # claim is the stronger: recommend it, and say what the winner confirmed.
            self.notes.append(
                f"trial {rec.from_trial} led the search, but its confirmation "
                f"({rec.metrics.output_tokens_per_s:.0f} output tokens/s at "
                f"{self.axis.label(float(rec.load[self.axis.key]))}) came out below the "
                f"baseline's ({base.metrics.output_tokens_per_s:.0f} at "
                f"{self.axis.label(float(base.load[self.axis.key]))}): the baseline is recommended"
            )
            self.say(f"confirmation: below the confirmed baseline; {self.notes[-1]}")
            out = base.model_copy()
            out.gain_vs_baseline, out.gain_basis = 1.0, "the baseline is the recommendation"
            out.confirmation = (
                "the baseline's own fresh start from its launch command, confirmed after its "
                f"search; trial {rec.from_trial}'s confirmation came out lower"
            )
            self.recommended = out
            return
        loads = ", ".join(self.axis.label(float(t.load[self.axis.key])) for t in rec.tries)
        how = (
            f"engine restarted from launch_command, warmed up, then {len(rec.tries)} "
            f"full-size tries ({loads}); the claim is the highest that met every SLO"
            if spec
            else "the running endpoint (not restarted: autotune does not manage it), warmed up, "
            f"then {rec.n_requests} requests"
        )
        rec.confirmation = how
        need = self.opts.confirm_requests or self.opts.slos.requests_needed
        if base is not None and min(rec.n_requests, base.n_requests) < need:
            # A figure from fewer requests than the percentile needs (the budget cut it) has
            # a window mostly of ramp-up and drain: no ratio of it means anything.
            short = "the recommendation's" if rec.n_requests < need else "the baseline's"
            rec.gain_basis = (
                f"not computed: {short} confirmation had fewer requests than the SLO "
                "percentile needs; compare the search estimates (trials[].estimate) instead"
            )
        elif base is not None and base.metrics.output_tokens_per_s > 0:
            rec.gain_vs_baseline = (
                rec.metrics.output_tokens_per_s / base.metrics.output_tokens_per_s
            )
            met = [name for name, r in (("it", rec), ("the baseline", base)) if not r.meets_slo]
            rec.gain_basis = "confirmed over confirmed" + (
                f" (full-size measurements; {' and '.join(met)} did not meet every SLO with "
                "the headroom)"
                if met
                else " (both full-sample, with the headroom)"
            )
        elif best.number == 0:
            rec.gain_vs_baseline = 1.0
            rec.gain_basis = "the baseline is the recommendation"
        else:
            rec.gain_basis = (
                "not computed: the baseline was not confirmed; compare the search estimates "
                "(trials[].estimate) with each other instead"
            )
        self.recommended = rec

    # ----------------------------------------------------------------- report
    def _report_exactness(self) -> Exactness | None:
        """The recommended configuration's exactness check, or, where the recommendation has
        no speculative decoding, the best speculative configuration's (with why it lost)."""
        if self.recommended is not None:
            rec = next((t for t in self.trials if t.number == self.recommended.from_trial), None)
            if rec is not None and rec.exactness is not None:
                return rec.exactness
        spec = [t for t in self.trials if t.exactness is not None]
        if not spec:
            return None
        top = max(spec, key=lambda t: (t.status == "ok", t.score_tokens_per_s or 0.0))
        assert top.exactness is not None
        why = top.rejected or (
            f"{top.status}: {top.error}" if top.error else "it was not the fastest configuration"
        )
        return top.exactness.model_copy(
            update={"reason": f"trial {top.number}, not recommended: {why}. {top.exactness.reason}"}
        )

    def _write_report(self, status: RunStatus, error: str | None) -> Report:
        from tuner.render import render_markdown

        wl = self.opts.workload
        workload: dict[str, Any] = (
            {
                "kind": "synthetic",
                "input_len": wl.input_len,
                "output_len": wl.output_len,
                "spread": wl.spread,
                "spec": wl.label,
            }
            if isinstance(wl, SyntheticWorkload)
            else {"kind": "file", "path": wl.path, "n_items": len(wl.items)}
        )
        c = self.clock
        wall = c.elapsed()
        report = Report(
            run_id=self.run_id,
            status=status,
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            command=self.opts.command,
            model=self.opts.model or self.model_path,
            model_path=self.model_path,
            engine=self.engine.name,
            engine_version=self.engine.version(),
            endpoint=self.attached.base_url if self.attached else None,
            hardware=self.hw,
            workload=workload,
            load={"model": self.axis.kind, "unit": self.axis.unit},
            salt=self.salt,
            slo=[
                SLOReport(metric=s.metric, percentile=s.percentile, limit_ms=s.limit_ms)
                for s in self.opts.slos.latency
            ],
            quality_slo={
                "max_degradation_pct": self.quality_limit,
                "default": self.opts.slos.quality is None,
            },
            max_error_rate=self.opts.max_error_rate,
            options=self.opts.model_dump(
                mode="json", exclude={"slos", "workload", "command", "model", "engine"}
            ),
            probe=self.diagnosis,
            knob_defaults={k.name: k.default for k in self.space.knobs().values()}
            if self.space
            else {},
            baseline=self.baseline,
            baseline_note=(self.space.baseline.reason if self.space else "")
            or "the engine's own defaults",
            trials=self.trials,
            stages=self.stage_reports,
            recommended=self.recommended,
            baseline_confirmation=self.baseline_confirmed,
            comparisons=self.comparisons,
            exactness=self._report_exactness(),
            timing=Timing(
                wall_s=wall,
                engine_starts=c.engine_starts,
                startup_s=c.startup_s,
                warmup_s=c.warmup_s,
                measure_s=c.measure_s,
                other_s=max(0.0, wall - c.startup_s - c.warmup_s - c.measure_s),
            ),
            notes=self.notes,
            error=error,
        )
        self.out.mkdir(parents=True, exist_ok=True)
        write_atomic(self.out / "report.json", dump_json(report))
        write_atomic(self.out / "report.md", render_markdown(report).encode())
        return report


def _raise_if_died(server: RunningServer, when: str, failures: bool = True) -> None:
    died = getattr(server, "died", None)  # an attached endpoint is not ours to watch
    if died is not None and (exc := died(1.0 if failures else 0.0)) is not None:
        raise EngineDied(exc.reason, f"{exc.detail} {when}")


def _load_slug(axis: LoadAxis, x: float) -> str:
    """A load in a records file name: ``c0032`` or ``r2.45``."""
    return f"c{int(x):04d}" if axis.kind == "concurrency" else f"r{x:g}"


def _describe(est: CapacityEstimate, axis: LoadAxis) -> str:
    """``24.3 concurrent requests: 301 output tokens/s (90 % 287-315)``, censoring said."""
    hi = "open" if est.high is None else f"{est.high:.0f}"
    where = f"{est.load:.3g} {axis.unit}" if est.load is not None else "below every load tried"
    if est.censored == "above":
        where = f"at least {where} (every load tried held)"
    return f"{where}: {est.tokens_per_s:.0f} output tokens/s (90 % {est.low:.0f}-{hi})"


def _max_positions(model_path: str) -> int | None:
    """The model's context length from its config.json (what vLLM takes as max_model_len)."""
    try:
        cfg = orjson.loads((Path(model_path) / "config.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    n = cfg.get("max_position_embeddings")
    return int(n) if isinstance(n, int) else None


def _prediction_held(expected: str | None, gain: float | None) -> bool | None:
    """Whether the probe's prediction for a stage matched its measured gain (5 % threshold)."""
    if gain is None or expected not in ("likely", "unlikely"):
        return None
    return (gain > 1.05) == (expected == "likely")


def tune(opts: TuneOptions, progress: Progress | None = None) -> Report:
    """Run a whole tuning; see the module docstring. Returns the report (also on disk)."""
    runner = Runner(opts, progress) if progress else Runner(opts)
    return runner.run()
