"""Capacity from every load point of one configuration, with its uncertainty.

A configuration's score (docs/measurement.md) is its output tokens/s at the highest load at
which every SLO holds and the error rate is under its limit. The highest single point that held
is a coin flip at the SLO's edge (a few dozen requests decide a p99), so the score is estimated
from all of the configuration's points instead:

1. For each constraint (every latency SLO at its percentile, and the error rate), the margin
   ``measured / limit - 1`` at each load is fitted monotone non-decreasing in load (isotonic
   regression, each point weighted by its requests): more load never makes latency better.
2. The capacity is the lowest load at which a fitted margin crosses the level (0: the limit;
   ``-headroom`` for a confirmation target), interpolated between the two points that bracket
   it: a latency linearly in its logarithm, the error rate linearly in itself. Near
   saturation a queue's latency grows about geometrically with load, so a straight line
   between a point well under the limit and one far over it crosses early. On a fast AMD box
   (2026-12-07, ``benchmarks/model_accuracy.py``) a ladder's points at 9 and 13.5 requests/s
   (p99 TTFT 367 ms; 6.5 s, judged past the 10x cap) put the crossing at 9.42 in the latency
   itself and 10.77 in its logarithm; bisected points held at 11.02 and broke at 11.60. Over
   eight configurations whose first points (three or four loads, 5-50 % apart) bracketed the
   crossing before it was bisected to 5 %, the estimate from the first points alone was 4.1 %
   low on average in the latency (worst 17 %) and 0.9 % in its logarithm (worst 9 %). Below
   the lowest load or above the highest, nothing is extrapolated: the estimate says it is
   censored there.
3. The score is the output tokens/s at that load, fitted monotone non-decreasing in load too,
   linearly interpolated (proportional to load below the lowest point). A point's tokens/s is
   its output tokens over ``Samples.duration_s``, which the caller chooses: the measured
   window (closed loop) or the arrival span (open loop: rate x tokens per request).
4. The interval comes from a bootstrap over requests: each point's requests are resampled with
   replacement (its window kept), steps 1-3 repeated, and the 5th and 95th percentiles taken.
   Where a resample's capacity lies below every measured load, its pessimistic score is 0 and
   its optimistic one the tokens/s at the lowest load; above every load, the pessimistic one is
   the tokens/s at the highest load and the optimistic one unbounded, unless throughput had
   stopped growing there (the last step gained under 3 %): then a little over the plateau.

Pure logic over per-request samples: nothing here measures, so it is tested with made-up ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict
from scipy.optimize import isotonic_regression

from probes.records import RequestRecord
from probes.slo import SLOSet

MS = 1000.0
BIG_MARGIN = 10.0  # stands in for an unmeasurable margin (no samples): far over the limit
DEFAULT_RESAMPLES = 200
INTERVAL = (5.0, 95.0)  # percentiles of the bootstrap: a 90 % interval
SATURATION_GAIN = 1.03  # as in the capacity search: a smaller step up is a plateau
LOG_FLOOR = 1e-6  # latency over limit below this counts as this (log of 0)


@dataclass(frozen=True)
class Constraint:
    """One limit a point is judged against: a latency percentile, or the error rate."""

    key: str  # "ttft@p99", ..., "error_rate"
    metric: str  # ttft | tpot | itl | e2e | error_rate
    percentile: int | None
    limit: float  # ms for latency, a fraction for the error rate


def constraints(slos: SLOSet, max_error_rate: float) -> list[Constraint]:
    out = [
        Constraint(f"{s.metric}@p{s.percentile}", s.metric, s.percentile, s.limit_ms)
        for s in slos.latency
    ]
    out.append(Constraint("error_rate", "error_rate", None, max_error_rate))
    return out


@dataclass(frozen=True)
class Samples:
    """One load point's per-request figures, as the estimate needs them (ms; NaN where none)."""

    load: float
    duration_s: float
    ok: np.ndarray  # bool per request
    n_out: np.ndarray  # output tokens per request (0 where it failed)
    values: dict[str, np.ndarray]  # ttft/tpot/e2e: one value per request
    itl: list[np.ndarray] = field(default_factory=list)  # per request: its chunk gaps

    @property
    def n(self) -> int:
        return int(self.ok.size)

    @classmethod
    def from_records(
        cls, load: float, records: Sequence[RequestRecord], duration_s: float
    ) -> Samples:
        """Per-request figures of one point; ``duration_s`` is its window (probes.metrics)."""
        nan = math.nan

        def ms(values: list[float | None]) -> np.ndarray:
            return np.array([nan if v is None else v for v in values], dtype=float) * MS

        return cls(
            load=float(load),
            duration_s=float(duration_s),
            ok=np.array([r.ok for r in records], dtype=bool),
            n_out=np.array([r.n_out if r.ok else 0 for r in records], dtype=float),
            values={
                "ttft": ms([r.ttft_s if r.ok else None for r in records]),
                "e2e": ms([r.e2e_s if r.ok else None for r in records]),
                "tpot": ms([r.tpot_s if r.ok else None for r in records]),
            },
            itl=[np.asarray(r.itl_s() if r.ok else [], dtype=float) * MS for r in records],
        )


