"""The load a simulated point serves: the workload's lengths under the run's load model.

- Open loop (``rate``): Poisson arrivals at a rate, with the load client's own schedule
  (``probes.client.arrival_offsets``: N exponential gaps scaled to span exactly N / rate), so a
  simulated point offers the load a measured one does.
- Closed loop (``concurrency``): N clients; each sends its next request the moment its last
  one finished, until the point's requests are sent.

Lengths are drawn with the workload's own ``lengths`` (fixed, or uniform over its spread), or
taken from a list of measured (prompt, output) pairs, cycled; a measured request's third
figure, where given, is the prompt tokens it shared with others (a prefix cache's to hold).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from probes.client import arrival_offsets
from tuner.servemodel.scheduler import Arrival, OnFinish

# (prompt, output) tokens, or (prompt, output, shared prompt tokens)
Lengths = Callable[[random.Random], tuple[int, ...]]


def cycled(pairs: Sequence[tuple[int, ...]]) -> Lengths:
    """Lengths taken in turn from measured (prompt, output[, shared]) tokens."""
    if not pairs:
        raise ValueError("no (prompt, output) pairs to draw lengths from")
    state = {"i": 0}

    def draw(rng: random.Random) -> tuple[int, ...]:
        del rng  # the order is the pairs' own
        i = state["i"]
        state["i"] = i + 1
        return pairs[i % len(pairs)]

    return draw


def poisson(rate_rps: float, n: int, lengths: Lengths, seed: int) -> list[Arrival]:
    """``n`` open-loop arrivals at ``rate_rps`` from t = 0."""
    if rate_rps <= 0 or n < 1:
        raise ValueError(f"a rate > 0 and at least one request are needed; got {rate_rps}, {n}")
    rng = random.Random(seed ^ 0x5EED)
    out = []
    for t in arrival_offsets(n, rate_rps, seed):
        out.append(_arrival(t, lengths(rng)))
    return out


def _arrival(t: float, drawn: tuple[int, ...]) -> Arrival:
    n_in, n_out, *shared = drawn
    return Arrival(t, n_in, n_out, cached_tokens=shared[0] if shared else 0)


def closed_loop(
    concurrency: int, n: int, lengths: Lengths, seed: int
) -> tuple[list[Arrival], OnFinish]:
    """The first ``concurrency`` arrivals, and the rule that sends the rest (``n`` in all)."""
    if concurrency < 1 or n < 1:
        raise ValueError(f"concurrency and requests must be at least 1; got {concurrency}, {n}")
    rng = random.Random(seed ^ 0x5EED)
    first = min(concurrency, n)
    sent = {"n": first}

    def arrival(t: float) -> Arrival:
        return _arrival(t, lengths(rng))

    def on_finish(t: float) -> list[Arrival]:
        if sent["n"] >= n:
            return []
        sent["n"] += 1
        return [arrival(t)]

    return [arrival(0.0) for _ in range(first)], on_finish
