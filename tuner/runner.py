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
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from probes.client import LoadClient, run_load
from probes.diagnose import Diagnosis, run_diagnosis
from probes.exactness import EXACT_TOKENS, Exactness, compare, describe, exact_prompts
from probes.metrics import LoadMetrics, Verdict, judge, summarize
from probes.quality import (
    Continuation,
    Quality,
    QualityCheck,
    QualityError,
    check,
    eval_texts,
    greedy_agreement,
    greedy_continuations,
    perplexity,
)
from probes.server_metrics import PeakSampler, delta, fetch_snapshot
from probes.slo import SLOSet
from probes.workload import SyntheticWorkload, Tokenizer, Workload, prepare_requests
from tuner.capacity import CapacityResult, PointOutcome, find_capacity
from tuner.engines import get_engine
from tuner.engines.base import (
    Engine,
    EngineStartError,
    LaunchSpec,
    RunningServer,
    ServerProcess,
    free_port,
)
from tuner.engines.endpoint import AttachedServer, EndpointError, attach
from tuner.hardware import Hardware, detect_hardware, template_context
from tuner.models import resolve_model
from tuner.report import (
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
from tuner.space import STAGE_ORDER, SearchSpace, Stage, found_in_log, load_space, space_path

Progress = Callable[[str], None]
RunStatus = Literal["complete", "interrupted", "failed"]
SERVER_GAUGES = ("vllm:kv_cache_usage_perc", "vllm:num_requests_running")
SERVER_COUNTERS = (
    "vllm:request_prefill_time_seconds_sum",
    "vllm:request_prefill_time_seconds_count",
    "vllm:request_decode_time_seconds_sum",
    "vllm:request_decode_time_seconds_count",
    "vllm:request_queue_time_seconds_sum",
    "vllm:num_preemptions_total",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)
DEFAULT_QUALITY_PCT = 1.0  # perplexity may rise by at most 1 % unless --slo quality=X% says
QUALITY_BUDGET_S = 90.0  # a configuration slower than this to score the evaluation set is out
GREEDY_BUDGET_S = 60.0
AGREEMENT_TEXTS = 8  # texts for greedy-token agreement, where an engine has no log-probabilities


class TuneOptions(BaseModel):
    """Everything a tuning run needs; the CLI and the Python API both build one."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    model: str
    engine: str = "vllm"
    slos: SLOSet
    workload: Workload
    trials: int = 8
    time_budget_s: float | None = None
    output_dir: Path = Path("results")
    seed: int = 0
    max_error_rate: float = 0.01
    startup_timeout_s: float = 300.0
    request_timeout_s: float = 180.0
    start_concurrency: int = 8
    max_concurrency: int = 512
    search_min_requests: int = 40
    search_requests_per_slot: float = 3.0
    confirm_requests: int | None = None  # default: what the SLO percentile needs, plus 10 %
    space_file: Path | None = None
    stages: list[str] | None = None  # force this subset of stages (None: the probe's plan)
    probe: bool = True  # diagnose on the baseline server first
    # The recommendation is confirmed with every latency SLO at most (1 - headroom) x its limit,
    # so that another client, a longer run or a noisy neighbour still sees the SLO hold.
    headroom: float = 0.10
    draft_model: str | None = None  # a draft model for speculative decoding (path or hub id)
    eagle_model: str | None = None  # an EAGLE head for speculative decoding
    quantized_model: str | None = None  # a pre-quantised checkpoint of the same model
    accept_divergence: bool = False  # allow a speculative config whose greedy outputs changed
    endpoint: str | None = None  # --engine endpoint: the running server's root URL
    served_model: str | None = None  # the model name it serves (default: the first it lists)
    tokenizer: str | None = None  # for synthetic prompts (default: the model / served name)
    command: list[str] = []


class RunInterrupted(KeyboardInterrupt):
    pass


@dataclass
class Clock:
    """Wall-time accounting of a run, by phase."""

    t0: float = field(default_factory=time.monotonic)
    startup_s: float = 0.0
    warmup_s: float = 0.0
    measure_s: float = 0.0
    engine_starts: int = 0

    def elapsed(self) -> float:
        return time.monotonic() - self.t0


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
    ) -> None:
        self.opts = opts
        self._progress = progress
        self.engine = engine or get_engine(opts.engine)
        self.hw = hardware or detect_hardware()
        self.clock = Clock()
        self.rng = random.Random(opts.seed)
        self.run_id = (
            datetime.now().strftime("%Y%m%d-%H%M%S")
            + f"-{_slug(opts.model or opts.served_model or 'served')}-{self.engine.name}-"
            + secrets.token_hex(2)
        )
        self.out = opts.output_dir / self.run_id
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
        self.quality_ref: Quality | list[Continuation] | None = None  # the baseline's quality
        self.quality_ref_error: str | None = None
        self.greedy: dict[int, list[Continuation]] = {}  # trial number -> greedy outputs
        self.reference: int | None = None  # the trial speculative configs are compared with
        self.stage_deadline = math.inf
        slo_q = opts.slos.quality
        self.quality_limit = slo_q.max_degradation_pct if slo_q else DEFAULT_QUALITY_PCT
        self.deadline = (
            self.clock.t0 + opts.time_budget_s if opts.time_budget_s is not None else math.inf
        )

    # ----------------------------------------------------------------- helpers
    def say(self, msg: str) -> None:
        e = int(self.clock.elapsed())
        self._progress(f"[{e // 60:02d}:{e % 60:02d}] {msg}")

    def _fresh_seed(self) -> int:
        # A different seed (so a different salt) per load point: no prefix-cache reuse.
        return self.rng.getrandbits(31)

    def _n_search(self, c: int) -> int:
        return max(self.opts.search_min_requests, math.ceil(self.opts.search_requests_per_slot * c))

    def _n_confirm_fit(self, c: int, rps: float, left_s: float | None = None) -> int:
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
        return max(2 * c, 20, min(n, math.floor(max(rps, 1e-3) * cap_s)))

    def _n_confirm(self, c: int) -> int:
        need = self.opts.confirm_requests or math.ceil(self.opts.slos.requests_needed * 1.1)
        return max(need, 2 * c)

    # ----------------------------------------------------------------- run
    def run(self) -> Report:
        self.out.mkdir(parents=True, exist_ok=True)
        status: RunStatus = "complete"
        error: str | None = None
        try:
            self._prepare()
            self._search()
            self._confirm()
        except KeyboardInterrupt:
            status = "interrupted"
            self.say(f"interrupted; what was measured is kept in {self.out}")
        except Exception as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            self.say(f"run failed: {error}")
            self._write_report(status, error)
            raise
        return self._write_report(status, error)

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
        if isinstance(self.opts.workload, SyntheticWorkload):
            self.tokenizer: Tokenizer | None = self._load_tokenizer(model.path)
        else:
            self.tokenizer = None
        self.client = LoadClient("http://127.0.0.1:1", timeout_s=self.opts.request_timeout_s)
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
        common = self.space.common
        base_args, base_env = list(self.space.baseline.args), dict(self.space.baseline.env)
        if baseline:
            args, env = base_args, base_env
        else:
            # A trial starts from the baseline's settings; its knobs override them.
            emit = self.space.render(params, self.ctx)
            args = [*_without_flags(base_args, emit.args), *emit.args]
            env = {**base_env, **emit.env}
        args = [*common.args, *args]
        env = {**common.env, **env}
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

    def _abandon_rule(self, best: TrialReport | None) -> Callable[[PointOutcome], str | None]:
        """Clearly beaten at the best configuration's own load: stop the capacity search.

        Throughput grows with load, so a configuration that breaks the SLOs at the best one's
        capacity with fewer tokens/s cannot beat it at any lower load; one that holds there but
        delivers under half the best score is not worth the remaining points.
        """

        def rule(p: PointOutcome) -> str | None:
            if best is None or not best.load or not best.score_tokens_per_s:
                return None
            if p.concurrency != int(best.load["concurrency"]):
                return None
            s = best.score_tokens_per_s
            if not p.holds and p.output_tokens_per_s < s:
                return (
                    f"breaks the SLOs at the best load (c={p.concurrency}) with "
                    f"{p.output_tokens_per_s:.0f} < {s:.0f} tokens/s: cannot beat the best"
                )
            if p.holds and p.output_tokens_per_s < 0.5 * s:
                return (
                    f"{p.output_tokens_per_s:.0f} tokens/s at the best load "
                    f"(c={p.concurrency}), under half the best {s:.0f}"
                )
            return None

        return rule

    def evaluate(self, number: int, stage: str, params: dict[str, Any]) -> TrialReport:
        """Start one configuration, find its capacity, stop it. Never raises for engine trouble."""
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
        except EngineStartError as exc:
            trial.status, trial.error = "failed", str(exc)
            self.say(f"{label}: failed to start: {exc}")
        trial.wall_s = time.monotonic() - t_start
        write_atomic(tdir / "trial.json", dump_json(trial))
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
        start_c = (
            int(best.load["concurrency"]) if best and best.load else self.opts.start_concurrency
        )
        if not baseline and self.space and self.space.changed("quantisation", trial.params):
            # Before the warm-up, so that a configuration too slow to time still gets its
            # quality figure (bounded by QUALITY_BUDGET_S).
            try:
                trial.quality = self._quality(server)
            except QualityError as exc:
                trial.status, trial.error = "failed", f"quality could not be measured: {exc}"
                self.say(f"{label}: {trial.error}")
                return
            q = trial.quality
            self.say(
                f"{label}: quality {q.metric} {q.value:.4g} against {q.baseline_value:.4g} "
                f"({q.degradation_pct:+.2f} %, limit {self.quality_limit:g} %)"
            )
        trial.warmup_s = self._warmup(server, start_c)
        if baseline:
            if self.opts.probe:
                self._diagnose(server)
            if self._wants("quantisation"):
                self._baseline_quality(server)
        elif best is not None and best.warmup_s and trial.warmup_s > 3 * best.warmup_s + 20:
            trial.status, trial.error = (
                "abandoned",
                f"warm-up took {trial.warmup_s:.0f} s against {best.warmup_s:.0f} s for the best "
                "configuration at the same load: far slower",
            )
            self.say(f"{label}: abandoned: {trial.error}")
            return
        cap = find_capacity(
            lambda c: self._point(server, trial, tdir, c, self._n_search(c), label),
            start=start_c,
            max_concurrency=self.opts.max_concurrency,
            abandon=None if baseline else self._abandon_rule(best),
            max_points=7 if self.launches else max(1, self.opts.trials),
            should_stop=self._points_time_left,
        )
        self._score(trial, cap)
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

    def _wants(self, stage: str) -> bool:
        """Whether the space has this stage and --stages does not leave it out."""
        in_space = self.space is not None and self.space.stage(stage) is not None
        return in_space and (self.opts.stages is None or stage in self.opts.stages)

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
        """The reference for the quality gate: perplexity where the engine gives prompt
        log-probabilities, else greedy continuations (for greedy-token agreement)."""
        model = server.served_model or self.model_path
        try:
            self.quality_ref = perplexity(server.base_url, model, budget_s=QUALITY_BUDGET_S)
            self.say(f"quality reference: perplexity {self.quality_ref.value:.4g}")
        except QualityError as exc:
            try:
                self.quality_ref = greedy_continuations(
                    server.base_url, model, eval_texts(AGREEMENT_TEXTS), budget_s=QUALITY_BUDGET_S
                )
                self.notes.append(
                    f"perplexity unavailable ({exc}); quality is greedy-token agreement"
                )
            except QualityError as exc2:
                self.quality_ref_error = str(exc2)
                self.notes.append(f"the baseline's quality could not be measured: {exc2}")

    def _quality(self, server: RunningServer) -> QualityCheck:
        """This configuration's quality against the baseline's. Raises QualityError."""
        model = server.served_model or self.model_path
        ref = self.quality_ref
        if ref is None:
            raise QualityError(self.quality_ref_error or "no baseline quality to compare with")
        if isinstance(ref, Quality):
            q = perplexity(server.base_url, model, budget_s=QUALITY_BUDGET_S)
            return check(q, ref, self.quality_limit)
        got = greedy_continuations(
            server.base_url, model, eval_texts(AGREEMENT_TEXTS), budget_s=QUALITY_BUDGET_S
        )
        full = Quality(metric="greedy_agreement", value=1.0, n_tokens=1, n_texts=len(ref))
        return check(greedy_agreement(got, ref), full, self.quality_limit)

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
        speculative decoding."""
        if self.space is None or not self._wants("speculative"):
            return
        speculative = bool(self.space.changed("speculative", trial.params))
        new_best = not trial.rejected and (
            best is None or (trial.score_tokens_per_s or 0.0) > (best.score_tokens_per_s or 0.0)
        )
        if not speculative and not (new_best and trial.status == "ok"):
            return
        prompts = exact_prompts()
        try:
            outs = greedy_continuations(
                server.base_url,
                server.served_model or self.model_path,
                prompts,
                EXACT_TOKENS,
                budget_s=GREEDY_BUDGET_S,
            )
        except QualityError as exc:
            if speculative:
                trial.exactness = Exactness(checked=False, reason=f"greedy outputs: {exc}")
                trial.rejected = trial.rejected or f"exactness not checked: {exc}"
            return
        write_atomic(tdir / "greedy.json", orjson.dumps([o.model_dump() for o in outs]))
        if not speculative:
            self.greedy[trial.number] = outs
            return
        ref = self.greedy.get(self.reference) if self.reference is not None else None
        if ref is None:
            trial.exactness = Exactness(
                checked=False,
                reason="the configuration it started from has no greedy outputs to compare with",
            )
        else:
            trial.exactness = compare(outs, ref, prompts, self.reference)
        self.say(f"{label}: exactness: {describe(trial.exactness)}")
        if trial.exactness.identical:
            return
        if not trial.exactness.checked:
            trial.rejected = trial.rejected or f"exactness {describe(trial.exactness)}"
        elif not self.opts.accept_divergence:
            trial.rejected = trial.rejected or (
                f"speculative decoding changed the greedy outputs ({describe(trial.exactness)}); "
                "--accept-divergence allows it"
            )

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
                metrics_path=self.engine.metrics_path,
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

    def _score(self, trial: TrialReport, cap: CapacityResult) -> None:
        by_c = {int(p.load["concurrency"]): p for p in trial.points}
        if cap.abandoned:
            trial.status, trial.error = "abandoned", cap.abandoned
        elif cap.best is None:
            trial.status = "infeasible"
            low = min(by_c) if by_c else None
            trial.error = f"no load met the SLOs (lowest tried: concurrency {low})"
        else:
            trial.status = "ok"
        if cap.best is not None and trial.status == "ok":
            p = by_c[cap.best.concurrency]
            trial.score_tokens_per_s = p.metrics.output_tokens_per_s
            trial.load = dict(p.load)
            trial.metrics = p.metrics
            self.say(
                f"trial {trial.number}: capacity c={cap.best.concurrency}, "
                f"{trial.score_tokens_per_s:.0f} output tokens/s under the SLOs"
            )
        else:
            if trial.points:  # no score; its last point's figures (acceptance included) stay
                trial.metrics = trial.points[-1].metrics
            self.say(f"trial {trial.number}: {trial.status}: {trial.error}")

    def _warmup(self, server: RunningServer, c: int) -> float:
        """Requests sent and thrown away after start-up (compilation, cache allocation)."""
        t0 = time.monotonic()
        n = max(4, min(c, 32))
        reqs = self._requests(server, n)
        self.client.base_url = server.base_url
        run_load(self.client, reqs, concurrency=min(c, n), warmup=n)
        dt = time.monotonic() - t0
        self.clock.warmup_s += dt
        return dt

    def _requests(self, server: RunningServer, n: int) -> list:
        return prepare_requests(
            self.opts.workload,
            n,
            model=server.served_model or self.model_path,
            tokenizer=self.tokenizer,
            seed=self._fresh_seed(),
            ignore_eos=self.ignore_eos,
        )

    def _measure(
        self, server: RunningServer, c: int, n: int
    ) -> tuple[LoadMetrics, list, dict[str, float] | None]:
        reqs = self._requests(server, n)
        self.client.base_url = server.base_url
        mpath = self.engine.metrics_path
        before = self._snapshot(server) if mpath else None
        t0 = time.monotonic()
        if mpath:
            with PeakSampler(server.base_url, SERVER_GAUGES, mpath) as sampler:
                res = run_load(self.client, reqs, concurrency=c, seed=self._fresh_seed())
            peaks = sampler.peaks
        else:
            res = run_load(self.client, reqs, concurrency=c, seed=self._fresh_seed())
            peaks = {}
        self.clock.measure_s += time.monotonic() - t0
        metrics = summarize(res.records, self.opts.slos, res.client_cpu_pct)
        if "vllm:kv_cache_usage_perc" in peaks:
            metrics.kv_cache_peak_pct = 100.0 * peaks["vllm:kv_cache_usage_perc"]
        server_delta = None
        if before is not None:
            after = self._snapshot(server)
            if after:
                d = delta(before, after)
                server_delta = {k: d[k] for k in SERVER_COUNTERS if k in d}
                _acceptance(metrics, server_delta)
        return metrics, res.records, server_delta

    @staticmethod
    def _snapshot(server: RunningServer) -> dict[str, float] | None:
        try:
            return fetch_snapshot(server.base_url)
        except Exception:
            return None

    def _point(
        self, server: RunningServer, trial: TrialReport, tdir: Path, c: int, n: int, label: str
    ) -> PointOutcome:
        metrics, records, server_delta = self._measure(server, c, n)
        verdict = judge(metrics, self.opts.slos, self.opts.max_error_rate)
        rfile = tdir / f"c{c:04d}-{len(trial.points)}.jsonl"
        rfile.write_bytes(b"".join(orjson.dumps(r.to_json()) + b"\n" for r in records))
        trial.points.append(
            PointReport(
                load={"concurrency": c},
                metrics=metrics,
                verdict=verdict,
                records_file=str(rfile),
                server=server_delta,
            )
        )
        write_atomic(tdir / "trial.json", dump_json(trial))
        self.say(f"{label}: c={c:<4d} {_point_line(metrics, verdict)}")
        return PointOutcome(c, verdict.holds, verdict.worst_margin, metrics.output_tokens_per_s)

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
        c = int(best.load["concurrency"])
        point = self._n_search(c) / max(best.metrics.requests_per_s, 1e-3)
        return startup + warmup + point

    def _confirm_estimate_s(self) -> float:
        best = self._best()
        if best is None or best.metrics is None:
            return 0.0
        c = int(best.load["concurrency"]) if best.load else 1
        rps = max(best.metrics.requests_per_s, 1e-3)
        return (best.startup_s or 60.0) + 30.0 + self._n_confirm_fit(c, rps) / rps

    def _time_left_reason(self, started: list[int] | None = None) -> str | None:
        now = time.monotonic()
        left = self.deadline - now
        need = self._trial_min_s() + self._confirm_estimate_s()
        if left < need:
            return (
                f"time budget: {left:.0f} s left; a start, one load point and the confirmation "
                f"need about {need:.0f} s"
            )
        # A stage keeps its share of the budget for the stages after it (its first trial
        # always runs if the whole budget allows).
        if started and now + self._trial_estimate_s() > self.stage_deadline:
            return "this stage's share of the time budget is spent (later stages keep theirs)"
        return None

    def _set_stage_deadline(self, n_trials: int, later_trials: int) -> None:
        """This stage's share of the time left, in proportion to its planned trials."""
        if not math.isfinite(self.deadline):
            self.stage_deadline = math.inf
            return
        left = self.deadline - time.monotonic() - self._confirm_estimate_s()
        share = n_trials / max(1, n_trials + later_trials)
        self.stage_deadline = time.monotonic() + max(0.0, left) * share

    def _points_time_left(self) -> str | None:
        """Stop a capacity search early when the budget must keep time for the confirmation."""
        if time.monotonic() + self._confirm_estimate_s() > self.deadline:
            return "time budget: stopped measuring to keep time for the confirmation"
        return None

    def _plan(self) -> list[tuple[str, int | None, str, str | None]]:
        """Per stage in the prescribed order: (name, trials or None if skipped, reason, expected).

        The probe's verdict weighs the budget; a stage it does not expect to pay off still gets
        at least one confirmation trial, so the prediction is checked by measurement. Stages
        not in the search space, or left out by --stages, are skipped with their reason.
        """
        assert self.space is not None
        if not self.launches:
            why = "endpoint: the server's settings are not tuned (autotune did not start it)"
            return [(name, None, why, None) for name in STAGE_ORDER]
        present = {s.name for s in self.space.stages}
        verdict = {p.name: p for p in self.diagnosis.verdict.stages} if self.diagnosis else {}
        forced = set(self.opts.stages) if self.opts.stages is not None else None
        rows: list[tuple[str, float | None, str, str | None]] = []
        for name in STAGE_ORDER:
            v = verdict.get(name)
            expected = v.expected if v else None
            why = f"probe: {v.expected} to pay off: {v.reason}" if v else "no probe verdict"
            if forced is not None and name not in forced:
                rows.append((name, None, f"left out by --stages; {why}", expected))
            elif name not in present:
                rows.append(
                    (
                        name,
                        None,
                        f"the search space ({self.space.engine}, {self.space.device}) has no "
                        f"{name} knobs; {why}",
                        expected,
                    )
                )
            else:
                rows.append((name, v.weight if v else 1.0, why, expected))
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
            if name == "speculative":
                # Speculative configurations are checked against the one they start from.
                self.reference = before.number if before else None
            later = sum(p or 0 for _, p, _, _ in plan[i_stage + 1 :])
            self._set_stage_deadline(n_trials, later)
            known: list[tuple[dict[str, Any], Outcome]] = []
            stage_defaults = stage.defaults()
            if before is not None and None not in stage_defaults.values():
                # The configuration carried in is this stage's defaults: already measured.
                known.append((stage_defaults, self._outcome(before)))
            numbers: list[int] = []

            def evaluate(
                params: dict[str, Any], stage_name: str = name, numbers: list[int] = numbers
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
            best = result.best()
            if best is not None and (score_before is None or best[1].score > score_before):
                carried.update(best[0])
            best_trial = self._best()
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
                    prediction_held=_prediction_held(expected, gain),
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
            at_best = [p.verdict.worst_margin for p in t.points if p.load == t.load]
            return Outcome("ok", t.score_tokens_per_s or 0.0, min(at_best, default=0.0), t)
        if t.status == "infeasible":
            m = min((p.verdict.worst_margin for p in t.points), default=1.0)
            return Outcome("infeasible", 0.0, max(m, 1e-6), t)
        if t.status in ("abandoned", "no_effect"):
            return Outcome("pruned", 0.0, 1.0, t)
        return Outcome("failed", 0.0, 1.0, t)

    # ----------------------------------------------------------------- confirmation
    def _confirm_load(self, best: TrialReport) -> int:
        """The load to confirm at: the highest search point that held with the headroom.

        Search points carry few requests, so a p99 right at the limit there is likely to break
        with more requests (or another client); prefer the highest point that held with a
        worst margin of at most -headroom, else the highest that held.
        """
        held = [p for p in best.points if p.verdict.holds]
        roomy = [p for p in held if p.verdict.worst_margin <= -self.opts.headroom]
        pick = max(roomy or held, key=lambda p: p.load["concurrency"])
        return int(pick.load["concurrency"])

    def _confirm(self) -> None:
        best = self._best()
        if best is None or best.load is None:
            self.say("no configuration met the SLOs at any load: nothing to recommend")
            self.notes.append("no configuration met the SLOs; loosen the SLOs or the workload")
            return
        c = self._confirm_load(best)
        label = "confirmation"
        rps = best.metrics.requests_per_s if best.metrics else 1.0
        left = self.deadline - time.monotonic() - (best.startup_s or 0.0) - 30.0
        n_confirm = self._n_confirm_fit(c, rps, left if math.isfinite(left) else None)
        if n_confirm < self._n_confirm(c):
            self.notes.append(
                f"the time budget allowed {n_confirm} confirmation requests, fewer than the "
                f"{self._n_confirm(c)} the SLO percentile needs: the verdict is provisional"
            )
        self.say(
            f"confirming trial {best.number} from a fresh start at c={c} with {n_confirm} requests"
        )
        spec = (
            LaunchSpec(best.launch_command, best.env).with_port(free_port())
            if self.launches
            else None
        )
        cdir = self.out / "confirmation"
        cdir.mkdir(parents=True, exist_ok=True)
        try:
            with self._server(spec, cdir / "server.log") as server:
                self._warmup(server, c)
                tries: list[tuple[int, LoadMetrics, Verdict]] = []
                while True:
                    t_try = time.monotonic()
                    metrics, records, _ = self._measure(server, c, n_confirm)
                    verdict = judge(metrics, self.opts.slos, self.opts.max_error_rate)
                    (cdir / f"c{c:04d}.jsonl").write_bytes(
                        b"".join(orjson.dumps(r.to_json()) + b"\n" for r in records)
                    )
                    self.say(f"{label}: c={c:<4d} {_point_line(metrics, verdict)}")
                    tries.append((c, metrics, verdict))
                    roomy = verdict.holds and verdict.worst_margin <= -self.opts.headroom
                    if roomy or c == 1 or len(tries) >= 3:
                        break
                    if time.monotonic() + (time.monotonic() - t_try) > self.deadline:
                        if not verdict.holds:
                            self.notes.append(
                                f"confirmation broke the SLOs at c={c} and the time budget left "
                                "no room to step down: the recommendation does not meet the SLOs"
                            )
                        break
                    # The search's shorter points were optimistic: step down and measure again,
                    # by about as much as latency must fall to clear the limit with headroom.
                    over = max(verdict.worst_margin + self.opts.headroom, 0.1)
                    c = max(1, min(c - 1, math.floor(c / (1.0 + over))))
                held = [t for t in tries if t[2].holds]
                roomy_tries = [t for t in held if t[2].worst_margin <= -self.opts.headroom]
                c, metrics, verdict = (roomy_tries or held or tries)[-1]
                if held and not roomy_tries:
                    self.notes.append(
                        f"the recommendation holds the SLOs at c={c}, but with less than the "
                        f"{self.opts.headroom:.0%} headroom asked for"
                    )
        except EngineStartError as exc:
            self.notes.append(f"confirmation failed to start: {exc}")
            self.say(f"{label}: failed to start: {exc}")
            return
        base = self.baseline.score_tokens_per_s if self.baseline else None
        metrics.quality = best.quality
        self.recommended = Recommendation(
            params=best.params,
            env=spec.env if spec else {},
            launch_command=best.launch_command if spec else None,
            load={"concurrency": c},
            achieved_load={
                "concurrency": round(metrics.mean_in_flight, 2),
                "requests_per_s": round(metrics.requests_per_s, 3),
            },
            metrics=metrics,
            verdict=verdict,
            meets_slo=verdict.holds and not verdict.provisional,
            provisional=verdict.provisional,
            n_requests=metrics.n_requests,
            from_trial=best.number,
            search_score_tokens_per_s=best.score_tokens_per_s or 0.0,
            gain_vs_baseline=(metrics.output_tokens_per_s / base) if base else None,
            confirmation=(
                f"engine restarted from launch_command, warmed up, then {metrics.n_requests} "
                f"requests at concurrency {c}"
                if spec
                else f"the running endpoint (not restarted: autotune does not manage it), "
                f"warmed up, then {metrics.n_requests} requests at concurrency {c}"
            ),
        )

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


def _max_positions(model_path: str) -> int | None:
    """The model's context length from its config.json (what vLLM takes as max_model_len)."""
    try:
        cfg = orjson.loads((Path(model_path) / "config.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    n = cfg.get("max_position_embeddings")
    return int(n) if isinstance(n, int) else None


def _acceptance(metrics: LoadMetrics, d: dict[str, float]) -> None:
    """Speculative decoding's acceptance over one window (MEASUREMENT.md), where it ran."""
    drafts = d.get("vllm:spec_decode_num_drafts_total", 0.0)
    drafted = d.get("vllm:spec_decode_num_draft_tokens_total", 0.0)
    accepted = d.get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
    if drafted > 0:
        metrics.acceptance_rate = accepted / drafted
    if drafts > 0:
        metrics.mean_acceptance_length = 1.0 + accepted / drafts


def _without_flags(base: list[str], override: list[str]) -> list[str]:
    """``base`` launch arguments without the flags (and their values) that ``override`` sets."""
    taken = {a for a in override if a.startswith("--")}
    out: list[str] = []
    i = 0
    while i < len(base):
        a = base[i]
        has_value = i + 1 < len(base) and not base[i + 1].startswith("--")
        if a.startswith("--") and a in taken:
            i += 2 if has_value else 1
            continue
        out.append(a)
        i += 1
    return out


def _prediction_held(expected: str | None, gain: float | None) -> bool | None:
    """Whether the probe's prediction for a stage matched its measured gain (5 % threshold)."""
    if gain is None or expected not in ("likely", "unlikely"):
        return None
    return (gain > 1.05) == (expected == "likely")


def _point_line(m: LoadMetrics, v: Verdict) -> str:
    def ms(x: float | None) -> str:
        return "-" if x is None else (f"{x / 1000:.2f}s" if x >= 1000 else f"{x:.0f}ms")

    state = "holds" if v.holds else "breaks SLO"
    prov = " (provisional)" if v.provisional and v.holds else ""
    return (
        f"{m.output_tokens_per_s:7.1f} tok/s | TTFT p50 {ms(m.ttft_ms.p50)} p99 {ms(m.ttft_ms.p99)}"
        f" | TPOT p50 {ms(m.tpot_ms.p50)} p99 {ms(m.tpot_ms.p99)} | n={m.n_requests}"
        f" err={m.n_failed} | {state}{prov}"
    )


def tune(opts: TuneOptions, progress: Progress | None = None) -> Report:
    """Run a whole tuning; see the module docstring. Returns the report (also on disk)."""
    runner = Runner(opts, progress) if progress else Runner(opts)
    return runner.run()
