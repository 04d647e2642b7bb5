"""Search spaces: per-engine data files in search_spaces/, validated by pydantic on load.

A space names the stages in the prescribed order (batching, then quantisation, then speculative
decoding) and, per stage, its knobs: type, range or choices, the engine's own default, and how a
value becomes launch arguments or environment variables. Adding a knob needs no code.

How a knob value becomes launch arguments and environment: tuner/spaces/knob.py.

Conditional knobs: ``when: {speculative_method: [ngram]}`` makes a knob exist only when an
earlier knob of the same stage has one of the listed values (Optuna samples it only then).

An option may name ``no_effect_log``: a regular expression that, found in the server's log,
means the option was accepted but did nothing (vLLM 0.32's ``int8_per_channel_weight_only``
logs "Quantizing 0 layers" on a dense model); such a trial is recorded as ``no_effect``.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tuner.spaces.knob import Emit, Knob, Scalar

STAGE_ORDER = ("batching", "quantisation", "speculative")  # the stage kinds, in their order
StageKind = Literal["batching", "quantisation", "speculative"]


class SpaceError(ValueError):
    """An invalid search-space file; the message names the file and the problem."""


class Contrast(BaseModel):
    """A figure of its own for a stage: the best score with ``knob == on`` over the best
    without (the transformers engine: continuous over static batching)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    knob: str
    on: Scalar
    label: str


class Stage(BaseModel):
    """One search stage. ``kind`` says what the tuner does around it (the quality gate for
    quantisation, the exactness check for speculative decoding, the probe's verdict); it
    defaults to the name, so a stage named after its kind need not say it, and a second stage
    of a known kind is a change to the space file only."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    kind: StageKind | None = None
    help: str = ""
    contrast: Contrast | None = None
    knobs: list[Knob]
    candidates: list[dict[str, Scalar]] = []  # good starting points, enqueued before the sampler

    @model_validator(mode="after")
    def _kind(self) -> Stage:
        if self.kind is None:
            if self.name not in STAGE_ORDER:
                raise ValueError(
                    f"stage {self.name!r}: give its kind ({', '.join(STAGE_ORDER)}), or name it "
                    "after one"
                )
            self.kind = self.name  # type: ignore[assignment]
        return self

    @property
    def stage_kind(self) -> StageKind:
        assert self.kind is not None  # set by the validator
        return self.kind

    def active(self, params: dict[str, Any]) -> list[Knob]:
        """The knobs that exist given ``params`` (``when`` conditions), in order."""
        return [k for k in self.knobs if is_active(k, params)]

    def defaults(self) -> dict[str, Any]:
        """The engine's own values of this stage's knobs that exist under those values."""
        out: dict[str, Any] = {}
        for k in self.knobs:
            if is_active(k, out):
                out[k.name] = k.default
        return out


def is_active(knob: Knob, params: dict[str, Any]) -> bool:
    return all(params.get(name) in values for name, values in knob.when.items())


class Baseline(BaseModel):
    """Launch settings with their reason: what the baseline sets beyond the engine's own
    defaults (``baseline``), or what every launch sets, the baseline included (``common``)."""

    model_config = ConfigDict(extra="forbid")

    args: list[str] = []
    env: dict[str, str] = {}
    reason: str = ""


_RULE_RE = re.compile(r"^\s*(\w+)\s*(>=|<=|>|<|==|!=)\s*(\w+|\{\w+\}|-?\d+(?:\.\d+)?)\s*$")
_OPS = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


class Rule(BaseModel):
    """A combination the engine refuses at start-up, known in advance: ``require`` must hold
    (``knob OP knob``, ``knob OP number`` or ``knob OP {template}``, e.g. ``{max_model_len}``)
    whenever ``if`` matches. A sampled configuration that breaks a rule is never started."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    if_: dict[str, list[Scalar]] = Field(default={}, alias="if")
    require: str
    reason: str

    @model_validator(mode="after")
    def _check(self) -> Rule:
        if not _RULE_RE.match(self.require):
            raise ValueError(f"rule {self.require!r}: the form is 'knob OP knob|number|{{name}}'")
        return self

    def broken(self, params: dict[str, Any], ctx: dict[str, Any]) -> str | None:
        """The reason, where ``params`` (knob values, missing ones at their defaults) break it."""
        if not all(params.get(k) in v for k, v in self.if_.items()):
            return None
        m = _RULE_RE.match(self.require)
        assert m is not None
        left, op, right = m.groups()
        a = params.get(left)
        if right.startswith("{"):
            b = ctx.get(right[1:-1])
        elif re.fullmatch(r"-?\d+(\.\d+)?", right):
            b = float(right)
        else:
            b = params.get(right)
        if a is None or b is None:
            return None  # not decidable here: let the engine judge
        return (
            None if _OPS[op](a, b) else f"{self.reason} ({self.require}: {left}={a}, {right}={b})"
        )


