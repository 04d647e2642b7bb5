"""What a tuning run is asked to do: ``TuneOptions``, with every check on its values.

The CLI parses strings (durations, percentages) and builds one; the Python API takes one. Either
way the checks here run before anything starts, so ``api.tune`` refuses what the CLI refuses,
with the same one-line message (``problem`` turns pydantic's error into it). The CLI shows and
uses the defaults here (``default``, and the constants below for those the API is given), and
checks no value itself: it turns the ValueError or ValidationError of a check here into its one
line and exit code 2.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from probes.derive import derive
from probes.slo import SLOSet
from probes.workload import FileWorkload, TraceWorkload, Workload, WorkloadError, trace_scale
from tuner.report.formats import FORMATS
from tuner.scoring.capacity import RATE_STEP
from tuner.scoring.compare import TIE_BAND
from tuner.spaces.space import STAGE_ORDER

SALT = re.compile(r"[0-9A-Za-z_-]{1,32}")
STAGE_NAME = re.compile(r"[a-z][a-z0-9_-]*")
URL = re.compile(r"^https?://[^/\s]+")
PASSWORD_IN_URL = re.compile(r"(\b[A-Za-z][\w+.-]*://[^/:@\s]*):[^@/\s]*@")
STORAGE_URL = re.compile(r"^(postgresql|mysql|sqlite)(\+\w+)?://")
STUDY_NAME = re.compile(r"[0-9A-Za-z_-]{1,64}")

# Defaults the command line shows and uses beside TuneOptions' own (``default``): the Python API
# is given an SLOSet and a Workload, and has no neighbour unless told where the command line's
# is decided by the machine; and the other commands'.
DEFAULT_SLO = "ttft=2s"
DEFAULT_WORKLOAD = "synthetic:input=128,output=64"
NEIGHBOUR_AUTO = "auto"  # --neighbour-cpu: decided by the machine (``auto_neighbour``)
RESULTS = Path("results")  # where every command writes its folders
LOAD_MODELS = ("rate", "concurrency")
REPORT_FORMATS = tuple(FORMATS)  # ``autotune report --format``'s default: every format
# ``autotune probe``: measured requests, and warm-up requests discarded before them.
PROBE_REQUESTS = 200
PROBE_WARMUP = 8


# --neighbour-cpu auto: where autotune starts the server on a machine of at most
# SMALL_MACHINE_CORES cores, whatever later checks a claim (vLLM's own benchmark client, say)
# shares those cores with it and slows it; measured on 2-core machines, vLLM's client costs the
# server about what a process burning 8 % of one core does, and a claim tuned without one broke
# there (docs/results.md, "A neighbour measured against vLLM's client").
AUTO_NEIGHBOUR_PCT = 8.0
# --objective robust: the other workloads a run can number (tuner/run/objective.py ``number``)
MAX_ROBUST_WORKLOADS = 99
SMALL_MACHINE_CORES = 2


def auto_neighbour(
    launches: bool, cores: int, measured: str = "every point is"
) -> tuple[float, str | None]:
    """The CPU neighbour ``--neighbour-cpu auto`` decides, and the line that says why (None:
    none); ``measured`` names what is measured beside it ("every point is", "the probe is")."""
    if not launches or cores > SMALL_MACHINE_CORES:
        return 0.0, None
    return AUTO_NEIGHBOUR_PCT, (
        f"neighbour: {measured} measured beside a process burning {AUTO_NEIGHBOUR_PCT:g} % of "
        f"one core (a {cores}-core machine: about what vLLM's own benchmark client costs the "
        "server, so the claim holds when checked with it; --neighbour-cpu 0 turns it off)"
    )


class TuneOptions(BaseModel):
    """Everything a tuning run needs; the CLI and the Python API both build one."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    model: str
    engine: str = "vllm"
    slos: SLOSet
    workload: Workload
    trials: int = Field(8, ge=0)
    time_budget_s: float | None = Field(None, gt=0)
    output_dir: Path = RESULTS
    seed: int = 0
    max_error_rate: float = 0.01
    startup_timeout_s: float = Field(300.0, gt=0)
    request_timeout_s: float = Field(180.0, gt=0)
    # The load model: open-loop Poisson arrivals at a request rate (what a service sees; the
    # default) or a closed loop of N concurrent clients.
    load_model: Literal["rate", "concurrency"] = "rate"
    start_concurrency: int = Field(8, ge=1)
    max_concurrency: int = Field(512, ge=1)
    start_rate_rps: float | None = Field(None, gt=0)  # default: what the probe's point sustained
    max_rate_rps: float = Field(1000.0, gt=0)
    search_point_s: float = Field(15.0, gt=0)  # a rate point's arrivals span at least this long
    rate_step: float = Field(RATE_STEP, gt=1)  # the rate search's largest step up (capacity.py)
    salt: str | None = None  # the workload's random salt (default: fresh per run)
    side_by_side: bool = True  # repeat two configurations too close to call, interleaved
    confirm_baseline: bool = True  # confirm the baseline too, so the gain is confirmed/confirmed
    tie_band: float = Field(TIE_BAND, ge=0, le=1)  # estimates closer than this: too close to call
    search_min_requests: int = Field(40, ge=1)
    search_requests_per_slot: float = Field(3.0, gt=0)
    confirm_requests: int | None = Field(None, ge=1)  # default: what the percentile needs, +10 %
    space_file: Path | None = None
    stages: list[str] | None = None  # force this subset of stages (None: the probe's plan)
    probe: bool = True  # diagnose on the baseline server first
    # The serving model (tuner/search/guide.py) chooses what a stage with simulated knobs measures;
    # off: Optuna's sampler over the space's candidates, as before the model existed.
    serving_model: bool = True
    # The recommendation is confirmed with every latency SLO at most (1 - headroom) x its limit,
    # so that another client, a longer run or a noisy neighbour still sees the SLO hold.
    headroom: float = 0.10  # in [0, 1): ``_fraction``
    # Open loop only: no confirmation try above (1 - load_margin) x the fitted capacity. Open-loop
    # latency rises so steeply near saturation that the latency headroom is ~1 % of load there
    # (tuner/scoring/confirm.py). On this project's 2-core machines, beside a 16 % CPU neighbour,
    # vLLM's own client held the claims made with 15 % in 4 of 4 checks (500 requests each,
    # tightness 0.89), those made with 10 % in 9 of 10 (tightness 0.84-0.99): fresh starts of one
    # configuration differ by up to a third in time per token, and the claim must hold on each.
    # The checks' 500 requests are short, too: a load vLLM's client held with 460 prompts broke
    # with 1,000 (docs/results.md, "A slow hour on the AMD EPYC"), so a check passed near that
    # capacity says less than it seems. Against vLLM's client with 1,200-prompt points the
    # fitted capacity lay inside its bracket (docs/results.md, "The tuner's fit against vLLM's
    # client with longer points"): the claim's tightness is then 1 - load_margin. Beside an 8 %
    # neighbour (as heavy as vLLM's client) a 10 % claim broke 1 of 3 checks: the fit moved
    # against vLLM's 1,200-prompt capacity from <= 0.98 to >= 1.08 between two runs an hour
    # apart (docs/results.md, "A neighbour measured against vLLM's client").
    load_margin: float = 0.15  # in [0, 1): ``_fraction``
    # A CPU neighbour during every warm-up and load point (probes/neighbour.py): the share of one
    # core another process on this machine takes, such as a benchmark client (vLLM's costs the
    # server about what an 8 % ballast does). None: decided by the machine (``auto_neighbour``).
    neighbour_cpu_pct: float | None = Field(0.0, ge=0, le=100)
    draft_model: str | None = None  # a draft model for speculative decoding (path or hub id)
    eagle_model: str | None = None  # an EAGLE head for speculative decoding
    quantized_model: str | None = None  # a pre-quantised checkpoint of the same model
    accept_divergence: bool = False  # allow a speculative config whose greedy outputs changed
    endpoint: str | None = None  # --engine endpoint: the running server's root URL
    served_model: str | None = None  # the model name it serves (default: the first it lists)
    tokenizer: str | None = None  # for synthetic prompts (default: the model / served name)
    # Several workers on one study (tuner/storage/shared.py): an SQLAlchemy URL and the study's
    # name. The URL may hold a password: it is never written out (excluded from every dump).
    storage: str | None = Field(None, exclude=True)
    study: str | None = None
    shared_heartbeat_s: int = Field(10, ge=1)  # a running trial's heartbeat, in a shared study
    shared_grace_s: int = Field(40, ge=2)  # silent this long: failed, and queued again
    # --check-workload: after the confirmation, the recommendation and the baseline measured on
    # each of these held-out workloads (tuner/run/held_out.py); "derived": one derived from the
    # tuned workload with another length shape (probes/derive.py).
    check_workloads: list[Workload | Literal["derived"]] = []
    # What ranks configurations: "tuned", their score on the tuned workload; "robust", their
    # worst gain over the baseline on it and on each --check-workload workload, each measured
    # on the configuration's own server after its tuned search (tuner/run/objective.py).
    objective: Literal["tuned", "robust"] = "tuned"
    command: list[str] = []

    @field_validator("command")
    @classmethod
    def _command(cls, v: list[str]) -> list[str]:
        """The command line as the report keeps it: no password of a storage URL."""
        return [redact(a) for a in v]

    @field_validator("salt")
    @classmethod
    def _salt(cls, v: str | None) -> str | None:
        if v is not None and not SALT.fullmatch(v):
            raise ValueError(
                f"--salt {v!r}: use 1-32 letters, digits, '-' or '_' (report.json has the run's)"
            )
        return v

    @field_validator("draft_model", "eagle_model", "quantized_model")
    @classmethod
    def _model_folder(cls, v: str | None, info: ValidationInfo) -> str | None:
        """A local folder must exist, and is made absolute (the engine runs elsewhere); a hub
        id is kept as it is."""
        if v is None or not looks_local(v):
            return v
        path = Path(v).expanduser()
        if not path.is_dir():
            flag = "--" + str(info.field_name).replace("_", "-")
            raise ValueError(f"{flag} {v} is not a folder (give a model folder or a hub id)")
        return str(path.resolve())

    @field_validator("max_error_rate")
    @classmethod
    def _error_rate(cls, v: float) -> float:
        check_error_rate(v)
        return v

    @field_validator("load_model", mode="before")
    @classmethod
    def _load(cls, v: object) -> object:
        return check_load(v)

    @field_validator("headroom", "load_margin")
    @classmethod
    def _fraction(cls, v: float, info: ValidationInfo) -> float:
        """A fraction the command line gives as a percentage, and so names it."""
        if not 0 <= v < 1:
            flag = "--" + str(info.field_name).replace("_", "-")
            raise ValueError(f"{flag} must be in [0%, 100%), got {v * 100:g}%")
        return v

    @field_validator("stages")
    @classmethod
    def _stages(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        # Names of the space's stages or their kinds; which exist is checked against the
        # space when the run loads it, before any engine starts.
        bad = [s for s in v if not STAGE_NAME.fullmatch(s)]
        if bad or not v:
            raise ValueError(
                f"--stages {','.join(v)!r}: not stage names {bad}; the kinds are "
                f"{', '.join(STAGE_ORDER)}"
            )
        return v

    @field_validator("space_file")
    @classmethod
    def _space_file(cls, v: Path | None) -> Path | None:
        if v is not None and not v.is_file():
            raise ValueError(f"--search-space {v} does not exist")
        return v.resolve() if v is not None else None  # a resumed run may start elsewhere

    @field_validator("slos")
    @classmethod
    def _slos(cls, v: SLOSet) -> SLOSet:
        if not v.latency:
            raise ValueError(
                "give at least one latency SLO (ttft, tpot, itl or e2e) to score configurations by"
            )
        return v

    @model_validator(mode="after")
    def _shared(self) -> TuneOptions:
        if (self.storage is None) != (self.study is None):
            raise ValueError("--storage and --study go together (the workers' shared study)")
        if self.storage is not None:
            if not STORAGE_URL.match(self.storage):
                raise ValueError(
                    "--storage must be a database URL such as "
                    "postgresql+psycopg://user:password@host/db (or sqlite:///file.db on one "
                    "machine)"
                )
            if self.study is not None and not STUDY_NAME.fullmatch(self.study):
                raise ValueError(f"--study {self.study!r}: use 1-64 letters, digits, '-' or '_'")
            if self.engine == "endpoint":
                raise ValueError(
                    "--storage shares a tuning of servers autotune starts, not of an endpoint"
                )
        return self

    @model_validator(mode="after")
    def _arrivals(self) -> TuneOptions:
        """A workload with its own arrival process (gamma gaps, a trace's times) needs the
        open loop, and a trace times to scale; so does each held-out workload."""
        for flag, wl in [("", self.workload), *(("--check-workload ", w) for w in self.held_out)]:
            _check_arrivals(wl, self.load_model, flag)
        return self

    @model_validator(mode="after")
    def _held_out(self) -> TuneOptions:
        if self.objective == "robust" and not self.check_workloads:
            raise ValueError(
                "--objective robust ranks each configuration by its worst gain over the tuned "
                "workload and each --check-workload: give at least one (--check-workload "
                "derived: one derived from the tuned workload with another length shape)"
            )
        if self.objective == "robust" and len(self.check_workloads) > MAX_ROBUST_WORKLOADS:
            raise ValueError(
                f"--objective robust ranks over at most {MAX_ROBUST_WORKLOADS} --check-workload "
                "workloads"
            )
        if self.objective == "robust" and self.storage is not None:
            raise ValueError(
                "--objective robust is for one worker: a shared study (--storage) ranks its "
                "workers' configurations on the tuned workload"
            )
        if self.check_workloads and self.engine == "endpoint":
            raise ValueError(
                "--check-workload compares the recommendation with the engine's defaults, "
                "which needs an engine autotune starts, not an endpoint"
            )
        return self

    @property
    def held_out(self) -> list[Workload]:
        """The --check-workload workloads, ``derived`` derived from the tuned one.

        Raises:
            ValueError: ``derived`` where the tuned workload has nothing to derive from.
        """
        return [self.derived()[0] if isinstance(w, str) else w for w in self.check_workloads]

    def derived(self) -> tuple[Workload, str]:
        """The workload ``derived`` stands for, and what was derived (probes/derive.py).

        Raises:
            ValueError: the tuned workload has nothing to derive from.
        """
        try:
            d = derive(self.workload)
        except WorkloadError as exc:
            raise ValueError(str(exc)) from None
        return d.workload, d.what

    @model_validator(mode="after")
    def _target(self) -> TuneOptions:
        if self.engine == "endpoint":
            if not self.endpoint:
                raise ValueError(
                    "--engine endpoint needs --endpoint URL (the running server's root URL)"
                )
            if not URL.match(self.endpoint):
                raise ValueError(
                    f"--endpoint {self.endpoint!r} is not an http(s) URL such as "
                    "http://127.0.0.1:8000"
                )
        elif self.endpoint:
            raise ValueError(
                "--endpoint is for --engine endpoint (a server autotune does not start)"
            )
        elif self.tokenizer:
            raise ValueError(
                "--tokenizer is for --engine endpoint: an engine autotune starts is given the "
                "model folder, and its prompts are built with that model's own tokenizer"
            )
        elif not self.model:
            raise ValueError("--model is required (try --model smollm2-135m)")
        return self


def default(field: str) -> Any:
    """TuneOptions' default for ``field``: what the command line shows and uses."""
    return TuneOptions.model_fields[field].default


def check_load(load: object) -> object:
    """Raises ValueError where ``load`` is not a load model (``--load``)."""
    if load not in LOAD_MODELS:
        raise ValueError(f"--load {load!r} is unknown; known: {', '.join(LOAD_MODELS)}")
    return load


def check_error_rate(rate: float) -> None:
    """Raises ValueError where ``rate`` is not an error-rate limit (``--max-error-rate``)."""
    if not 0 <= rate < 1:
        raise ValueError(f"--max-error-rate must be in [0, 1), got {rate:g}")


def check_engine(engine: str) -> None:
    """Raises ValueError (UnknownEngineError), naming the known engines, where ``engine`` is
    none of them. Not a validator: tests build options for engines they register later."""
    from tuner.engines import check_engine as known

    known(engine)


def _check_arrivals(wl: Workload, load_model: str, flag: str) -> None:
    """A workload with its own arrival process needs the open loop, and a trace times to scale.

    Raises:
        ValueError: naming the flag (``flag``: "" for --workload) and what to do.
    """
    own: str | None = None
    if isinstance(wl, TraceWorkload):
        own = "a trace's own times; pairs:FILE takes its lengths alone"
    elif not isinstance(wl, FileWorkload) and wl.arrivals is not None:
        own = wl.arrivals.spec
    if own and load_model == "concurrency":
        what = f"{flag}{wl.label}" if flag else "the workload"
        raise ValueError(
            f"--load concurrency sends each request when a client's last one ends, which "
            f"ignores {what}'s arrivals ({own}); use --load rate"
        )
    if isinstance(wl, TraceWorkload):
        try:
            trace_scale(wl, 1.0)
        except WorkloadError as exc:
            raise ValueError(f"{flag}{exc}" if flag else str(exc)) from None


def redact(text: str) -> str:
    """``text`` with the password of any URL in it replaced by ***."""
    return PASSWORD_IN_URL.sub(r"\1:***@", text)


def looks_local(value: str) -> bool:
    """Whether a model argument names a local path rather than a hub id."""
    return value.startswith(("/", ".", "~")) or Path(value).exists()


BOUNDS = {
    "greater_than_equal": ("ge", ">="),
    "greater_than": ("gt", ">"),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}


def problem(exc: ValidationError) -> str:
    """The first of a validation error's problems, as one line naming the flag, such as
    ``--trials must be >= 0, got -1``."""
    err = exc.errors()[0]
    msg = str(err.get("msg", exc))
    if msg.startswith("Value error, "):
        return msg[len("Value error, ") :]
    loc = [str(x) for x in err.get("loc", ()) if isinstance(x, str)]
    flag = "--" + loc[0].replace("_", "-").removesuffix("-s").removesuffix("-pct") if loc else ""
    flag = flag or "an option"
    bound = BOUNDS.get(str(err.get("type", "")))
    ctx = err.get("ctx") or {}
    if bound and bound[0] in ctx:
        return f"{flag} must be {bound[1]} {_num(ctx[bound[0]])}, got {_num(err.get('input'))}"
    return f"{flag}: {msg[0].lower() + msg[1:]}" if msg else f"{flag} is invalid"


def _num(x: object) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)
