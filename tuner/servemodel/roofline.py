"""A quantised build's step model before it is measured: what the probe's roofline says.

A build the run has not measured is predicted with the nearest measured build's step model
(``transferred``). Where the two differ only in how many bytes a step reads (the weights', or
the KV cache's: the quantisation stage's knobs), the probe's roofline figures say how much of
a step those bytes cost (probes/roofline.py, probes/verdict.py):

- **decoding memory-bound** (one sequence's TPOT within twice the time of reading the weights
  once at the measured copy bandwidth, and the weights larger than the last-level cache): a
  step's fixed cost ``base_s`` holds the weights' read time, ``weight_bytes / bandwidth``, and
  a decoding sequence's cost per context token (``per_ctx_ktoken_s``) is its KV cache's read.
  Both scale with the bytes: 8-bit weights where the measured build reads 16-bit ones save half
  the weights' read time (never more than the whole fixed cost), an fp8 KV cache half the
  context term;
- **decoding not memory-bound** (the weights fit in the last-level cache, or a step costs well
  over the weights' read): fewer bytes do not shorten a step, and the step model is kept as it
  is (on the Xeon of 2026-12-06, the fp8 KV cache's build measured within 1 % of the one it
  was predicted from);
- **unknown** (no roofline measured): no roofline prediction; the build stays ``transferred``.

What the roofline leaves out (the kernels' own dequantising cost, a method that quantises no
layer of this model) is why the prediction is marked ``roofline``, a weaker kind than a
calibrated one, with ``ROOFLINE_SPREAD`` in its interval (tuner/servemodel/spreads.py). Once
the build is measured its own step model replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from probes.diagnose import Diagnosis
from tuner.servemodel.configs import DTYPE_BYTES, build_of, kv_bytes_per_token
from tuner.servemodel.steptime import StepModel
from tuner.spaces.space import SearchSpace


@dataclass(frozen=True)
class Roofline:
    """The probe's figures a roofline prediction needs.

    ``weight_bytes``: the model's weights as stored (all of them, at ``bytes_per_weight``);
    ``bandwidth_gbps``: the measured copy bandwidth; ``memory_bound``: the probe's verdict on
    decoding (None: it could not tell).
    """

    weight_bytes: int
    bytes_per_weight: float
    bandwidth_gbps: float
    memory_bound: bool | None

    def read_s(self, bytes_per_weight: float) -> float:
        """Seconds to read every weight once at ``bytes_per_weight`` bytes each."""
        params = self.weight_bytes / self.bytes_per_weight
        return params * bytes_per_weight / (self.bandwidth_gbps * 1e9)


def roofline_of(diagnosis: Diagnosis | None) -> Roofline | None:
    """The roofline figures of a probe's diagnosis (None where it measured no roofline or
    could not size the model)."""
    if diagnosis is None or diagnosis.device is None or diagnosis.model is None:
        return None
    size = diagnosis.model
    if size.parameters <= 0 or size.weight_bytes <= 0:
        return None
    return Roofline(
        weight_bytes=size.weight_bytes,
        bytes_per_weight=size.weight_bytes / size.parameters,
        bandwidth_gbps=diagnosis.device.memory_bandwidth_gbps,
        memory_bound=diagnosis.verdict.decode_memory_bound,
    )


def bytes_per_weight(params: dict[str, Any], space: SearchSpace, own: float) -> float | None:
    """The bytes each weight takes in ``params``' build: the chosen option's ``weight_bits``
    (a quantisation method); else the dtype knob's, or ``own`` (the checkpoint's) where that is
    auto. None for a non-default option of a weight knob (one whose options declare
    ``weight_bits``) that does not say its own: a pre-quantised checkpoint, say."""
    full = {k.name: k.default for k in space.knobs().values()} | params
    for knob in space.knobs().values():
        options = knob.options or {}
        if not any(o.weight_bits for o in options.values()) or full.get(knob.name) == knob.default:
            continue
        opt = options.get(str(full.get(knob.name)))
        return opt.weight_bits / 8 if opt is not None and opt.weight_bits else None
    return float(DTYPE_BYTES.get(str(full.get("dtype")), own))


def roofline_step(
    step: StepModel,
    measured: dict[str, Any],
    params: dict[str, Any],
    space: SearchSpace,
    roof: Roofline,
    model_dir: str | None,
) -> StepModel | None:
    """``step``, the build ``measured``'s, for ``params``' build by the roofline (None where it
    cannot say: ``params`` differs in a knob outside the quantisation stages, or the bytes of
    either build are unknown)."""
    quant = {k.name for s in space.stages if s.kind == "quantisation" for k in s.knobs}
    new = build_of(params, space)
    if any(new.get(k) != v for k, v in measured.items() if k not in quant):
        return None
    w_old = bytes_per_weight(measured, space, roof.bytes_per_weight)
    w_new = bytes_per_weight(new, space, roof.bytes_per_weight)
    kv_old = kv_bytes_per_token(model_dir, measured.get("kv_cache_dtype"))
    kv_new = kv_bytes_per_token(model_dir, new.get("kv_cache_dtype"))
    if w_old is None or w_new is None:
        return None
    if kv_old and kv_new:
        kv = (float(kv_old), float(kv_new))
    elif measured.get("kv_cache_dtype") == new.get("kv_cache_dtype"):
        kv = (1.0, 1.0)
    else:  # the cache's bytes unknown (no config.json) and its dtype changed
        return None
    return scale_step(step, roof, weights=(w_old, w_new), kv=kv)


def scale_step(
    step: StepModel,
    roof: Roofline,
    *,
    weights: tuple[float, float],
    kv: tuple[float, float],
) -> StepModel | None:
    """``step`` (a measured build's) for a build that reads other bytes: ``weights`` and ``kv``
    are (measured build, new build) bytes per weight and per cached token. None where the
    probe could not tell whether decoding is memory-bound (see the module docstring)."""
    if roof.memory_bound is None:
        return None
    if not roof.memory_bound:
        return step
    (w_old, w_new), (kv_old, kv_new) = weights, kv
    if min(w_old, w_new, kv_old, kv_new) <= 0:
        raise ValueError(f"bytes must be positive, got weights {weights}, KV {kv}")
    read = min(step.base_s, roof.read_s(w_old))  # the weights' share of the fixed cost
    base = step.base_s + read * (w_new / w_old - 1.0)
    return step.model_copy(
        update={"base_s": base, "per_ctx_ktoken_s": step.per_ctx_ktoken_s * kv_new / kv_old}
    )
