"""The metric formulas: from raw request records to one load point's summary and SLO verdict.

Definitions (../shared/MEASUREMENT.md; the formula wins over the name):

- TTFT = t_first - t_sched; E2E = t_last - t_sched; client queueing = t_send - t_sched.
- TPOT = (E2E - TTFT) / (n_out - 1), per request where n_out > 1.
- ITL = gaps between consecutive content chunks, pooled over requests.
- Window = from the send of the first measured request to the last completion.
- Output tokens/s = sum of n_out over completed requests / window; requests/s likewise.
- Goodput (requests/s) = requests that meet every latency SLO / window; token goodput = their
  output tokens / window; SLO attainment = share of requests that meet every SLO.
  Per request, TTFT/TPOT/E2E are compared with the limit directly; for ITL, the request's own
  gaps at the SLO's percentile are.
- Percentiles: linear interpolation (numpy's default). Raw records are in seconds, summaries in
  milliseconds; the conversion happens here only.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from probes.quality import QualityCheck
from probes.records import RequestRecord
from probes.slo import LatencySLO, SLOSet, margin

MS = 1000.0


class Dist(BaseModel):
    """Mean and percentiles of one latency metric, in ms; None where there were no samples."""

    model_config = ConfigDict(extra="forbid")

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None
    n: int = 0

    def at(self, percentile: int) -> float | None:
        return getattr(self, f"p{percentile}")


def dist_ms(samples_s: Sequence[float]) -> Dist:
    """Summarise samples given in seconds as a distribution in ms (linear percentiles)."""
    if len(samples_s) == 0:
        return Dist()
    a = np.asarray(samples_s, dtype=float) * MS
    p50, p90, p95, p99 = np.percentile(a, [50, 90, 95, 99])
    return Dist(
        mean=float(a.mean()),
        p50=float(p50),
        p90=float(p90),
        p95=float(p95),
        p99=float(p99),
        n=int(a.size),
    )


class LoadMetrics(BaseModel):
    """One load point's measurement, as report.json and `autotune probe --json` carry it."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: Dist
    tpot_ms: Dist
    itl_ms: Dist
    e2e_ms: Dist
    queue_ms: Dist
    output_tokens_per_s: float
    requests_per_s: float
    goodput_rps: float
    token_goodput_per_s: float
    slo_attainment: float | None
    n_requests: int
    n_completed: int
    n_failed: int
    error_rate: float
    duration_s: float
    mean_in_flight: float  # achieved concurrency: sum of (t_end - t_send) / window
    mean_output_tokens: float | None
    n_out_source: str
    prompt_token_mismatches: int
    client_cpu_pct: float | None = None
    kv_cache_peak_pct: float | None = None
    errors: dict[str, int] = {}
    # Speculative decoding, from the engine's counters over the window (MEASUREMENT.md):
    acceptance_rate: float | None = None  # accepted / draft tokens
    mean_acceptance_length: float | None = None  # 1 + accepted / drafts
    # The configuration's quality against the baseline (set on a trial's metrics, not per point)
    quality: QualityCheck | None = None


def _meets(rec: RequestRecord, slo: LatencySLO) -> bool:
    limit_s = slo.limit_ms / MS
    if slo.metric == "ttft":
        return rec.ttft_s <= limit_s
    if slo.metric == "e2e":
        return rec.e2e_s <= limit_s
    if slo.metric == "tpot":
        tpot = rec.tpot_s
        return tpot is None or tpot <= limit_s
    gaps = rec.itl_s()
    return not gaps or float(np.percentile(gaps, slo.percentile)) <= limit_s


