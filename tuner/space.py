"""Search spaces: per-engine data files in search_spaces/, validated by pydantic on load.

A space names the stages in the prescribed order (batching, then quantisation, then speculative
decoding) and, per stage, its knobs: type, range or choices, the engine's own default, and how a
value becomes launch arguments or environment variables. Adding a knob needs no code.

How a knob value is rendered:
- ``flag: --max-num-seqs`` -> ``["--max-num-seqs", "128"]``; for a bool, ``flag`` when true and
  ``flag_false`` (if any) when false;
- ``env: VLLM_CPU_KVCACHE_SPACE`` -> ``{"VLLM_CPU_KVCACHE_SPACE": "4"}`` (bools as 1/0);
- a categorical with ``options`` maps each choice to its own ``args`` and ``env``.
- ``json_arg: --speculative-config`` with ``json_key: num_speculative_tokens`` -> one key of a
  JSON object; all keys for the same ``json_arg`` are merged into one argument,
  ``["--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}']``; an option's
  ``json`` does the same for a categorical choice.
Strings may use ``{cpu_list}``, ``{last_cpu}``, ``{n_cpus}``, ``{n_gpus}`` and ``{prefix}``,
filled from the machine (tuner.hardware.template_context), and the user's paths
``{draft_model}``, ``{eagle_model}`` and ``{quantized_model}``; an option that ``requires`` one
of them is left out of the space when the user did not name it. ``requires`` may also name a
property of the machine that is empty where it does not hold (``bf16_emulated``: a CPU without
bf16 instructions), so that an option exists only where it can pay off.

Conditional knobs: ``when: {speculative_method: [ngram]}`` makes a knob exist only when an
earlier knob of the same stage has one of the listed values (Optuna samples it only then).

An option may name ``no_effect_log``: a regular expression that, found in the server's log,
means the option was accepted but did nothing (vLLM 0.32's ``int8_per_channel_weight_only``
logs "Quantizing 0 layers" on a dense model); such a trial is recorded as ``no_effect``.
"""

from __future__ import annotations

import json
import math
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

STAGE_ORDER = ("batching", "quantisation", "speculative")  # the stage kinds, in their order
StageKind = Literal["batching", "quantisation", "speculative"]
Scalar = str | int | float | bool


class SpaceError(ValueError):
    """An invalid search-space file; the message names the file and the problem."""


class Emit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args: list[str] = []
    env: dict[str, str] = {}
    json_: dict[str, dict[str, Scalar]] = Field(default={}, alias="json")
    requires: list[str] = []  # template keys (user paths, machine properties) it needs
    no_effect_log: str | None = None  # a log line that means the option did nothing

    @field_validator("no_effect_log")
    @classmethod
    def _pattern(cls, v: str | None) -> str | None:
        """Compiled when the space loads, not when a trial's log is read mid-run."""
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                msg = f"no_effect_log {v!r} is not a regular expression: {exc}"
                raise ValueError(msg) from None
        return v

    def merge(self, other: Emit) -> None:
        self.args += other.args
        self.env.update(other.env)
        for flag, obj in other.json_.items():
            self.json_.setdefault(flag, {}).update(obj)

    def finish(self) -> Emit:
        """The JSON-valued arguments appended to ``args`` (keys sorted, so stable)."""
        args = list(self.args)
        for flag, obj in self.json_.items():
            args += [flag, json.dumps(obj, sort_keys=True)]
        return Emit(args=args, env=dict(self.env))


