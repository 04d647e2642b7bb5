"""A recorded run re-scored under other SLOs, without measuring again (``autotune report RUN_DIR
--slo ...``).

Every point of every trial is judged again from its per-request records (the point's
``records_file``) exactly as the run judged it (tuner/scoring/judge.py ``judge_point``: an open-loop
point whose queue was still growing is judged as if its rate had been held), each trial's
capacity is estimated again under the new constraints (tuner/scoring/estimate.py) from the
per-request
samples the run kept of it (its points, and a confirmation the run pooled with them), and its
status follows: ``ok`` where a recorded load meets the new SLOs, ``infeasible`` where
none does. Failed and no-effect trials stay as they were; an abandoned one keeps its status
(its search was cut short) with its new figures.

What the records cannot say is said: a capacity below the lowest load measured, or at least
the highest. The new best is a search figure, never a confirmed one: the re-scored report has
no recommendation, names the best as unconfirmed and gives the command that confirms it (a
fresh start at its capacity less the headroom, with the requests the percentile needs). The run
folder's own report stays as it was; the re-score goes to a folder of its own.
"""

from __future__ import annotations

import math
from functools import partial
from pathlib import Path
from typing import Any

from probes.metrics import summarize
from probes.slo import SLOSet, requests_needed
from tuner.report.schema import Report, Rescored, SLOReport, StageReport, TrialReport
from tuner.run import objective
from tuner.run.quality_paid import may_lead
from tuner.run.scoring import under_capacity
from tuner.scoring.capacity import LoadAxis
from tuner.scoring.estimate import Samples, constraints, estimate
from tuner.scoring.gain import gain
from tuner.scoring.judge import judge_point, score_window
from tuner.storage.records import RecordsMissing, read_records, records_path
from tuner.storage.store import FolderStore

# Figures of a point that come from the engine or the client, not from its records.
CARRIED = ("client_cpu_pct", "kv_cache_peak_pct", "acceptance_rate", "mean_acceptance_length")


class RescoreError(Exception):
    """The run cannot be re-scored (a records file is missing, say)."""


def _axis(report: Report) -> LoadAxis:
    return LoadAxis("rate" if report.load.get("model") == "rate" else "concurrency", 0.01)


def _trial(
    run_dir: Path, report: Report, t: TrialReport, slos: SLOSet, max_error_rate: float
) -> tuple[TrialReport, list[Samples]]:
    """The trial judged and scored again, and its points' samples."""
    if not t.points or t.status in ("failed", "no_effect"):
        return t, []
    axis = _axis(report)
    # The estimate takes every sample the run kept of the trial (a confirmation at one of its
    # loads included, as the run's own estimate did); the points' records where none was kept.
    kept = FolderStore(run_dir).all_samples(t.number)
    derive = len(kept) < len(t.points)
    points, derived = [], []
    for p in t.points:
        try:
            records = read_records(records_path(run_dir, t, p))
        except RecordsMissing as exc:
            raise RescoreError(str(exc)) from None
        x = float(p.load[axis.key])
        metrics = summarize(records, slos, p.metrics.client_cpu_pct)
        metrics = metrics.model_copy(update={k: getattr(p.metrics, k) for k in CARRIED})
        judged = judge_point(metrics, records, axis.kind, slos, max_error_rate)
        if derive:
            window = score_window(axis.kind, x, len(records), metrics)
            derived.append(Samples.from_records(x, judged.records, window))
        points.append(p.model_copy(update={"metrics": metrics, "verdict": judged.verdict}))
    samples = derived if derive else kept
    seed = int(report.options.get("seed", 0)) + t.number
    est = estimate(samples, constraints(slos, max_error_rate), seed=seed)
    update: dict[str, Any] = {"points": points, "estimate": est}
    if est is None or est.censored == "below" or est.load is None:
        update.update(score_tokens_per_s=None, load=None, metrics=points[-1].metrics)
        if t.status != "abandoned":
            update.update(status="infeasible", error="no recorded load meets these SLOs")
    else:
        under = under_capacity(points, axis)
        update.update(
            score_tokens_per_s=est.tokens_per_s,
            load={axis.key: round(est.load, 3)},
            metrics=under.metrics if under else points[-1].metrics,
        )
        if t.status != "abandoned":
            update.update(status="ok", error=None)
    return t.model_copy(update=update), samples


