"""One knob of a search space: its type and range, the check of a value, and how a value
becomes launch arguments and environment variables (tuner/spaces/space.py holds the knobs per
stage).

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
filled from the machine (tuner.engines.hardware.template_context), and the user's paths
``{draft_model}``, ``{eagle_model}`` and ``{quantized_model}``; an option that ``requires`` one
of them is left out of the space when the user did not name it. ``requires`` may also name a
property of the machine that is empty where it does not hold (``bf16_emulated``: a CPU without
bf16 instructions), so that an option exists only where it can pay off.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Scalar = str | int | float | bool
# The scheduler parameters the serving model simulates (tuner/servemodel/configs.py).
SIM_PARAMS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "kv_cache_gib",
    "stream_interval",
    "long_prefill_threshold",
    "prefix_caching",
)


class Emit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args: list[str] = []
    env: dict[str, str] = {}
    json_: dict[str, dict[str, Scalar]] = Field(default={}, alias="json")
    requires: list[str] = []  # template keys (user paths, machine properties) it needs
    no_effect_log: str | None = None  # a log line that means the option did nothing
    # bits per weight the option stores (a quantisation method): what the serving model's
    # roofline predicts a build not measured yet with (tuner/servemodel/roofline.py)
    weight_bits: int | None = Field(default=None, gt=0, le=32)

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
    # The serving model (tuner/servemodel/) simulates this knob as the scheduler parameter
    # named here (one of servemodel.configs.SIM_PARAMS); a knob without it changes the build
    # (kernels, threads, front end), whose step times are fitted, not simulated. ``sim_build``:
    # simulated, and its value changes the step times too (stream_interval: coarser chunks, and
    # less front-end work per step).
    sim: str | None = None
    sim_build: bool = False

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
        if self.sim is not None and self.sim not in SIM_PARAMS:
            raise ValueError(
                f"knob {self.name}: sim {self.sim!r} is not a simulated parameter; known: "
                + ", ".join(SIM_PARAMS)
            )
        if self.sim_build and self.sim is None:
            raise ValueError(f"knob {self.name}: sim_build needs sim")
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
