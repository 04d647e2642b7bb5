"""A configuration's predicted capacity: the measured trial's estimator, on simulated points.

The simulation (``scheduler.simulate``) serves the run's workload under its load model at a
load; the simulated records are summarised, judged and scored exactly as a measured point's
(``probes.metrics.summarize``, ``tuner.scoring.judge.judge_point`` and ``score_window``), and the
capacity comes from ``tuner.scoring.estimate.estimate`` over every simulated point, so a prediction
is
a capacity with an interval in the same units as a measurement.

Where to simulate: the load is bracketed from an upper bound on what the engine can serve (the
step model's time for a full batch) and bisected to ``RESOLUTION`` of the crossing. Each
simulated point spans ``probes.drift.HORIZON_S`` of arrivals (open loop), the time a measured
rate must hold.

The interval adds two spreads the bootstrap over simulated requests does not see, as relative
half-widths combined in quadrature: the run-to-run spread of a fresh engine start (the same
configuration started again differs by more than its requests' sampling noise) and the model's
own error where it is known (from measured trials of the run it was calibrated on).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from probes.drift import HORIZON_S
from probes.metrics import summarize
from probes.records import RequestRecord
from probes.slo import SLOSet
from tuner.scoring.estimate import Samples, constraints, estimate
from tuner.scoring.judge import judge_point, score_window
from tuner.servemodel.load import Lengths, closed_loop, poisson
from tuner.servemodel.scheduler import Knobs, SimulationError, simulate
from tuner.servemodel.steptime import StepModel

RESOLUTION = 0.02  # bisection stops when the bracket is this narrow (relative)
MIN_REQUESTS = 200
MAX_REQUESTS = 1500
CLOSED_REQUESTS_PER_CLIENT = 8
LIKE_REPEATS = 5  # simulations of a measured point's size, for its predicted percentiles
Basis = Literal["calibrated", "transferred", "probe", "roofline"]


@dataclass(frozen=True)
class Spread:
    """Relative half-widths the interval adds to the bootstrap's (0.1: +-10 %)."""

    run_to_run: float = 0.0
    model: float = 0.0

    @property
    def combined(self) -> float:
        return math.hypot(self.run_to_run, self.model)


class PredictedLoad(BaseModel):
    """The simulated figures at one load (what a measured point reports, predicted)."""

    model_config = ConfigDict(extra="forbid")

    load: float
    holds: bool
    worst_margin: float
    output_tokens_per_s: float
    ttft_ms_p99: float | None
    ttft_ms_p50: float | None
    tpot_ms_p50: float | None
    n_requests: int
    tpot_ms_p99: float | None = None


class Prediction(BaseModel):
    """A configuration's predicted capacity, with its interval and the load it is at."""

    model_config = ConfigDict(extra="forbid")

    load_kind: Literal["rate", "concurrency"]
    load: float | None  # None: no load meets the SLOs
    load_low: float | None
    load_high: float | None
    tokens_per_s: float
    low: float
    high: float | None
    censored: Literal["none", "below", "above"]
    binding: str | None
    at_capacity: PredictedLoad | None  # the simulated point closest under the capacity
    basis: Basis
    spread_run_to_run: float
    spread_model: float
    points: list[PredictedLoad]

    @property
    def rate_rps(self) -> float | None:
        return self.load if self.load_kind == "rate" else None