def _across(
    run_dir: Path, report: Report, t: TrialReport, slos: SLOSet, max_error_rate: float
) -> TrialReport:
    """An ``--objective robust`` trial with its measurement on each other workload judged and
    scored again (from its own record, ``trials/<number>/trial.json``)."""
    across = []
    for a in t.across:
        path = run_dir / "trials" / f"{a.number:03d}" / "trial.json"
        try:
            sub = TrialReport.model_validate_json(path.read_bytes())
        except (OSError, ValueError) as exc:
            raise RescoreError(f"{path}: {exc}") from None
        sub, _ = _trial(run_dir, report, sub, slos, max_error_rate)
        across.append(
            a.model_copy(
                update={
                    "status": sub.status,
                    "error": sub.error,
                    "score_tokens_per_s": sub.score_tokens_per_s,
                    "load": sub.load,
                    "gain": None,
                }
            )
        )
    return t.model_copy(update={"across": across, "worst_gain": None})


def _rank(report: Report, base: TrialReport | None, t: TrialReport) -> float:
    """What ranks a re-scored trial, as the run ranked it: its score, or under ``--objective
    robust`` its worst gain (times the baseline's score: tuner/run/state.py ``value``)."""
    if report.objective != "robust":
        return t.score_tokens_per_s or 0.0
    return ((base.score_tokens_per_s if base else None) or 0.0) * (t.worst_gain or 0.0)


def _unanswerable(report: Report, t: TrialReport) -> str | None:
    """What a trial's recorded loads cannot say under the new SLOs."""
    est = t.estimate
    if est is None or not t.points:
        return None
    axis = _axis(report)
    loads = sorted(float(p.load[axis.key]) for p in t.points)
    name = "the baseline" if t.number == 0 else f"trial {t.number}"
    if est.censored == "below":
        return f"{name}: capacity below {axis.label(loads[0])}, the lowest load measured"
    if est.censored == "above":
        return (
            f"{name}: every recorded load held; its capacity is at least "
            f"{axis.label(loads[-1])}, the highest load measured, and may be higher"
        )
    return None


def _stages(report: Report, by_number: dict[int, TrialReport]) -> list[StageReport]:
    """Each stage's winner again: the best of the configuration carried in and its trials."""
    out = []
    carried = by_number.get(0)

    def score(t: TrialReport | None) -> float:
        ok = t is not None and t.status == "ok" and not t.rejected
        return (t.score_tokens_per_s or 0.0) if ok and t is not None else 0.0

    for s in report.stages:
        if s.status == "skipped":
            out.append(s)
            continue
        before = score(carried)
        mine = [by_number[n] for n in s.trials if n in by_number]
        best = max([carried, *mine], key=score) if carried is not None else None
        if best is not None and score(best) > 0:
            carried = best
        out.append(
            s.model_copy(
                update={
                    "best_trial": carried.number if carried else None,
                    "best_params": carried.params if carried else None,
                    "best_score": score(carried) or None,
                    "gain": gain(score(carried), before),
                    "prediction_held": None,
                }
            )
        )
    return out


def confirm_load(
    report: Report, t: TrialReport, samples: list[Samples], slos: SLOSet, max_error_rate: float
) -> float:
    """Where the run's confirmation would measure: the load at which the fit puts every latency
    at (1 - headroom) x its limit; where the records do not bracket it, the capacity less the
    headroom."""
    headroom = float(report.options.get("headroom", 0.1))
    seed = int(report.options.get("seed", 0)) + t.number
    est = estimate(samples, constraints(slos, max_error_rate), level=-headroom, seed=seed)
    if est is not None and est.censored == "none" and est.load is not None:
        return est.load
    assert t.load is not None
    return float(next(iter(t.load.values()))) * (1.0 - headroom)