class SearchSpace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: str
    device: Literal["cpu", "cuda"]
    description: str = ""
    baseline: Baseline = Field(default_factory=Baseline)
    common: Baseline = Field(default_factory=Baseline)
    stages: list[Stage]
    rules: list[Rule] = []
    # The engine's KV cache block (tokens) on this device, for the serving model's cache
    # (vLLM: 128 on the CPU backend, 16 on CUDA).
    kv_block_size: int = Field(default=16, ge=1)
    # Whether the engine caches shared prompt prefixes by default (vLLM v1: on), for the
    # serving model; a knob with ``sim: prefix_caching`` decides it per configuration.
    prefix_cache: bool = False

    def broken_rule(self, params: dict[str, Any], ctx: dict[str, Any]) -> str | None:
        """Why the engine would refuse ``params`` at start-up, or None (``rules``)."""
        full = {k.name: k.default for k in self.knobs().values()}
        full.update(params)
        for rule in self.rules:
            if why := rule.broken(full, ctx):
                return why
        return None

    @model_validator(mode="after")
    def _check(self) -> SearchSpace:
        names = [s.name for s in self.stages]
        kinds = [s.stage_kind for s in self.stages]
        if kinds != sorted(kinds, key=STAGE_ORDER.index) or len(set(names)) != len(names):
            raise ValueError(
                f"stages must be unique and in the order {', '.join(STAGE_ORDER)} (by kind; "
                f"got {', '.join(names)})"
            )
        seen: set[str] = set()
        for stage in self.stages:
            for knob in stage.knobs:
                if knob.name in seen:
                    raise ValueError(f"knob {knob.name} appears twice")
                seen.add(knob.name)
            if stage.contrast and stage.contrast.knob not in {k.name for k in stage.knobs}:
                raise ValueError(
                    f"stage {stage.name}: contrast knob {stage.contrast.knob!r} is not one of its"
                    " knobs"
                )
            earlier: set[str] = set()
            for knob in stage.knobs:
                if bad := set(knob.when) - earlier:
                    raise ValueError(
                        f"knob {knob.name}: 'when' names {sorted(bad)}, not an earlier knob of "
                        f"stage {stage.name}"
                    )
                earlier.add(knob.name)
            for i, cand in enumerate(stage.candidates):
                known = {k.name: k for k in stage.active(cand)}
                for key, value in cand.items():
                    if key not in known:
                        raise ValueError(
                            f"stage {stage.name} candidate {i}: knob {key!r} is unknown; known: "
                            + ", ".join(known)
                        )
                    known[key].validate_value(value)
        return self

    def stage(self, name: str) -> Stage | None:
        return next((s for s in self.stages if s.name == name), None)

    def knobs(self) -> dict[str, Knob]:
        return {k.name: k for s in self.stages for k in s.knobs}

    def for_machine(self, n_gpus: int, ctx: dict[str, Any] | None = None) -> SearchSpace:
        """A copy without what this machine or run cannot use: knobs that need more GPUs
        (``min_gpus``) and options that need a path the user did not give (``requires``), with
        the candidates that used them."""
        have = {k for k, v in (ctx or {}).items() if v not in (None, "")}
        stages = []
        for s in self.stages:
            knobs = []
            for k in s.knobs:
                if k.min_gpus > n_gpus:
                    continue
                if k.options is not None:
                    opts = {n: o for n, o in k.options.items() if set(o.requires) <= have}
                    if not opts:
                        continue
                    choices = [c for c in k.choices or [] if str(c) in opts]
                    k = k.model_copy(update={"options": opts, "choices": choices})
                knobs.append(k)
            stage = s.model_copy(update={"knobs": knobs})
            cands = [c for c in s.candidates if _fits(stage, c)]
            stages.append(stage.model_copy(update={"candidates": cands}))
        return self.model_copy(update={"stages": stages})

    def render(self, params: dict[str, Any], ctx: dict[str, Any]) -> Emit:
        """Launch arguments and environment for a full or partial set of knob values.

        Raises:
            SpaceError: a parameter that is not a knob of this space, or a bad value.
        """
        knobs = self.knobs()
        out = Emit()
        for name, value in params.items():
            if name not in knobs:
                raise SpaceError(f"parameter {name!r} is unknown; known: {', '.join(knobs)}")
            try:
                v = knobs[name].validate_value(value)
            except ValueError as exc:
                raise SpaceError(str(exc)) from None
            try:
                out.merge(knobs[name].render(v, ctx))
            except KeyError as exc:
                raise SpaceError(f"knob {name}: no value for the template {exc}") from None
        return out.finish()

    def no_effect_patterns(self, params: dict[str, Any]) -> list[tuple[str, str]]:
        """(knob=value, regex) for each chosen option that names a ``no_effect_log``."""
        out = []
        for name, value in params.items():
            knob = self.knobs().get(name)
            opt = (knob.options or {}).get(str(value)) if knob else None
            if opt is not None and opt.no_effect_log:
                out.append((f"{name}={value}", opt.no_effect_log))
        return out

    def of_kind(self, kind: str) -> list[Stage]:
        return [s for s in self.stages if s.kind == kind]

    def changed(self, kind: str, params: dict[str, Any]) -> dict[str, Any]:
        """The knobs of the stages of ``kind`` in ``params`` whose value differs from the
        engine default."""
        return {
            k.name: params[k.name]
            for st in self.of_kind(kind)
            for k in st.knobs
            if k.name in params and params[k.name] != k.default
        }