class Simulator:
    """Simulates points of one configuration under one workload and load model."""

    def __init__(
        self,
        step: StepModel,
        knobs: Knobs,
        lengths: Lengths,
        slos: SLOSet,
        max_error_rate: float,
        kind: Literal["rate", "concurrency"],
        seed: int = 0,
        horizon_s: float = HORIZON_S,
    ) -> None:
        self.step, self.knobs, self.lengths = step, knobs, lengths
        self.horizon_s = horizon_s
        self.slos, self.max_error_rate, self.kind, self.seed = slos, max_error_rate, kind, seed
        self.samples: list[Samples] = []
        self.points: list[PredictedLoad] = []

    def records(
        self, x: float, n: int | None = None, seed: int | None = None
    ) -> list[RequestRecord]:
        """A simulated point at load ``x``: ``n`` requests (default: a horizon's worth, as a
        capacity is judged)."""
        if seed is None:
            seed = self.seed * 7919 + len(self.points)
        if self.kind == "rate":
            if n is None:
                n = int(min(MAX_REQUESTS, max(MIN_REQUESTS, round(x * self.horizon_s))))
            return simulate(poisson(x, n, self.lengths, seed), self.knobs, self.step)
        c = int(x)
        if n is None:
            n = max(MIN_REQUESTS, c * CLOSED_REQUESTS_PER_CLIENT)
        first, more = closed_loop(c, n, self.lengths, seed)
        return simulate(first, self.knobs, self.step, on_finish=more)

    def like_point(
        self, x: float, n: int, repeats: int = LIKE_REPEATS
    ) -> tuple[float | None, float | None]:
        """The p99 TTFT and p50 TPOT (ms) a measured point of ``n`` requests at load ``x``
        would show by the model: the medians over ``repeats`` simulations of that many
        requests. A short point ends before its batch has grown to the size a long run
        settles at, so a horizon's simulation says more than the point could show: trial 1 of
        the README command on the AMD box (2026-12-07 09:09, 98 requests at 6.52 requests/s)
        measured p50 TPOT 143 ms; the model refitted on it put the horizon's at 318 ms and 98
        requests' at 146."""
        runs = [
            summarize(self.records(x, n, self.seed * 7919 + 104_729 + i), self.slos)
            for i in range(repeats)
        ]
        ttft = [v for m in runs if (v := m.ttft_ms.p99) is not None]
        tpot = [v for m in runs if (v := m.tpot_ms.p50) is not None]
        return (
            statistics.median(ttft) if ttft else None,
            statistics.median(tpot) if tpot else None,
        )

    def point(self, x: float) -> PredictedLoad:
        recs = self.records(x)
        metrics = summarize(recs, self.slos)
        judged = judge_point(metrics, recs, self.kind, self.slos, self.max_error_rate)
        window = score_window(self.kind, x, len(recs), metrics)
        self.samples.append(Samples.from_records(x, judged.records, window))
        p = PredictedLoad(
            load=x,
            holds=judged.verdict.holds,
            worst_margin=judged.verdict.worst_margin,
            output_tokens_per_s=sum(r.n_out for r in recs) / window if window > 0 else 0.0,
            ttft_ms_p99=metrics.ttft_ms.p99,
            ttft_ms_p50=metrics.ttft_ms.p50,
            tpot_ms_p50=metrics.tpot_ms.p50,
            n_requests=len(recs),
            tpot_ms_p99=metrics.tpot_ms.p99,
        )
        self.points.append(p)
        return p


def upper_bound(step: StepModel, knobs: Knobs, mean_in: float, mean_out: float) -> float:
    """Requests/s the engine could not exceed even with a full batch every step."""
    b = float(knobs.max_num_seqs)
    ctx = mean_in + mean_out / 2.0
    decode = step.step_s(0.0, b, b * ctx / 1000.0) / b  # seconds of a full step per sequence
    prefill = step.per_prefill_token_s * mean_in + step.per_prefill_kpair_s * mean_in**2 / 2000.0
    per_request = prefill + decode * max(mean_out - 1.0, 0.0)
    return 1.0 / per_request if per_request > 0 else math.inf


