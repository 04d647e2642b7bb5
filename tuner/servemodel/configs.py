"""From a configuration's knob values to what the serving model needs: its build and its
simulated scheduler knobs.

The search space says which knobs the model simulates (a knob's ``sim``: the scheduler
parameter it sets); every other knob changes the build (kernels, threads, the front end), whose
step times are fitted from measurements of that build, never simulated. A knob with
``sim_build`` is both (stream_interval: coarser chunks, and less front-end work per step).

The KV cache's size in blocks comes from its GiB (``kv_cache_gib``) and the model's bytes per
cached token, read from its config.json: 2 (keys and values) x layers x KV heads x head size x
the cache's bytes per value (the model's dtype; 1 for the fp8 cache dtypes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tuner.servemodel.scheduler import Knobs
from tuner.spaces.space import SearchSpace

GIB = 1024**3
NO_BUDGET = 1 << 30
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def defaults(space: SearchSpace) -> dict[str, Any]:
    """Every knob's engine default, by name."""
    return {k.name: k.default for k in space.knobs().values()}


def build_of(params: dict[str, Any], space: SearchSpace) -> dict[str, Any]:
    """The knob values that decide a configuration's step times (its build), defaults filled
    in, sorted by name: two configurations with the same build share one step model."""
    full = defaults(space) | params
    knobs = space.knobs()
    return {
        k: full[k]
        for k in sorted(full)
        if k not in knobs or knobs[k].sim is None or knobs[k].sim_build
    }


def build_label(build: dict[str, Any], space: SearchSpace) -> str:
    """The build in a line: the knobs that differ from the engine's defaults, or 'defaults'."""
    base = defaults(space)
    diff = [f"{k}={v}" for k, v in build.items() if base.get(k) != v]
    return ", ".join(diff) or "defaults"


def kv_bytes_per_token(model_dir: str | None, kv_cache_dtype: str | None = None) -> int | None:
    """Bytes one token occupies in the KV cache, from the model's config.json (None where the
    folder or its fields are missing: the cache is then taken as never running out)."""
    if not model_dir:
        return None
    try:
        cfg = json.loads((Path(model_dir) / "config.json").read_text())
        layers = int(cfg["num_hidden_layers"])
        heads = int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
        head_dim = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return None
    if kv_cache_dtype and str(kv_cache_dtype).startswith("fp8"):
        per_value = 1
    else:
        per_value = DTYPE_BYTES.get(str(cfg.get("torch_dtype") or cfg.get("dtype")), 2)
    return 2 * layers * heads * head_dim * per_value


def sim_knobs(params: dict[str, Any], space: SearchSpace, bytes_per_token: int | None) -> Knobs:
    """The simulated scheduler knobs of a configuration (defaults filled in).

    Raises:
        ValueError: the space does not say what the batch limit or the token budget is.
    """
    full = defaults(space) | params
    values: dict[str, Any] = {}
    for name, knob in space.knobs().items():
        if knob.sim is not None and full.get(name) is not None:
            values[knob.sim] = full[name]
    if "max_num_seqs" not in values:
        raise ValueError(
            f"the {space.engine}-{space.device} space names no max_num_seqs knob (sim:); the "
            "serving model needs the batch limit"
        )
    # An engine without a step token budget (the space names none) batches whole prompts.
    values.setdefault("max_num_batched_tokens", NO_BUDGET)
    kv_blocks = None
    gib = values.get("kv_cache_gib")
    if gib is not None and bytes_per_token:
        kv_blocks = int(float(gib) * GIB // (bytes_per_token * space.kv_block_size))
    return Knobs(
        max_num_seqs=int(values["max_num_seqs"]),
        max_num_batched_tokens=int(values["max_num_batched_tokens"]),
        enable_chunked_prefill=bool(values.get("enable_chunked_prefill", True)),
        kv_blocks=kv_blocks,
        block_size=space.kv_block_size,
        stream_interval=int(values.get("stream_interval", 1)),
        long_prefill_threshold=int(values.get("long_prefill_threshold", 0)),
        prefix_caching=bool(values.get("prefix_caching", space.prefix_cache)),
    )


def cache_block(params: dict[str, Any], space: SearchSpace) -> int | None:
    """The block a configuration's prefix cache holds shared prompt tokens in (None: it caches
    none): what its measured requests computed, for the step model's calibration."""
    full = defaults(space) | params
    on = next(
        (
            bool(full[k.name])
            for k in space.knobs().values()
            if k.sim == "prefix_caching" and full.get(k.name) is not None
        ),
        space.prefix_cache,
    )  # as ``sim_knobs`` decides it
    return space.kv_block_size if on else None
