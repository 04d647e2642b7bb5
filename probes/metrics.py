"""The metric formulas: from raw request records to one load point's summary and SLO verdict.

Definitions (docs/measurement.md; the formula wins over the name):

- TTFT = t_first - t_sched; E2E = t_last - t_sched; client queueing = t_send - t_sched.
- TPOT = (E2E - TTFT) / (n_out - 1), per request where n_out > 1.
- ITL = gaps between consecutive content chunks, pooled over requests.
- Window = from the send of the first measured request to the last completion: the latest
  t_end of a completed request (a failed request that ends later, such as a timeout, does not
  stretch it); every record's t_end only where none completed.
- Output tokens/s = sum of n_out over completed requests / window; requests/s likewise.
- Goodput (requests/s) = requests that meet every latency SLO / window; token goodput = their
  output tokens / window; SLO attainment = share of requests that meet every SLO.
  Per request, TTFT/TPOT/E2E are compared with the limit directly; for ITL, the request's own
  gaps at the SLO's percentile are.
- Over the limit, per latency SLO: completed requests whose TTFT, TPOT or E2E is above the
  limit; for ITL, pooled gaps above it.
- Verdict: a check needs n samples of its metric, with n_over of them over the limit, as
  MLPerf's early-stopping rule asks (probes.slo.requests_needed); fewer is provisional.
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
from probes.slo import LatencySLO, SLOSet, margin, requests_needed

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
    mean_in_flight: float  # achieved concurrency: sum of time in flight inside the window / window
    mean_output_tokens: float | None
    n_out_source: str
    prompt_token_mismatches: int
    client_cpu_pct: float | None = None
    kv_cache_peak_pct: float | None = None
    # Open loop: TTFT's rise per second of arrivals (probes.drift), and the wait added to every
    # request where the verdict judged the rate as if held for the drift horizon (0: as measured)
    ttft_drift_ms_per_s: float | None = None
    projected_wait_ms: float | None = None
    errors: dict[str, int] = {}
    # Samples over each latency SLO's limit, keyed "ttft@p99" (see slo_key)
    over_limit: dict[str, int] = {}
    # Speculative decoding, from the engine's counters over the window (MEASUREMENT.md):
    acceptance_rate: float | None = None  # accepted / draft tokens
    mean_acceptance_length: float | None = None  # 1 + accepted / drafts
    # The configuration's quality against the baseline (set on a trial's metrics, not per point)
    quality: QualityCheck | None = None


def slo_key(slo: LatencySLO) -> str:
    """The key of a latency SLO in LoadMetrics.over_limit, e.g. ``ttft@p99``."""
    return f"{slo.metric}@p{slo.percentile}"


def _samples_s(
    slo: LatencySLO, ok: Sequence[RequestRecord], tpots: list[float], itls: list[float]
) -> list[float]:
    """The samples, in seconds, that a latency SLO's percentile is taken over."""
    if slo.metric == "ttft":
        return [r.ttft_s for r in ok]
    if slo.metric == "e2e":
        return [r.e2e_s for r in ok]
    if slo.metric == "tpot":
        return tpots
    return itls


def meets(rec: RequestRecord, slo: LatencySLO) -> bool:
    """Whether one completed request meets a latency SLO (goodput's test; ITL: the request's
    own percentile of its gaps)."""
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
    """Summarise the measured records of one load point (warm-up requests excluded by caller).

    The window runs from the first send of any record to the last t_end of a completed
    request, so a failed request that ends late (a timeout) does not stretch it; only where no
    request completed does it end at the last t_end of any record. Failed requests still count
    in n_requests, n_failed and error_rate. Mean in flight counts each record's time in flight
    inside the window only.

    Args:
        records: the measured requests of one load point.
        slos: where given, goodput, SLO attainment and over_limit are computed against its
            latency SLOs.
        client_cpu_pct: the load client's CPU use, passed through.

    Returns:
        The load point's metrics.
    """
    ok = [r for r in records if r.ok]
    failed = [r for r in records if not r.ok]
    sends = [r.t_send for r in records if not math.isnan(r.t_send)]
    ends = [r.t_end for r in ok if not math.isnan(r.t_end)] or [
        r.t_end for r in records if not math.isnan(r.t_end)
    ]
    start = min(sends) if sends else 0.0
    end = max(ends) if ends else 0.0
    duration = (end - start) if sends and ends else 0.0
    n_tokens = sum(r.n_out for r in ok)
    tpots = [t for t in (r.tpot_s for r in ok) if t is not None]
    itls = [g for r in ok for g in r.itl_s()]
    latency = slos.latency if slos else ()
    over_limit = {
        slo_key(s): sum(1 for x in _samples_s(s, ok, tpots, itls) if x > s.limit_ms / MS)
        for s in latency
    }
    good = [r for r in ok if all(meets(r, s) for s in latency)]
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
            sum(
                max(0.0, min(r.t_end, end) - r.t_send)
                for r in records
                if not math.isnan(r.t_send + r.t_end)
            )
        ),
        mean_output_tokens=(n_tokens / len(ok)) if ok else None,
        n_out_source=n_out_source if ok else "none",
        prompt_token_mismatches=mism,
        client_cpu_pct=client_cpu_pct,
        errors=dict(Counter((r.error or "no content") for r in failed).most_common(5)),
        over_limit=over_limit,
    )


class SLOCheck(BaseModel):
    """One SLO judged: n samples of its metric, n_over of them over the limit (None where not
    counted: the error-rate check, or metrics summarised without this SLO), n_needed for a
    verdict that is not provisional."""

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
    n_over: int | None = None


class Verdict(BaseModel):
    """Every SLO and the error-rate limit judged on one load point."""

    model_config = ConfigDict(extra="forbid")

    holds: bool
    provisional: bool
    worst_margin: float
    checks: list[SLOCheck]


def judge(metrics: LoadMetrics, slos: SLOSet, max_error_rate: float) -> Verdict:
    """Judge one load point against the latency SLOs and the error-rate limit.

    A latency check's n is the number of samples of its metric (requests for TTFT and E2E,
    requests with n_out > 1 for TPOT, pooled gaps for ITL). It is provisional where
    n < requests_needed(percentile, n_over), MLPerf's early-stopping rule with the samples over
    the limit counted (metrics.over_limit; where summarize did not count them for this SLO,
    the rule with none over). A metric with no samples at all (no completed request, or a TPOT
    SLO where no request produced two tokens) does not hold: margin inf, provisional.

    Args:
        metrics: one load point, from summarize (with the same slos, so over_limit is counted).
        slos: the latency SLOs to judge.
        max_error_rate: the error-rate limit (a share, 0.01 = 1 %); 0 lets no error through.

    Returns:
        Every check, and whether all hold, whether any is provisional, and the worst margin.
    """
    checks: list[SLOCheck] = []
    for slo in slos.latency:
        d: Dist = getattr(metrics, f"{slo.metric}_ms")
        value = d.at(slo.percentile)
        n_over = metrics.over_limit.get(slo_key(slo))
        n_needed = requests_needed(slo.percentile, n_over or 0)
        # No samples: nothing shows the SLO holds, so it does not (inf, like a broken one).
        m = margin(value, slo.limit_ms) if value is not None and d.n > 0 else math.inf
        checks.append(
            SLOCheck(
                metric=slo.metric,
                percentile=slo.percentile,
                limit_ms=slo.limit_ms,
                measured_ms=value,
                margin=m,
                holds=m <= 0,
                n=d.n,
                n_needed=n_needed,
                n_over=n_over,
                provisional=d.n < n_needed,
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