def summarize(
    records: Sequence[RequestRecord],
    slos: SLOSet | None = None,
    client_cpu_pct: float | None = None,
) -> LoadMetrics:
    """Summarise the measured records of one load point (warm-up requests excluded by caller)."""
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    sends = [r.t_send for r in records if not math.isnan(r.t_send)]
    ends = [r.t_end for r in records if not math.isnan(r.t_end)]
    duration = (max(ends) - min(sends)) if sends and ends else 0.0
    n_tokens = sum(r.n_out for r in ok)
    tpots = [t for t in (r.tpot_s for r in ok) if t is not None]
    itls = [g for r in ok for g in r.itl_s()]
    latency = slos.latency if slos else ()
    good = [r for r in ok if all(_meets(r, s) for s in latency)]
    sources = {r.n_out_from_usage for r in ok}
    n_out_source = "usage" if sources == {True} else "chunks" if sources == {False} else "mixed"
    mism = sum(
        1
        for r in ok
        if r.n_prompt is not None
        and r.n_prompt_expected is not None
        and r.n_prompt != r.n_prompt_expected
    )
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    return LoadMetrics(
        ttft_ms=dist_ms([r.ttft_s for r in ok]),
        tpot_ms=dist_ms(tpots),
        itl_ms=dist_ms(itls),
        e2e_ms=dist_ms([r.e2e_s for r in ok]),
        queue_ms=dist_ms([r.queue_s for r in records if not math.isnan(r.t_send)]),
        output_tokens_per_s=per_s(n_tokens),
        requests_per_s=per_s(len(ok)),
        goodput_rps=per_s(len(good)),
        token_goodput_per_s=per_s(sum(r.n_out for r in good)),
        slo_attainment=(len(good) / len(records)) if records and latency else None,
        n_requests=len(records),
        n_completed=len(ok),
        n_failed=len(failed),
        error_rate=(len(failed) / len(records)) if records else 0.0,
        duration_s=duration,
        mean_in_flight=per_s(
            sum(r.t_end - r.t_send for r in records if not math.isnan(r.t_send + r.t_end))
        ),
        mean_output_tokens=(n_tokens / len(ok)) if ok else None,
        n_out_source=n_out_source if ok else "none",
        prompt_token_mismatches=mism,
        client_cpu_pct=client_cpu_pct,
        errors=dict(Counter((r.error or "no content") for r in failed).most_common(5)),
    )


class SLOCheck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str
    percentile: int | None
    limit_ms: float | None
    measured_ms: float | None
    margin: float
    holds: bool
    provisional: bool
    n: int
    n_needed: int


class Verdict(BaseModel):
    """Every SLO and the error-rate limit judged on one load point."""

    model_config = ConfigDict(extra="forbid")

    holds: bool
    provisional: bool
    worst_margin: float
    checks: list[SLOCheck]


def judge(metrics: LoadMetrics, slos: SLOSet, max_error_rate: float) -> Verdict:
    """Judge one load point against the latency SLOs and the error-rate limit.

    A check with fewer samples than MLPerf's early-stopping rule needs for its percentile is
    marked provisional. A point with no completed request fails every latency SLO.
    """
    checks: list[SLOCheck] = []
    for slo in slos.latency:
        d: Dist = getattr(metrics, f"{slo.metric}_ms")
        value = d.at(slo.percentile)
        if value is not None:
            m = margin(value, slo.limit_ms)
        else:
            # No samples of the metric although requests completed (e.g. one-token outputs have
            # no TPOT): nothing broke it, as the per-request goodput check also says.
            m = -1.0 if metrics.n_completed > 0 else math.inf
        checks.append(
            SLOCheck(
                metric=slo.metric,
                percentile=slo.percentile,
                limit_ms=slo.limit_ms,
                measured_ms=value,
                margin=m,
                holds=m <= 0,
                n=metrics.n_completed,
                n_needed=slo.requests_needed,
                provisional=metrics.n_completed < slo.requests_needed,
            )
        )
    # The error rate is a hard constraint of its own. With a zero limit any error breaks it.
    err_margin = (
        margin(metrics.error_rate, max_error_rate)
        if max_error_rate > 0
        else (math.inf if metrics.error_rate > 0 else -1.0)
    )
    checks.append(
        SLOCheck(
            metric="error_rate",
            percentile=None,
            limit_ms=None,
            measured_ms=None,
            margin=err_margin,
            holds=err_margin <= 0,
            n=metrics.n_requests,
            n_needed=0,
            provisional=False,
        )
    )
    return Verdict(
        holds=all(c.holds for c in checks),
        provisional=any(c.provisional for c in checks),
        worst_margin=max(c.margin for c in checks),
        checks=checks,
    )
