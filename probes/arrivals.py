"""Arrival processes of the open loop: when each request of a point is due, as offsets in seconds
from the point's start (the first request at 0), drawn before the clock starts.

- Poisson at rate R (``poisson_offsets``): exponential gaps, scaled so that the N gaps add up
  to exactly N/R (``probes.client.arrival_offsets``, the load client's schedule).
- Gamma at rate R with coefficient of variation cv (``gamma_offsets``): gaps drawn from
  Gamma(shape k = 1/cv², scale 1/(k R)), of mean 1/R and standard deviation cv/R, scaled like
  Poisson's. This is vLLM's ``--burstiness`` b (``vllm bench serve`` draws each gap from
  ``np.random.gamma(shape=b, scale=1/(R b))``) with b = k = 1/cv²: cv = 1 is Poisson's
  variability, cv > 1 burstier (b < 1), cv < 1 more even (b > 1).
- A trace's own times (``trace_offsets``), from its first, divided by a time scale s.

The load: a point's load is a rate in requests/s for Poisson and gamma arrivals, and a time
scale for a trace: s = 1 replays the trace as recorded, s = 2 twice as fast (twice its
requests/s), s = 0.5 at half speed. A trace's rate at scale s is s times its own mean rate
(``probes.trace.TraceWorkload.rate_rps``); the capacity of a trace is the highest scale at
which the SLOs hold. The tuner and ``autotune probe`` keep one load axis, a rate, for every
workload: a trace at rate R replays at scale R / its own mean rate (its rate equivalent).

A ``Schedule`` is an arrival process bound to a rate, as the load client takes it
(``gamma_schedule``, ``trace_schedule``): the client sends a point's requests in batches (the
first, then more while its sample grows) and asks for each batch's times.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# The times of requests ``first``..``first + n - 1`` of a point's prepared requests, in seconds
# on the schedule's own axis (request 0 at 0), the batch's random draws from ``seed``. The load
# client sends request i at the point's start plus (time of i - time of its first request).
Schedule = Callable[[int, int, int], list[float]]


def number_spec(x: float) -> str:
    """A number as a spec writes it: short where that reads back the same, else in full."""
    short = f"{x:g}"
    return short if float(short) == x else repr(x)


class Gamma(BaseModel):
    """Gamma inter-arrival times of a given coefficient of variation (None means Poisson)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["gamma"] = "gamma"
    cv: float = Field(gt=0)

    @property
    def burstiness(self) -> float:
        """vLLM's ``--burstiness``: the gamma shape, 1/cv²."""
        return 1.0 / self.cv**2

    @property
    def spec(self) -> str:
        return f"arrivals=gamma,cv={number_spec(self.cv)}"


def _spaced(gaps: list[float], span_s: float) -> list[float]:
    """Offsets from 0 of arrivals separated by ``gaps`` scaled to add up to ``span_s`` (the
    last gap is the one after the last arrival)."""
    scale = span_s / sum(gaps) if gaps else 1.0
    offsets, t = [], 0.0
    for g in gaps:
        offsets.append(t)
        t += g * scale
    return offsets


def poisson_offsets(n: int, rate_rps: float, seed: int) -> list[float]:
    """N arrival times from 0: exponential gaps (Poisson arrivals) from ``random.Random(seed)``,
    scaled so that the N gaps add up to exactly N/R: a Poisson process conditioned on N
    arrivals in N/R seconds, so the load offered is the load the point is judged at."""
    rng = random.Random(seed)
    return _spaced([rng.expovariate(rate_rps) for _ in range(n)], n / rate_rps)


def gamma_offsets(n: int, rate_rps: float, cv: float, seed: int) -> list[float]:
    """N arrival times from 0 with Gamma(1/cv², cv²/R) gaps (mean 1/R, coefficient of variation
    cv) from ``random.Random(seed)``, scaled like ``poisson_offsets`` to add up to N/R (which
    keeps the gaps' coefficient of variation)."""
    if cv <= 0:
        raise ValueError(f"cv must be > 0, got {cv}")
    shape = 1.0 / cv**2
    rng = random.Random(seed)
    gaps = [rng.gammavariate(shape, 1.0 / (rate_rps * shape)) for _ in range(n)]
    return _spaced(gaps, n / rate_rps)


def offsets(process: Gamma | None, n: int, rate_rps: float, seed: int) -> list[float]:
    """N arrival times from 0 at ``rate_rps``: Poisson where ``process`` is None."""
    if rate_rps <= 0:
        raise ValueError(f"rate must be > 0 requests/s, got {rate_rps}")
    if process is None:
        return poisson_offsets(n, rate_rps, seed)
    return gamma_offsets(n, rate_rps, process.cv, seed)


def trace_offsets(times_s: Sequence[float], n: int, scale: float) -> list[float]:
    """The first ``n`` arrivals of a trace, as offsets from its first, divided by ``scale``.

    Past the trace's end it starts again, each repeat one mean gap after the last arrival of
    the one before, so the rate stays the trace's own.

    Args:
        times_s: the trace's arrival times in seconds, in order.
        scale: the time scale; 2 replays the trace twice as fast.
    """
    if scale <= 0:
        raise ValueError(f"a trace's time scale must be > 0, got {scale}")
    if not times_s:
        raise ValueError("a trace with no arrivals")
    first, m = times_s[0], len(times_s)
    span = times_s[-1] - first
    period = span + span / (m - 1) if m > 1 else 0.0
    return [((times_s[i % m] - first) + (i // m) * period) / scale for i in range(n)]


def gamma_schedule(rate_rps: float, cv: float) -> Schedule:
    """Gamma arrivals at ``rate_rps`` as the load client takes them: each batch of n is
    ``gamma_offsets`` (spanning n/R, like a Poisson batch) from where the requests before it
    end, first/R, so a grown point stays one process at rate R."""
    if rate_rps <= 0:
        raise ValueError(f"rate must be > 0 requests/s, got {rate_rps}")

    def times(first: int, n: int, seed: int) -> list[float]:
        return [first / rate_rps + o for o in gamma_offsets(n, rate_rps, cv, seed)]

    return times


def trace_schedule(times_s: Sequence[float], scale: float) -> Schedule:
    """A trace's own times at time scale ``scale`` as the load client takes them: request i at
    its row i's time (``trace_offsets``, cycled past the end); a batch draws nothing."""
    if scale <= 0:
        raise ValueError(f"a trace's time scale must be > 0, got {scale}")
    rows = list(times_s)

    def times(first: int, n: int, seed: int) -> list[float]:
        del seed  # the trace's times are its own
        return trace_offsets(rows, first + n, scale)[first:]

    return times