def _fits(stage: Stage, cand: dict[str, Any]) -> bool:
    known = {k.name: k for k in stage.active(cand)}
    try:
        for key, value in cand.items():
            known[key].validate_value(value)
    except (KeyError, ValueError):
        return False
    return True


def found_in_log(pattern: str, log_text: str) -> str | None:
    """The first log line matching ``pattern``, or None; the command line the log starts with
    (``$ argv``) is not the engine speaking and is skipped."""
    rx = re.compile(pattern)
    lines = (ln.strip() for ln in log_text.splitlines() if not ln.startswith("$ "))
    return next((ln for ln in lines if rx.search(ln)), None)


def space_path(engine: str, device: str) -> Path:
    return Path(str(resources.files("search_spaces").joinpath(f"{engine}-{device}.yaml")))


def load_space(path: Path) -> SearchSpace:
    """Load and validate one search-space file.

    Raises:
        SpaceError: unreadable YAML or a schema violation, with the file named.
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise SpaceError(f"search space {path}: not UTF-8 text") from None
    except (OSError, yaml.YAMLError) as exc:
        raise SpaceError(f"search space {path}: {exc}") from None
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(f"search space {path} is invalid: {_first_problem(exc)}") from None


def _first_problem(exc: ValidationError) -> str:
    """A schema violation in one line: where, what, and how many more there are."""
    errors = exc.errors()
    err = errors[0]
    where = ".".join(str(x) for x in err.get("loc", ())) or "the file"
    msg = str(err.get("msg", exc)).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {msg}{more}"
