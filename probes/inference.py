"""``measure_inference``: the probe's timing for people who bring their own generator.

    from probes import measure_inference
    stats = measure_inference(generate, "Once upon a time", n_tokens=128, repeats=5)

``generate(prompt, max_new_tokens=..., stream=True)`` must yield tokens (or text pieces) as they
are produced. Per repeat, on one monotonic clock (``time.perf_counter``), from the call:

- TTFT = arrival of the first yielded token - call time;
- ms_per_token = (total time - TTFT) / (tokens - 1), the TPOT of MEASUREMENT.md;
- tokens_per_s = 1000 / ms_per_token (the decoding rate; prefill is in TTFT).

It returns the medians over the repeats. The first call is a warm-up and is not measured unless
``warmup=False``: compilation and cache allocation belong to start-up, not to latency.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any


class InferenceMeasurementError(ValueError):
    """The generator yielded too little to measure."""


def _one(
    generate: Callable[..., Iterable[Any]], prompt: str, n_tokens: int, clock: Callable[[], float]
) -> tuple[float, float, int]:
    t0 = clock()
    t_first = t_last = None
    n = 0
    for _ in generate(prompt, max_new_tokens=n_tokens, stream=True):
        now = clock()
        if t_first is None:
            t_first = now
        t_last = now
        n += 1
    if t_first is None or t_last is None:
        raise InferenceMeasurementError("the generator yielded nothing")
    return t_first - t0, t_last - t0, n


def measure_inference(
    generate: Callable[..., Iterable[Any]],
    prompt: str,
    n_tokens: int = 128,
    repeats: int = 5,
    *,
    warmup: bool = True,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, float]:
    """Time a streaming generator; returns medians of ``ttft_ms``, ``ms_per_token``,
    ``tokens_per_s`` over ``repeats`` calls, plus ``tokens`` (median count yielded) and
    ``repeats``.

    Raises:
        InferenceMeasurementError: a call yielded fewer than two tokens (no decoding rate).
        ValueError: ``repeats`` or ``n_tokens`` below 1 and 2.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if n_tokens < 2:
        raise ValueError(f"n_tokens must be >= 2 to measure decoding, got {n_tokens}")
    if warmup:
        _one(generate, prompt, n_tokens, clock)
    ttfts, per_token, counts = [], [], []
    for _ in range(repeats):
        ttft, total, n = _one(generate, prompt, n_tokens, clock)
        if n < 2:
            raise InferenceMeasurementError(
                f"the generator yielded {n} token(s); at least 2 are needed for a decoding rate"
            )
        ttfts.append(ttft)
        per_token.append((total - ttft) / (n - 1))
        counts.append(n)
    ms_per_token = statistics.median(per_token) * 1000.0
    return {
        "ttft_ms": statistics.median(ttfts) * 1000.0,
        "ms_per_token": ms_per_token,
        "tokens_per_s": 1000.0 / ms_per_token if ms_per_token > 0 else float("inf"),
        "tokens": float(statistics.median(counts)),
        "repeats": float(repeats),
    }
