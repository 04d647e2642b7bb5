"""What is tuned: an engine autotune launches, or an endpoint it attaches to.

Both implement ``Target``: ``prepare`` resolves the model, the search space and the tokenizer
(an endpoint has no space: nothing of the server is tuned); ``spec`` builds a configuration's
launch command (tuner/spaces/launch.py, the builder ``autotune probe`` uses too), ``relaunch`` the
one
a measured trial was started with; ``server`` yields a ready server and stops it by its process
group on exit (an endpoint is checked again instead).

Every workload but a file of written prompts is built to token counts, so ``prepare`` loads the
tokenizer for it and checks that its prompts can be built, before anything starts; what the run
should know of the workload's load axis (a trace's rate equivalent) or of the serving model's
limits with it comes back as notes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from probes.derive import heavy_prompts
from probes.workload import (
    FileWorkload,
    Tokenizer,
    TraceWorkload,
    Workload,
    check_buildable,
    needs_tokenizer,
)
from tuner.engines.base import (
    Engine,
    EngineStartError,
    LaunchSpec,
    RunningServer,
    ServerProcess,
    free_port,
)
from tuner.engines.endpoint import AttachedServer, EndpointError, attach
from tuner.engines.hardware import Hardware, template_context
from tuner.engines.models import ModelError, TokenizerLoader, load_tokenizer, resolve_model
from tuner.options import TuneOptions
from tuner.report.schema import TrialReport
from tuner.run import stop
from tuner.run.budget import PhaseTimes
from tuner.spaces.launch import launch_settings
from tuner.spaces.space import STAGE_ORDER, SearchSpace, SpaceError, load_space, space_path


@dataclass
class Prepared:
    """What a target resolved before anything is measured."""

    model_path: str
    space: SearchSpace
    ctx: dict[str, Any]
    tokenizer: Tokenizer | None
    base_url: str  # where the load client points first (a launched engine's is per start)
    notes: list[str] = field(default_factory=list)  # for the report


class Target(Protocol):
    launches: bool

    @property
    def ignore_eos(self) -> bool: ...

    def prepare(self, say: Callable[[str], None]) -> Prepared: ...

    def spec(self, params: dict[str, Any], baseline: bool) -> LaunchSpec | None: ...

    def relaunch(self, trial: TrialReport) -> LaunchSpec | None: ...

    def server(
        self, spec: LaunchSpec | None, log_path: Path
    ) -> contextlib.AbstractContextManager[RunningServer]: ...


def workload_notes(workload: Workload, load_model: str, serving_model: bool) -> list[str]:
    """What the report should say of how the workload is measured (a trace's load axis) and
    of what the serving model does not simulate of it (its arrivals)."""
    notes = []
    if isinstance(workload, TraceWorkload) and load_model == "rate" and workload.rate_rps:
        notes.append(
            f"trace {workload.path}: the load is its rate equivalent: R requests/s replays the "
            f"trace at time scale R / {workload.rate_rps:.4g} (its own mean rate, requests/s), "
            "so its capacity as a time scale is the capacity in requests/s divided by that"
        )
    own_arrivals = isinstance(workload, TraceWorkload) or (
        not isinstance(workload, FileWorkload) and workload.arrivals is not None
    )
    if serving_model and own_arrivals:
        # shared prefixes it simulates: each measured request's shared tokens, cached
        notes.append(
            "the serving model simulates Poisson arrivals, unlike this workload: its "
            "predictions only aim the search; the scores and the recommendation are measured"
        )
    return notes


def max_positions(model_path: str) -> int | None:
    """The model's context length from its config.json (what vLLM takes as max_model_len)."""
    try:
        cfg = orjson.loads((Path(model_path) / "config.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    n = cfg.get("max_position_embeddings")
    return int(n) if isinstance(n, int) else None


def _heavy_prompts(opts: TuneOptions) -> bool:
    """The tuned workload's prompt lengths are heavy-tailed, or a --check-workload's are (one
    ``derived`` from a tuned workload it cannot derive from is none)."""
    try:
        checked = opts.held_out
    except ValueError:
        checked = []
    return any(heavy_prompts(w) for w in [opts.workload, *checked])


def _heavy_only(space: SearchSpace) -> list[str]:
    """The knobs with options that exist only for heavy-tailed prompts."""
    return [
        k.name
        for k in space.knobs().values()
        if any("heavy_prompts" in o.requires for o in (k.options or {}).values())
    ]


class LaunchedTarget:
    """An engine autotune starts, once per configuration."""

    launches = True

    def __init__(
        self,
        opts: TuneOptions,
        engine: Engine,
        hw: Hardware,
        clock: PhaseTimes,
        run_id: str,
        tokenizer_loader: TokenizerLoader | None = None,
    ) -> None:
        self.opts, self.engine, self.hw, self.clock = opts, engine, hw, clock
        self.run_id = run_id
        self.tokenizer_loader = tokenizer_loader
        self.model_path = ""
        self.space: SearchSpace | None = None
        self.ctx: dict[str, Any] = {}

    @property
    def ignore_eos(self) -> bool:
        return self.engine.supports_ignore_eos

    def prepare(self, say: Callable[[str], None]) -> Prepared:
        opts = self.opts
        model = resolve_model(opts.model)
        self.model_path = model.path
        path = opts.space_file or space_path(self.engine.name, self.hw.device)
        self.ctx = {
            **template_context(self.hw),
            "draft_model": opts.draft_model or "",
            "eagle_model": opts.eagle_model or "",
            "quantized_model": opts.quantized_model or "",
        }
        if (n := max_positions(model.path)) is not None:
            self.ctx["max_model_len"] = n
        # Knob options that pay off only with heavy-tailed prompts (a long-prefill cap) exist
        # where the tuned workload, or one it is checked on, has them.
        self.ctx["heavy_prompts"] = "yes" if _heavy_prompts(opts) else ""
        space = load_space(path)
        if (space.engine, space.device) != (self.engine.name, self.hw.device):
            raise SpaceError(
                f"search space {path} is for {space.engine} on {space.device}; this run tunes "
                f"{self.engine.name} on {self.hw.device}"
            )
        self.space = space = space.for_machine(len(self.hw.gpus), self.ctx)
        gated = _heavy_only(space) if self.ctx["heavy_prompts"] else []
        if gated:
            say(f"heavy-tailed prompts: {', '.join(gated)} join(s) the search")
        if opts.stages is not None:
            known = {s.name for s in space.stages} | set(STAGE_ORDER)
            if bad := [s for s in opts.stages if s not in known]:
                raise SpaceError(
                    f"--stages {','.join(opts.stages)!r}: unknown stage(s) {bad}; this "
                    f"search space has {', '.join(s.name for s in space.stages)} (or give "
                    f"a kind: {', '.join(STAGE_ORDER)})"
                )
        # The held-out workloads (--check-workload) are built with the same tokenizer, and
        # checked here too: a bad one fails before anything starts.
        built = [opts.workload, *opts.held_out]
        tokenizer = (
            load_tokenizer(model.path, self.tokenizer_loader)
            if any(needs_tokenizer(w) for w in built)
            else None
        )
        for wl in built:
            check_buildable(wl, tokenizer)
        say(
            f"model {model.name} ({model.path}); engine {self.engine.version()}; "
            f"{self.hw.label}; search space {path.name}"
        )
        notes = workload_notes(opts.workload, opts.load_model, opts.serving_model)
        for note in notes:
            say(note)
        return Prepared(model.path, space, self.ctx, tokenizer, "http://127.0.0.1:1", notes)

    def spec(self, params: dict[str, Any], baseline: bool) -> LaunchSpec:
        assert self.space is not None
        args, env = launch_settings(self.space, {} if baseline else params, self.ctx)
        return self.engine.launch_spec(self.model_path, args, env, free_port())

    def relaunch(self, trial: TrialReport) -> LaunchSpec:
        """A measured trial's own launch command and environment, on a fresh port."""
        return LaunchSpec(trial.launch_command, trial.env).with_port(free_port())

    @contextlib.contextmanager
    def server(self, spec: LaunchSpec | None, log_path: Path) -> Iterator[RunningServer]:
        """A started, ready engine (stopped by its process group on exit); start-up is timed.

        Raises:
            EngineStartError: it did not become ready.
        """
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


class AttachedTarget:
    """A running server autotune attaches to: only the client-side load is searched."""

    launches = False

    def __init__(
        self, opts: TuneOptions, hw: Hardware, tokenizer_loader: TokenizerLoader | None = None
    ) -> None:
        self.opts, self.hw = opts, hw
        self.tokenizer_loader = tokenizer_loader
        self.attached: AttachedServer | None = None

    @property
    def ignore_eos(self) -> bool:
        return self.attached.ignore_eos if self.attached else False

    def prepare(self, say: Callable[[str], None]) -> Prepared:
        opts = self.opts
        if not opts.endpoint:
            raise EndpointError("--engine endpoint needs --endpoint URL")
        say(f"attaching to {opts.endpoint} (nothing is launched)")
        self.attached = a = attach(opts.endpoint, opts.served_model)
        tokenizer = None
        if needs_tokenizer(opts.workload):
            # The model folder the server reports (vLLM's /v1/models ``root``), if it is here.
            source = opts.tokenizer or opts.model or a.local_root or a.served_model
            try:
                tokenizer = load_tokenizer(source, self.tokenizer_loader)
            except ModelError as exc:
                raise EndpointError(f"{exc}; give --tokenizer FOLDER_OR_ID") from None
            check_buildable(opts.workload, tokenizer)
        eos = "accepted" if a.ignore_eos else "refused: output lengths are what the server gives"
        say(f"endpoint {a.base_url} serves {a.served_model}; ignore_eos {eos}; {self.hw.label}")
        notes = workload_notes(opts.workload, opts.load_model, serving_model=False)
        for note in notes:
            say(note)
        return Prepared(
            model_path=a.served_model,
            space=SearchSpace(engine="endpoint", device=self.hw.device, stages=[]),
            ctx=template_context(self.hw),
            tokenizer=tokenizer,
            base_url=a.base_url,
            notes=[
                "endpoint mode: the server's settings were not tuned (autotune did not start "
                "it); only the client-side load was searched, and the recommendation is a load",
                *notes,
            ],
        )

    def spec(self, params: dict[str, Any], baseline: bool) -> None:
        return None

    def relaunch(self, trial: TrialReport) -> None:
        return None

    @contextlib.contextmanager
    def server(self, spec: LaunchSpec | None, log_path: Path) -> Iterator[RunningServer]:
        """The attached server, checked again.

        Raises:
            EngineStartError: the endpoint stopped answering.
        """
        assert self.attached is not None
        try:
            yield attach(self.attached.base_url, self.attached.served_model)
        except EndpointError as exc:
            raise EngineStartError("the endpoint stopped answering", str(exc)) from None


def make_target(
    opts: TuneOptions,
    engine: Engine,
    hw: Hardware,
    clock: PhaseTimes,
    run_id: str,
    tokenizer_loader: TokenizerLoader | None = None,
) -> Target:
    """The engine's target: attached where the engine does not launch (``--engine endpoint``)."""
    if engine.launches:
        return LaunchedTarget(opts, engine, hw, clock, run_id, tokenizer_loader)
    return AttachedTarget(opts, hw, tokenizer_loader)