class CapacityEstimate(BaseModel):
    """Where a configuration's SLOs break, from all its points, with a 90 % interval.

    ``censored``: "none" (the crossing lies between two measured loads), "below" (no measured
    load held: the capacity is under the lowest, and the score is 0), "above" (every load held:
    the capacity is at least the highest, and the score is the tokens/s there).
    """

    model_config = ConfigDict(extra="forbid")

    load: float | None  # the crossing; None below the lowest load, the highest load above
    tokens_per_s: float
    low: float  # pessimistic end of the interval (tokens/s)
    high: float | None  # optimistic end; None: unbounded (capacity above every measured load)
    load_low: float | None
    load_high: float | None
    censored: Literal["none", "below", "above"]
    binding: str | None  # the constraint that crosses first
    level: float = 0.0  # the margin level crossed (0: the limit; -0.1: 10 % headroom)
    # The measured loads the crossing lies between (the last that held by the fit, the first
    # that did not) and the fitted tokens/s there: what the points say without interpolating.
    # The bootstrap interval is narrower where the latency curve is steep between them; it
    # sees the sampling noise of the requests, not where between two points the curve bends.
    bracket_load: tuple[float, float] | None = None
    bracket_tokens_per_s: tuple[float, float] | None = None
    n_points: int
    n_requests: int
    resamples: int

    def contains(self, tokens_per_s: float) -> bool:
        hi = math.inf if self.high is None else self.high
        return self.low <= tokens_per_s <= hi

    @property
    def optimistic(self) -> float:
        return math.inf if self.high is None else self.high

    @property
    def most(self) -> float:
        """The most the points allow: the optimistic end, or the tokens/s at the first load
        that did not hold where that is higher. Between two measured loads the latency curve
        may bend anywhere, which the bootstrap over requests does not see."""
        top = self.bracket_tokens_per_s[1] if self.bracket_tokens_per_s else 0.0
        return max(self.optimistic, top)


def _percentile_rows(values: np.ndarray, idx: np.ndarray, pct: float) -> np.ndarray:
    """The percentile of each resample (rows of ``idx``), NaN where a row has no sample."""
    rows = values[idx]
    counts = np.sum(~np.isnan(rows), axis=1)
    out = np.full(rows.shape[0], math.nan)
    has = counts > 0
    if has.any():
        out[has] = np.nanpercentile(rows[has], pct, axis=1)
    return out


def _margins(s: Samples, idx: np.ndarray, c: Constraint) -> np.ndarray:
    """The constraint's margin for each resample of one point (rows of ``idx``)."""
    if c.metric == "error_rate":
        err = (~s.ok[idx]).mean(axis=1)  # failures / requests: exact at the limit
        if c.limit > 0:
            return err / c.limit - 1.0
        return np.where(err > 0, BIG_MARGIN, -1.0)
    assert c.percentile is not None
    if c.metric == "itl":
        pooled = [np.concatenate([s.itl[i] for i in row]) for row in idx]
        stat = np.array(
            [float(np.percentile(g, c.percentile)) if g.size else math.nan for g in pooled]
        )
    else:
        stat = _percentile_rows(s.values[c.metric], idx, c.percentile)
    m = stat / c.limit - 1.0
    return np.where(np.isnan(m), BIG_MARGIN, np.minimum(m, BIG_MARGIN))