def predict(
    step: StepModel,
    knobs: Knobs,
    lengths: Lengths,
    slos: SLOSet,
    max_error_rate: float,
    kind: Literal["rate", "concurrency"],
    *,
    mean_lengths: tuple[float, float],
    spread: Spread = Spread(),
    basis: Basis = "calibrated",
    seed: int = 0,
    resamples: int = 100,
    start: float | None = None,
    resolution: float = RESOLUTION,
    horizon_s: float = HORIZON_S,
) -> Prediction:
    """The capacity of ``knobs`` under ``step``, judged as a measured trial is judged.

    Args:
        step: the build's step model.
        knobs: the scheduler knobs.
        lengths: draws one request's (prompt, output) tokens.
        slos, max_error_rate: the run's constraints.
        kind: the load model ("rate": Poisson arrivals; "concurrency": a closed loop).
        mean_lengths: the workload's mean (prompt, output) tokens, for the first bracket.
        spread: the run-to-run and model spreads the interval adds.
        basis: how the step model was obtained (reported with the prediction).
        seed: the simulation's seed (a prediction is reproducible).
        resamples: the estimator's bootstrap resamples.
        start: a load near the expected capacity (a similar configuration's), where the
            bracket starts, with a smaller first step.
        resolution: the bracket's relative width when the bisection stops.
        horizon_s: seconds of arrivals a simulated open-loop point spans (a screen may take
            less: the verdict projects a growing queue to the drift horizon anyway).
    """
    sim = Simulator(step, knobs, lengths, slos, max_error_rate, kind, seed, horizon_s)
    try:
        _bracket(sim, upper_bound(step, knobs, *mean_lengths), start, resolution)
    except SimulationError:
        sim.samples.clear()
        sim.points.clear()
    cons = constraints(slos, max_error_rate)
    est = estimate(sim.samples, cons, resamples=resamples, seed=seed) if sim.samples else None
    if est is None or est.censored == "below":
        return Prediction(
            load_kind=kind,
            load=None,
            load_low=None,
            load_high=None,
            tokens_per_s=0.0,
            low=0.0,
            high=0.0,
            censored="below",
            binding=est.binding if est else None,
            at_capacity=None,
            basis=basis,
            spread_run_to_run=spread.run_to_run,
            spread_model=spread.model,
            points=sim.points,
        )
    rel = spread.combined
    low = min(est.low, est.tokens_per_s * (1.0 - rel))
    high = None if est.high is None else max(est.high, est.tokens_per_s * (1.0 + rel))
    load = est.load
    under = [p for p in sim.points if load is not None and p.load <= load]
    at = max(under, key=lambda p: p.load) if under else None
    load_low = (
        est.load_low
        if est.load_low is None or load is None
        else min(est.load_low, load * (1.0 - rel))
    )
    load_high = (
        est.load_high
        if est.load_high is None or load is None
        else max(est.load_high, load * (1.0 + rel))
    )
    return Prediction(
        load_kind=kind,
        load=load,
        load_low=load_low,
        load_high=load_high,
        tokens_per_s=est.tokens_per_s,
        low=low,
        high=high,
        censored=est.censored,
        binding=est.binding,
        at_capacity=at,
        basis=basis,
        spread_run_to_run=spread.run_to_run,
        spread_model=spread.model,
        points=sorted(sim.points, key=lambda p: p.load),
    )


def _bracket(
    sim: Simulator, bound: float, start: float | None = None, resolution: float = RESOLUTION
) -> None:
    """Simulate points until the crossing is bracketed within ``resolution``."""
    integer = sim.kind == "concurrency"
    if integer:
        bound = float(max(1, min(int(bound * 10), 4 * sim.knobs.max_num_seqs)))
    hi = bound if math.isfinite(bound) else 1000.0
    lo = 0.0
    up, down = 1.6, 0.4
    x = hi * 0.5
    if start is not None and 0 < start < hi:
        x, up, down = start, 1.15, 0.85
    if integer:
        x = max(1.0, math.floor(x))
    # Find a load that holds and one that breaks.
    for _ in range(12):
        if sim.point(x).holds:
            lo = x
            if x >= hi:
                hi = x * 2.0
            x = min(x * up, hi) if not integer else float(max(x + 1, min(math.floor(x * up), hi)))
            if lo >= hi:
                break
        else:
            hi = x
            if lo > 0:
                break
            x = x * down if not integer else float(max(1, math.floor(x * down)))
            if integer and x == hi:
                return
        if lo > 0 and hi - lo <= resolution * hi:
            return
    if lo == 0:
        return  # nothing held: the estimate says it is below the lowest load
    while hi - lo > resolution * hi and (not integer or hi - lo > 1):
        mid = (lo + hi) / 2.0 if not integer else float(math.floor((lo + hi) / 2.0))
        if sim.point(mid).holds:
            lo = mid
        else:
            hi = mid


def mean_of(pairs: Sequence[tuple[int, ...]]) -> tuple[float, float]:
    """Mean (prompt, output) tokens of ``pairs`` (prompt, output[, shared])."""
    n = len(pairs)
    return sum(p[0] for p in pairs) / n, sum(p[1] for p in pairs) / n
