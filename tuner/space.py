"""Search spaces: per-engine data files in search_spaces/, validated by pydantic on load.

A space names the stages in the prescribed order (batching, then quantisation, then speculative
decoding) and, per stage, its knobs: type, range or choices, the engine's own default, and how a
value becomes launch arguments or environment variables. Adding a knob needs no code.

How a knob value is rendered:
- ``flag: --max-num-seqs`` -> ``["--max-num-seqs", "128"]``; for a bool, ``flag`` when true and
  ``flag_false`` (if any) when false;
- ``env: VLLM_CPU_KVCACHE_SPACE`` -> ``{"VLLM_CPU_KVCACHE_SPACE": "4"}`` (bools as 1/0);
- a categorical with ``options`` maps each choice to its own ``args`` and ``env``.
Strings may use ``{cpu_list}``, ``{last_cpu}``, ``{n_cpus}``, ``{n_gpus}`` and ``{prefix}``,
filled from the machine (tuner.hardware.template_context).
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

STAGE_ORDER = ("batching", "quantisation", "speculative")
Scalar = str | int | float | bool


class SpaceError(ValueError):
    """An invalid search-space file; the message names the file and the problem."""


class Emit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args: list[str] = []
    env: dict[str, str] = {}


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
        if not (self.flag or self.flag_false or self.env or self.options):
            raise ValueError(
                f"knob {self.name}: say how it is rendered (flag, flag_false, env or options)"
            )
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
            )
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


def _fmt(value: Any) -> str:
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return str(int(value))
    return str(value)


class Stage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: Literal["batching", "quantisation", "speculative"]
    help: str = ""
    knobs: list[Knob]
    candidates: list[dict[str, Scalar]] = []  # good starting points, enqueued before the sampler


class Baseline(BaseModel):
    """Launch settings with their reason: what the baseline sets beyond the engine's own
    defaults (``baseline``), or what every launch sets, the baseline included (``common``)."""

    model_config = ConfigDict(extra="forbid")

    args: list[str] = []
    env: dict[str, str] = {}
    reason: str = ""


class SearchSpace(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: str
    device: Literal["cpu", "cuda"]
    description: str = ""
    baseline: Baseline = Field(default_factory=Baseline)
    common: Baseline = Field(default_factory=Baseline)
    stages: list[Stage]

    @model_validator(mode="after")
    def _check(self) -> SearchSpace:
        names = [s.name for s in self.stages]
        if names != sorted(names, key=STAGE_ORDER.index) or len(set(names)) != len(names):
            raise ValueError(f"stages must be unique and in the order {', '.join(STAGE_ORDER)}")
        seen: set[str] = set()
        for stage in self.stages:
            for knob in stage.knobs:
                if knob.name in seen:
                    raise ValueError(f"knob {knob.name} appears twice")
                seen.add(knob.name)
            for i, cand in enumerate(stage.candidates):
                known = {k.name: k for k in stage.knobs}
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

    def for_machine(self, n_gpus: int) -> SearchSpace:
        """A copy without the knobs this machine cannot use (``min_gpus``)."""
        stages = [
            s.model_copy(update={"knobs": [k for k in s.knobs if k.min_gpus <= n_gpus]})
            for s in self.stages
        ]
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
            e = knobs[name].render(v, ctx)
            out.args += e.args
            out.env.update(e.env)
        return out


def space_path(engine: str, device: str) -> Path:
    return Path(str(resources.files("search_spaces").joinpath(f"{engine}-{device}.yaml")))


def load_space(path: Path) -> SearchSpace:
    """Load and validate one search-space file.

    Raises:
        SpaceError: unreadable YAML or a schema violation, with the file named.
    """
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpaceError(f"search space {path}: {exc}") from None
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as exc:
        raise SpaceError(f"search space {path} is invalid:\n{exc}") from None
