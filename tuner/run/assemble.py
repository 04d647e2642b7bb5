"""The report (report.json, report.md, report.html, deployment files), assembled from the
run's state and written atomically in each of its formats (tuner/report/formats.py).

The state is what the store holds (every finished trial is checkpointed before the next
starts; a resumed run restores it from there), so an interrupted, resumed run assembles the
same report as an uninterrupted one, timings aside.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Literal

from probes.describe import describe, sent
from probes.exactness import Exactness
from probes.records import RequestRecord
from probes.workload import FileWorkload, SyntheticWorkload, TraceWorkload
from tuner.report.formats import write_reports
from tuner.report.model_errors import errors_by_basis, model_errors
from tuner.report.schema import Report, ServingModelReport, SLOReport, Timing
from tuner.run import objective
from tuner.run.state import RunState
from tuner.servemodel.spreads import PROBE_SPREAD, RUN_TO_RUN, TRANSFER_SPREAD
from tuner.storage.records import RecordsMissing, read_records, records_path

RunStatus = Literal["complete", "interrupted", "failed"]


def report_exactness(st: RunState) -> Exactness | None:
    """The recommended configuration's exactness check, or, where the recommendation has no
    speculative decoding, the best speculative configuration's (with why it lost)."""
    if st.recommended is not None:
        rec = next((t for t in st.trials if t.number == st.recommended.from_trial), None)
        if rec is not None and rec.exactness is not None:
            return rec.exactness
    spec = [t for t in st.trials if t.exactness is not None]
    if not spec:
        return None
    top = max(spec, key=lambda t: (t.status == "ok", t.score_tokens_per_s or 0.0))
    assert top.exactness is not None
    why = top.rejected or (
        f"{top.status}: {top.error}" if top.error else "it was not the fastest configuration"
    )
    return top.exactness.model_copy(
        update={"reason": f"trial {top.number}, not recommended: {why}. {top.exactness.reason}"}
    )


def _workload(st: RunState) -> dict[str, Any]:
    """The workload, and what the run's points sent (probes.describe: the kind, the spec, the
    parameters, the lengths' mean, p50 and p99 and the prefix share, from every search point's
    records on disk, so a resumed run describes what its earlier part sent too). A file keeps
    its path and size, and no spec: runs compare files by name and size (compare_runs)."""
    wl = st.opts.workload
    out = describe(wl, sent(_sent_records(st)))
    if isinstance(wl, SyntheticWorkload):
        out.update(input_len=wl.input_len, output_len=wl.output_len, spread=wl.spread)
    elif isinstance(wl, FileWorkload):
        del out["spec"]
        out.update(path=wl.path, n_items=len(wl.items))
    elif isinstance(wl, TraceWorkload) and st.axis.kind == "rate" and wl.rate_rps:
        # The load axis stays requests/s: a rate R replays the trace at time scale R / own.
        out["time_scale_per_rps"] = 1.0 / wl.rate_rps
    return out


def _sent_records(st: RunState) -> list[RequestRecord]:
    """The records of every point the run measured (the baseline's and the trials'; a point
    whose records file is gone, or another worker's, is left out)."""
    out: list[RequestRecord] = []
    for t in st.measured():
        for p in t.points:
            try:
                out += read_records(records_path(st.out, t, p))
            except (RecordsMissing, OSError, ValueError, TypeError):
                continue
    return out


def assemble(
    st: RunState, status: RunStatus, error: str | None, endpoint: str | None = None
) -> Report:
    """The report of the run as it stands."""
    objective.settle(st)  # --objective robust: the gains over the baseline as it stands
    opts, c = st.opts, st.clock
    wall = c.elapsed()
    return Report(
        run_id=st.run_id,
        status=status,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=opts.command,
        model=opts.model or st.model_path,
        model_path=st.model_path,
        engine=st.engine.name,
        engine_version=st.engine.version(),
        endpoint=endpoint,
        hardware=st.hw,
        workload=_workload(st),
        load={"model": st.axis.kind, "unit": st.axis.unit},
        salt=st.salt,
        slo=[
            SLOReport(metric=s.metric, percentile=s.percentile, limit_ms=s.limit_ms)
            for s in opts.slos.latency
        ],
        quality_slo={"max_degradation_pct": st.quality_limit, "default": opts.slos.quality is None},
        max_error_rate=opts.max_error_rate,
        options=opts.model_dump(
            mode="json",
            # the held-out workloads are described in ``held_out`` (a trace's rows not twice)
            exclude={"slos", "workload", "check_workloads", "command", "model", "engine"},
        ),
        probe=st.diagnosis,
        knob_defaults={k.name: k.default for k in st.space.knobs().values()} if st.space else {},
        baseline=st.baseline,
        baseline_note=(st.space.baseline.reason if st.space else "") or "the engine's own defaults",
        trials=st.trials,
        stages=st.stage_reports,
        recommended=st.recommended,
        baseline_confirmation=st.baseline_confirmed,
        comparisons=st.comparisons,
        exactness=report_exactness(st),
        timing=Timing(
            wall_s=wall,
            engine_starts=c.engine_starts,
            startup_s=c.startup_s,
            warmup_s=c.warmup_s,
            measure_s=c.measure_s,
            other_s=max(0.0, wall - c.startup_s - c.warmup_s - c.measure_s),
        ),
        notes=st.notes,
        error=error,
        screened=st.screened,
        serving_model=serving_model_report(st),
        held_out=st.held_out,
        objective=st.opts.objective,
    )


def serving_model_report(st: RunState) -> ServingModelReport | None:
    """What the serving model screened and its error, where it predicted anything."""
    predicted = [t.number for t in st.measured() if t.predicted is not None]
    if not st.screened and not predicted:
        return None
    return ServingModelReport(
        screened=st.screened,
        predicted_trials=predicted,
        errors=model_errors(st.measured()),
        errors_by_basis=errors_by_basis(st.measured()),
        run_to_run_spread=RUN_TO_RUN,
        transfer_spread=TRANSFER_SPREAD,
        probe_spread=PROBE_SPREAD,
    )


def write_report(
    st: RunState, status: RunStatus, error: str | None, endpoint: str | None = None
) -> Report:
    """Assemble the report and write it into the run folder in every format (report.json,
    report.md, report.html and the deployment files)."""
    report = assemble(st, status, error, endpoint)
    write_reports(report, st.out)
    return report
