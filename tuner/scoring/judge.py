"""A point's verdict from its records: what a tuning run, a re-score (tuner/runs/rescore.py),
``autotune probe`` and the serving model's simulated points are all judged by.

Open loop, the rate is judged as if it had been held for probes.drift.HORIZON_S, so a queue
still growing when the point ended counts against it; a point's score divides its output
tokens by ``score_window``.
"""

from __future__ import annotations

from dataclasses import dataclass

from probes.drift import project, queue_drift
from probes.metrics import LoadMetrics, Verdict, judge, summarize
from probes.records import RequestRecord
from probes.slo import SLOSet


@dataclass(frozen=True)
class Judged:
    """One point's verdict, and the records the estimate takes its samples from (open loop:
    projected to the drift horizon where the queue was growing; else as measured)."""

    verdict: Verdict
    records: list[RequestRecord]


def judge_point(
    metrics: LoadMetrics,
    records: list[RequestRecord],
    kind: str,
    slos: SLOSet,
    max_error_rate: float,
) -> Judged:
    """A point's verdict. Open loop: judged as if the rate had been held for the drift
    horizon, so a queue still growing when the point ended counts against it (the drift is
    kept on the metrics). What a tuning run and a re-score (tuner/runs/rescore.py) both judge by."""
    if kind == "rate":
        drift = queue_drift(records)
        metrics.ttft_drift_ms_per_s = drift.slope * 1000.0
        metrics.projected_wait_ms = drift.shift_s * 1000.0
        if drift.growing:
            projected = project(records, drift)
            judged = summarize(projected, slos, metrics.client_cpu_pct)
            return Judged(judge(judged, slos, max_error_rate), projected)
    return Judged(judge(metrics, slos, max_error_rate), records)


def score_window(kind: str, x: float, n: int, metrics: LoadMetrics) -> float:
    """The window a point's score divides its output tokens by. Closed loop: the measured
    window. Open loop: the arrival span the rate asked for (n / rate), so the score is the
    rate times the output tokens per request, the output a service gets at that rate when it
    keeps up. The measured window also holds the drain of the last requests, a share that
    depends on how many requests the point sent, so points of different lengths would not
    compare."""
    return metrics.duration_s if kind == "concurrency" else n / x