def _fit(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Monotone non-decreasing least-squares fit of ``y`` (already sorted by load)."""
    if y.size < 2:
        return y.astype(float)
    return np.asarray(isotonic_regression(y, weights=w, increasing=True).x, dtype=float)


def _crossing(loads: np.ndarray, fitted: np.ndarray, level: float) -> tuple[float, int]:
    """The lowest load where the fitted margin rises above ``level``, and the index of the
    first point over it: -inf below every load, +inf above every load, else interpolated
    between points ``k - 1`` and ``k``."""
    over = np.nonzero(fitted > level)[0]
    if over.size == 0:
        return math.inf, loads.size
    k = int(over[0])
    if k == 0:
        return -math.inf, 0
    l0, l1, m0, m1 = loads[k - 1], loads[k], fitted[k - 1], fitted[k]
    return float(l0 + (level - m0) / (m1 - m0) * (l1 - l0)), k


def _tokens_at(loads: np.ndarray, tput: np.ndarray, load: float) -> float:
    """Fitted output tokens/s at ``load``: interpolated; proportional to load below the lowest
    point; the highest point's above it (nothing is extrapolated upward)."""
    if load <= loads[0]:
        return float(tput[0] * max(load, 0.0) / loads[0]) if loads[0] > 0 else float(tput[0])
    return float(np.interp(load, loads, tput))


@dataclass
class _Eval:
    load: float  # -inf below, +inf above
    binding: str | None
    pessimistic: float
    optimistic: float
    point: float
    bracket: tuple[float, float] | None = None  # measured loads around the crossing
    bracket_tokens: tuple[float, float] | None = None  # fitted tokens/s at those loads


def _log_scale(key: str, m: np.ndarray, level: float) -> tuple[np.ndarray, float]:
    """A constraint's margins and level where its crossing is interpolated: a latency's as
    the logarithm of latency over limit (step 2 of the module docstring), the error rate's as
    they are."""
    if key == "error_rate":
        return m, level
    return np.log(np.maximum(1.0 + m, LOG_FLOOR)), math.log(max(1.0 + level, LOG_FLOOR))


def _evaluate(
    loads: np.ndarray,
    weights: np.ndarray,
    margins: dict[str, np.ndarray],  # constraint key -> margin per point (sorted by load)
    tput: np.ndarray,
    level: float,
) -> _Eval:
    cross, binding, k = math.inf, None, loads.size
    for key, m in margins.items():
        scaled, at = _log_scale(key, m, level)
        x, kx = _crossing(loads, _fit(scaled, weights), at)
        if x < cross:
            cross, binding, k = x, key, kx
    t = _fit(tput, weights)
    if cross == -math.inf:
        return _Eval(cross, binding, 0.0, float(t[0]), 0.0)
    if cross == math.inf:
        top = float(t[-1])
        # A plateau: more load would not raise the score much, whatever the SLOs allow.
        saturated = t.size >= 2 and top < SATURATION_GAIN * float(t[-2])
        return _Eval(cross, None, top, top * SATURATION_GAIN if saturated else math.inf, top)
    v = _tokens_at(loads, t, cross)
    lo, hi = float(loads[k - 1]), float(loads[k])
    return _Eval(cross, binding, v, v, v, (lo, hi), (_tokens_at(loads, t, lo), float(t[k])))


def estimate(
    points: Sequence[Samples],
    cons: Sequence[Constraint],
    *,
    level: float = 0.0,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> CapacityEstimate | None:
    """The capacity estimate of one configuration from all its points (None without points).

    Several points at the same load (a repeat) are pooled into one before fitting.

    Args:
        points: per-request samples of each load point.
        cons: the constraints (``constraints(slos, max_error_rate)``).
        level: the margin level to cross: 0 for the limit, ``-headroom`` for a load that keeps
            every latency that far under its limit.
        resamples: bootstrap resamples for the interval (0: no interval, low = high = point).
        seed: the bootstrap's random seed (the estimate is reproducible).
    """
    pts = _pool([p for p in points if p.n > 0])
    if not pts:
        return None
    pts.sort(key=lambda p: p.load)
    loads = np.array([p.load for p in pts])
    weights = np.array([float(p.n) for p in pts])
    full = [np.arange(p.n)[None, :] for p in pts]

    def margins_for(idx: list[np.ndarray]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for c in cons:
            out[c.key] = np.array([_margins(p, i, c)[0] for p, i in zip(pts, idx, strict=True)])
        return out

    def tput_for(idx: list[np.ndarray]) -> np.ndarray:
        return np.array(
            [
                float(p.n_out[i[0]].sum() / p.duration_s) if p.duration_s > 0 else 0.0
                for p, i in zip(pts, idx, strict=True)
            ]
        )

    def at_level(m: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return m if level == 0.0 else _shift_error_rate(m, level)

    point = _evaluate(loads, weights, at_level(margins_for(full)), tput_for(full), level)
    rng = np.random.default_rng(seed)
    evals: list[_Eval] = []
    if resamples > 0:
        # One (resamples, n) index matrix per point: all resamples of a point at once.
        mats = [rng.integers(0, p.n, size=(resamples, p.n)) for p in pts]
        per_c = {
            c.key: np.stack([_margins(p, m, c) for p, m in zip(pts, mats, strict=True)], axis=1)
            for c in cons
        }
        per_t = np.stack(
            [
                p.n_out[m].sum(axis=1) / p.duration_s if p.duration_s > 0 else np.zeros(resamples)
                for p, m in zip(pts, mats, strict=True)
            ],
            axis=1,
        )
        for b in range(resamples):
            mb = at_level({k: v[b] for k, v in per_c.items()})
            evals.append(_evaluate(loads, weights, mb, per_t[b], level))
    low, high = point.pessimistic, point.optimistic
    load_low = load_high = point.load
    if evals:
        lo_pct, hi_pct = INTERVAL

        # "lower"/"higher": no interpolation between resamples, so unbounded ones (inf) stay
        # unbounded instead of turning into NaN, and the interval errs on the wide side.
        def q(xs: list[float], pct: float, method: str) -> float:
            return float(np.percentile(np.asarray(xs), pct, method=method))  # type: ignore[call-overload]

        low = q([e.pessimistic for e in evals], lo_pct, "lower")
        high = q([e.optimistic for e in evals], hi_pct, "higher")
        crossings = [e.load for e in evals]
        load_low = q(crossings, lo_pct, "lower")
        load_high = q(crossings, hi_pct, "higher")
    censored: Literal["none", "below", "above"] = (
        "below" if point.load == -math.inf else "above" if point.load == math.inf else "none"
    )
    return CapacityEstimate(
        load={"below": None, "above": float(loads[-1]), "none": point.load}[censored],
        tokens_per_s=point.point,
        low=low,
        high=None if not math.isfinite(high) else high,
        load_low=_finite_or_none(load_low),
        load_high=_finite_or_none(load_high),
        censored=censored,
        binding=point.binding,
        level=level,
        bracket_load=point.bracket,
        bracket_tokens_per_s=point.bracket_tokens,
        n_points=len(pts),
        n_requests=int(weights.sum()),
        resamples=resamples,
    )


def _shift_error_rate(m: dict[str, np.ndarray], level: float) -> dict[str, np.ndarray]:
    """Headroom is for latency only: move the error-rate margins so that its own limit (0),
    not ``level``, is what it crosses."""
    return {k: (v + level if k == "error_rate" else v) for k, v in m.items()}


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _pool(points: list[Samples]) -> list[Samples]:
    """Points at the same load become one: their requests together, their windows added."""
    by_load: dict[float, list[Samples]] = {}
    for p in points:
        by_load.setdefault(p.load, []).append(p)
    out = []
    for load, group in by_load.items():
        if len(group) == 1:
            out.append(group[0])
            continue
        out.append(
            Samples(
                load=load,
                duration_s=sum(g.duration_s for g in group),
                ok=np.concatenate([g.ok for g in group]),
                n_out=np.concatenate([g.n_out for g in group]),
                values={k: np.concatenate([g.values[k] for g in group]) for k in group[0].values},
                itl=[a for g in group for a in g.itl],
            )
        )
    return out
