"""Service-level objectives: parsing `--slo` text and judging measurements against it.

Semantics (docs/measurement.md):

- ``ttft=200ms`` means p99 of TTFT <= 200 ms; ``ttft@p95=200ms`` overrides the percentile.
- Latency metrics: ``ttft``, ``tpot``, ``itl``, ``e2e``; units ``ms`` or ``s``.
- ``quality=1%``: the quality metric may degrade by at most 1 % against the unquantised
  baseline (no percentile).
- Several SLOs: comma-separated, or the option repeated.
- Constraint margin = measured / limit - 1 (<= 0 holds), Optuna's sign rule.
- Requests a verdict needs: MLPerf's early-stopping rule (`requests_needed`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict
from scipy.stats import binom

LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e")
PERCENTILES = (50, 90, 95, 99)
DEFAULT_PERCENTILE = 99


def requests_needed(percentile: int, n_over: int = 0, confidence: float = 0.99) -> int:
    """Requests a p<percentile> verdict needs: MLPerf's early-stopping rule.

    The smallest n with ``binom.cdf(n_over, n, 1 - percentile / 100) <= 1 - confidence``: a
    one-sided binomial test that, with n_over of n samples over the limit, the true share over
    the limit is below 1 - p/100 at the given confidence. At 99 % confidence p99 needs 459
    samples with none over the limit and 662 with one; p95 needs 90, p90 44, p50 7.

    The cdf falls as n grows, so n is found by doubling, then bisection.

    Args:
        percentile: the SLO's percentile, strictly between 0 and 100.
        n_over: samples seen over the limit (0 or more).
        confidence: the test's confidence, strictly between 0 and 1.

    Returns:
        The number of samples needed.

    Raises:
        ValueError: on n_over < 0, or a percentile or confidence out of range.
    """
    if not 0 < percentile < 100:
        raise ValueError(f"percentile {percentile} is out of range; use one in (0, 100)")
    if n_over < 0:
        raise ValueError(f"n_over {n_over} is negative; count the samples over the limit")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} is out of range; use one in (0, 1)")
    q = 1.0 - percentile / 100.0
    alpha = 1.0 - confidence

    def passes(n: int) -> bool:
        return float(binom.cdf(n_over, n, q)) <= alpha

    # With n <= n_over every sample could be over the limit: cdf is 1, never enough.
    lo, hi = n_over, n_over + 1
    while not passes(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # passes(hi) and not passes(lo)
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid
    return hi


# The early-stopping rule at 99 % confidence with no request over the limit, per supported
# percentile: what a verdict needs before it is more than provisional.
REQUESTS_FOR_VERDICT = {p: requests_needed(p) for p in PERCENTILES}

_LATENCY_RE = re.compile(
    r"^(?P<metric>[a-z0-9]+)(?:@p(?P<pct>\d+))?=(?P<value>\d+(?:\.\d+)?)(?P<unit>ms|s)$"
)
_QUALITY_RE = re.compile(r"^quality=(?P<value>\d+(?:\.\d+)?)%$")


class SLOError(ValueError):
    """A malformed SLO; the message names the bad text and the accepted forms."""


class LatencySLO(BaseModel):
    """p<percentile> of a latency metric must stay at or under limit_ms."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Literal["ttft", "tpot", "itl", "e2e"]
    percentile: int = DEFAULT_PERCENTILE
    limit_ms: float

    @property
    def label(self) -> str:
        return f"p{self.percentile} {self.metric.upper()} <= {self.limit_ms:g} ms"

    @property
    def requests_needed(self) -> int:
        """Requests a non-provisional verdict needs with none over the limit."""
        return REQUESTS_FOR_VERDICT[self.percentile]


class QualitySLO(BaseModel):
    """The quality metric may degrade by at most max_degradation_pct against the baseline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: Literal["quality"] = "quality"
    max_degradation_pct: float

    @property
    def label(self) -> str:
        return f"quality degradation <= {self.max_degradation_pct:g} %"


class SLOSet(BaseModel):
    """All objectives of one run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    latency: tuple[LatencySLO, ...] = ()
    quality: QualitySLO | None = None

    @property
    def labels(self) -> list[str]:
        out = [s.label for s in self.latency]
        if self.quality is not None:
            out.append(self.quality.label)
        return out

    @property
    def requests_needed(self) -> int:
        """Requests a non-provisional verdict on every latency SLO needs."""
        return max((s.requests_needed for s in self.latency), default=REQUESTS_FOR_VERDICT[50])


_FORMS = "forms: ttft=200ms, tpot@p95=50ms, e2e=2s, quality=1% (metrics: ttft, tpot, itl, e2e)"


def parse_slo_item(text: str) -> LatencySLO | QualitySLO:
    """Parse one objective such as ``ttft@p95=200ms`` or ``quality=1%``.

    Raises:
        SLOError: with the offending text and the accepted forms.
    """
    item = text.strip().lower().replace(" ", "")
    if not item:
        raise SLOError(f"empty SLO; {_FORMS}")
    q = _QUALITY_RE.match(item)
    if q:
        return QualitySLO(max_degradation_pct=float(q["value"]))
    if item.startswith("quality"):
        raise SLOError(f"SLO {text!r}: quality takes a percentage such as quality=1%")
    m = _LATENCY_RE.match(item)
    if not m:
        raise SLOError(f"SLO {text!r} is malformed; {_FORMS}")
    metric = m["metric"]
    if metric not in LATENCY_METRICS:
        raise SLOError(
            f"SLO {text!r}: metric {metric!r} is unknown; known: {', '.join(LATENCY_METRICS)}, "
            "quality"
        )
    pct = int(m["pct"]) if m["pct"] else DEFAULT_PERCENTILE
    if pct not in PERCENTILES:
        raise SLOError(
            f"SLO {text!r}: percentile p{pct} is not supported; use one of "
            + ", ".join(f"p{p}" for p in PERCENTILES)
        )
    value = float(m["value"])
    limit_ms = value * 1000.0 if m["unit"] == "s" else value
    if limit_ms <= 0:
        raise SLOError(f"SLO {text!r}: the limit must be above zero")
    return LatencySLO(metric=metric, percentile=pct, limit_ms=limit_ms)


def parse_slos(texts: Iterable[str]) -> SLOSet:
    """Parse every ``--slo`` value (each may hold several, comma-separated).

    Raises:
        SLOError: on a malformed item or the same metric and percentile given twice.
    """
    latency: list[LatencySLO] = []
    quality: QualitySLO | None = None
    for text in texts:
        for part in text.split(","):
            if not part.strip():
                continue
            slo = parse_slo_item(part)
            if isinstance(slo, QualitySLO):
                if quality is not None:
                    raise SLOError("quality SLO given twice")
                quality = slo
                continue
            if any(s.metric == slo.metric and s.percentile == slo.percentile for s in latency):
                raise SLOError(f"SLO for p{slo.percentile} {slo.metric} given twice")
            latency.append(slo)
    if not latency and quality is None:
        raise SLOError(f"no SLO given; {_FORMS}")
    return SLOSet(latency=tuple(latency), quality=quality)


def margin(measured: float, limit: float) -> float:
    """Constraint margin = measured / limit - 1; <= 0 means the objective holds."""
    return measured / limit - 1.0
