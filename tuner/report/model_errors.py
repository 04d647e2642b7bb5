"""The serving model's published error: its predictions against the measurements that
followed them, per metric, over a run's trials (report.json ``serving_model.errors``)."""

from __future__ import annotations

import statistics

from tuner.report.schema import TrialReport


def model_errors(
    trials: list[TrialReport], bases: tuple[str, ...] | None = None
) -> dict[str, dict[str, float]]:
    """Median and worst |predicted / measured - 1| per metric over trials with both (with
    ``bases``, only predictions of those bases)."""
    pairs: dict[str, list[float]] = {"capacity": [], "ttft_p99": [], "tpot_p50": []}
    for t in trials:
        p, m = t.predicted, t.metrics
        if p is None or (bases is not None and p.basis not in bases):
            continue
        if t.status == "ok" and t.score_tokens_per_s:
            pairs["capacity"].append(abs(p.tokens_per_s / t.score_tokens_per_s - 1.0))
        if m is not None and p.ttft_ms_p99_at_load and m.ttft_ms.p99:
            pairs["ttft_p99"].append(abs(p.ttft_ms_p99_at_load / m.ttft_ms.p99 - 1.0))
        if m is not None and p.tpot_ms_p50_at_load and m.tpot_ms.p50:
            pairs["tpot_p50"].append(abs(p.tpot_ms_p50_at_load / m.tpot_ms.p50 - 1.0))
    return {
        k: {"median": statistics.median(v), "worst": max(v), "n": float(len(v))}
        for k, v in pairs.items()
        if v
    }


def errors_by_basis(trials: list[TrialReport]) -> dict[str, dict[str, dict[str, float]]]:
    """``model_errors`` per basis of prediction (calibrated, transferred, probe, roofline)."""
    found = sorted({t.predicted.basis for t in trials if t.predicted is not None})
    return {b: e for b in found if (e := model_errors(trials, (b,)))}