def confirm_command(report: Report, t: TrialReport, x: float, slos: SLOSet) -> list[str]:
    """``autotune probe`` of the trial's configuration at load ``x``, started fresh, with the
    requests every SLO's percentile needs, judged against the new SLOs."""
    axis = _axis(report)
    load = ["--rate", f"{x:.3g}"] if axis.kind == "rate" else ["--concurrency", str(max(1, int(x)))]
    params = [a for k, v in t.params.items() for a in ("--param", f"{k}={_param(v)}")]
    spec = report.workload.get("spec") or report.workload.get("path") or ""
    # As the run's confirmation: what the percentile needs with none over the limit, +10 %,
    # unless the run asked for more.
    needed = math.ceil(max((requests_needed(s.percentile) for s in slos.latency), default=0) * 1.1)
    n = max(needed, int(report.options.get("confirm_requests") or 0))
    return [
        "autotune", "probe", "--model", report.model, "--engine", report.engine, *params,
        "--workload", str(spec), *load, "--requests", str(n),
        *(a for s in slos.latency for a in ("--slo", _slo(s.metric, s.percentile, s.limit_ms))),
    ]  # fmt: skip


def _param(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _slo(metric: str, percentile: int, limit_ms: float) -> str:
    return f"{metric}@p{percentile}={limit_ms:g}ms"


def rescore(
    run_dir: Path, report: Report, slos: SLOSet, max_error_rate: float | None = None
) -> Report:
    """``report`` (of the run in ``run_dir``) with every trial judged and scored again under
    ``slos``.

    Raises:
        RescoreError: a point's records are missing, or the report has no trials to score.
    """
    if report.baseline is None and not report.trials:
        raise RescoreError(f"{run_dir}: the run measured nothing to re-score")
    err = report.max_error_rate if max_error_rate is None else max_error_rate
    measured = [t for t in [report.baseline, *report.trials] if t is not None]
    scored = [_trial(run_dir, report, t, slos, err) for t in measured]
    again = [t for t, _ in scored]
    samples = {t.number: s for t, s in scored}
    by_number = {t.number: t for t in again}
    base = by_number.get(0)
    # As the run chose: a quantised configuration only where its gain pays its quality cost.
    eligible = [t for t in may_lead(again) if t.score_tokens_per_s]
    if report.objective == "robust":  # each across workload judged again too
        again = [_across(run_dir, report, t, slos, err) for t in again]
        by_number = {t.number: t for t in again}
        base = by_number.get(0)
        objective.settle_all(base, again, len(base.across) if base else 0)
        ranked = {t.number for t in again if t.worst_gain is not None}
        eligible = [by_number[t.number] for t in eligible if t.number in ranked]
    best = max(eligible, key=partial(_rank, report, base), default=None)
    ratio = gain(best.score_tokens_per_s, base.score_tokens_per_s) if best and base else None
    info = Rescored(
        from_slo=report.slo,
        from_max_error_rate=report.max_error_rate,
        from_recommended=report.recommended.from_trial if report.recommended else None,
        best_trial=best.number if best else None,
        best_tokens_per_s=best.score_tokens_per_s if best else None,
        best_load=best.load if best else None,
        gain_vs_baseline=ratio,
        unanswerable=[u for t in again if (u := _unanswerable(report, t))],
        confirm_command=(
            confirm_command(
                report, best, confirm_load(report, best, samples[best.number], slos, err), slos
            )
            if best
            else None
        ),
    )
    return report.model_copy(
        update={
            "slo": [
                SLOReport(metric=s.metric, percentile=s.percentile, limit_ms=s.limit_ms)
                for s in slos.latency
            ],
            "max_error_rate": err,
            "baseline": by_number.get(0) if report.baseline else None,
            "trials": [t for t in again if t.number != 0],
            "stages": _stages(report, by_number),
            "recommended": None,
            "baseline_confirmation": None,
            "held_out": [],  # the recommendation's check, judged under the run's SLOs
            "exactness": report.exactness,
            "rescored": info,
        }
    )


def folder_name(slos: SLOSet) -> str:
    """``rescored-ttft-p90-1000ms``: where a re-score of these SLOs goes in the run folder."""
    parts = [f"{s.metric}-p{s.percentile}-{s.limit_ms:g}ms" for s in slos.latency]
    return "rescored-" + "-".join(parts).replace(".", "_")