class Knob(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    type: Literal["int", "float", "bool", "categorical"]
    help: str = ""
    default: Scalar | None = None  # the engine's own default, when it has one
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: int | None = None
    choices: list[Scalar] | None = None
    options: dict[str, Emit] | None = None  # categorical choices that each render their own way
    flag: str | None = None
    flag_false: str | None = None
    env: str | None = None
    json_arg: str | None = None  # the JSON-valued argument this knob is one key of
    json_key: str | None = None
    when: dict[str, list[Scalar]] = {}  # exists only when earlier knobs have these values
    min_gpus: int = 0  # the knob applies only with at least this many GPUs

    @model_validator(mode="after")
    def _check(self) -> Knob:
        if self.type in ("int", "float"):
            if self.low is None or self.high is None or self.low > self.high:
                raise ValueError(f"knob {self.name}: needs low <= high")
            if self.log and self.low <= 0:
                raise ValueError(f"knob {self.name}: a log range needs low > 0")
            if self.type == "int" and (self.low != int(self.low) or self.high != int(self.high)):
                raise ValueError(f"knob {self.name}: int bounds must be whole numbers")
        if self.type == "categorical":
            if self.options:
                if self.choices is None:
                    self.choices = list(self.options)
                elif set(map(str, self.choices)) != set(self.options):
                    raise ValueError(f"knob {self.name}: choices and options disagree")
            if not self.choices:
                raise ValueError(f"knob {self.name}: a categorical needs choices")
        if not (self.flag or self.flag_false or self.env or self.options or self.json_arg):
            raise ValueError(
                f"knob {self.name}: say how it is rendered (flag, flag_false, env, json_arg "
                "or options)"
            )
        if bool(self.json_arg) != bool(self.json_key):
            raise ValueError(f"knob {self.name}: json_arg and json_key go together")
        if self.flag_false and self.type != "bool":
            raise ValueError(f"knob {self.name}: flag_false is for bool knobs only")
        # `default` is the engine's own value and may lie outside the searched range.
        return self

    def validate_value(self, value: Any) -> Any:
        """Check one value against the knob; return it normalised. Raises ValueError."""
        if self.type == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"knob {self.name}: {value!r} is not true/false")
            return value
        if self.type == "categorical":
            assert self.choices is not None
            if value not in self.choices:
                raise ValueError(f"knob {self.name}: {value!r} is not one of {self.choices}")
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"knob {self.name}: {value!r} is not a number")
        assert self.low is not None and self.high is not None
        if not self.low <= value <= self.high:
            raise ValueError(f"knob {self.name}: {value} is outside [{self.low:g}, {self.high:g}]")
        if self.type == "int":
            if value != int(value):
                raise ValueError(f"knob {self.name}: {value} is not a whole number")
            return int(value)
        return float(value)

    def render(self, value: Any, ctx: dict[str, Any]) -> Emit:
        """The launch arguments and environment for one value of this knob."""
        if self.options is not None:
            opt = self.options[str(value)]
            return Emit(
                args=[a.format_map(ctx) for a in opt.args],
                env={k: v.format_map(ctx) for k, v in opt.env.items()},
                json={
                    flag: {k: _fill(v, ctx) for k, v in obj.items()}
                    for flag, obj in opt.json_.items()
                },
            )
        if self.json_arg and self.json_key:
            return Emit(json={self.json_arg: {self.json_key: value}})
        args: list[str] = []
        env: dict[str, str] = {}
        if self.type == "bool":
            flag = self.flag if value else self.flag_false
            if flag and not self.env:
                args.append(flag)
            if self.env:
                env[self.env] = "1" if value else "0"
            return Emit(args=args, env=env)
        text = _fmt(value)
        if self.flag:
            args += [self.flag, text]
        if self.env:
            env[self.env] = text
        return Emit(args=args, env=env)


def _fill(value: Scalar, ctx: dict[str, Any]) -> Scalar:
    return value.format_map(ctx) if isinstance(value, str) else value


def _fmt(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    return str(value)


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
        return [k for k in self.knobs if _active(k, params)]

    def defaults(self) -> dict[str, Any]:
        """The engine's own values of this stage's knobs that exist under those values."""
        out: dict[str, Any] = {}
        for k in self.knobs:
            if _active(k, out):
                out[k.name] = k.default
        return out


def _active(knob: Knob, params: dict[str, Any]) -> bool:
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
