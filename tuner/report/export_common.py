"""What every deployment file of the recommendation shares: the trial it was measured on, and
the header that says what was measured where (tuner/report/exports.py writes the files)."""

from __future__ import annotations

from tuner.report.schema import Report, TrialReport
from tuner.report.text import load_text

PORT = 8000


def recommended_trial(report: Report) -> TrialReport | None:
    """The trial the recommendation was measured on (0: the baseline)."""
    rec = report.recommended
    if rec is None:
        return None
    trials = [report.baseline, *report.trials] if report.baseline else report.trials
    return next((t for t in trials if t is not None and t.number == rec.from_trial), None)


def header(report: Report, trial: TrialReport) -> list[str]:
    rec = report.recommended
    assert rec is not None
    claim = f"{rec.metrics.output_tokens_per_s:.1f} output tok/s at {load_text(rec.load)}"
    slos = ", ".join(f"p{s.percentile} {s.metric} <= {s.limit_ms:g} ms" for s in report.slo)
    verdict = "met" if rec.meets_slo else "NOT met"
    return [
        f"autotune {report.run_id}: the recommended configuration (trial {trial.number}, "
        f"{trial.stage})",
        f"measured on {report.hardware.hostname} ({report.hardware.label}), "
        f"{report.engine_version}",
        f"claim: {claim}, {rec.n_requests} requests; SLOs {slos}: {verdict}",
        "thread bindings, paths and memory sizes are that machine's: check them on another",
    ]


def comment(lines: list[str]) -> str:
    return "".join(f"# {line}\n" for line in lines)
