"""Plain Python entry points behind the CLI.

from tuner.api import tune
from probes.slo import parse_slos
from probes.workload import parse_workload
from tuner.options import TuneOptions
report, folder = tune(TuneOptions(model="smollm2-135m", slos=parse_slos(["ttft=2s"]),
                      workload=parse_workload("synthetic:input=128,output=64"), trials=4))
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from probes.workload import WorkloadError
from tuner.engines import UnknownEngineError
from tuner.engines.endpoint import EndpointError
from tuner.engines.models import ModelError
from tuner.options import TuneOptions
from tuner.report.formats import FORMATS, write_reports
from tuner.report.schema import Report
from tuner.run.runner import Progress, Runner
from tuner.spaces.space import SpaceError
from tuner.storage.shared import SharedError
from tuner.storage.store import FolderStore, StoreError

# What a run raises for input the user can fix (the message says how): one line, exit 2.
USER_ERRORS = (ModelError, UnknownEngineError, SpaceError, EndpointError, WorkloadError)


class UserError(RuntimeError):
    """A problem the user can fix (model, engine, search space); the message says how."""


def tune(opts: TuneOptions, progress: Progress | None = None) -> tuple[Report, Path]:
    """Run a tuning; returns the report and the folder holding it. ``TuneOptions`` has already
    checked its values (pydantic's ValidationError where one is out of range).

    Raises:
        UserError: an unknown model or engine, or an invalid search space.
        KeyboardInterrupt: after the partial report has been written.
    """
    try:
        runner = Runner(opts, progress) if progress else Runner(opts)
        report = runner.run()
    except (*USER_ERRORS, SharedError) as exc:
        raise UserError(str(exc)) from exc
    return report, runner.out


def resume(run_dir: Path, progress: Progress | None = None) -> tuple[Report, Path]:
    """Continue an interrupted run in its own folder, with the options it was started with:
    finished trials are kept, not measured again (tuner/run/checkpoint.py).

    Raises:
        UserError: not a run folder, unreadable, or already complete; or as ``tune``.
    """
    from pydantic import ValidationError

    from tuner.options import problem

    try:
        meta = FolderStore(run_dir).load_meta()
    except StoreError as exc:
        raise UserError(str(exc)) from exc
    if meta.done:
        raise UserError(f"run {meta.run_id} is complete: nothing to resume ({run_dir})")
    if meta.options.get("study"):
        raise UserError(
            f"run {meta.run_id} was a worker of shared study {meta.options['study']}: its "
            "trials are in the shared storage; start a worker again with --storage URL --study "
            "NAME instead"
        )
    try:
        opts = TuneOptions.model_validate(meta.options)
    except ValidationError as exc:
        raise UserError(f"{run_dir}/run.json: {problem(exc)}") from exc
    try:
        runner = (
            Runner(opts, progress, resume=run_dir) if progress else Runner(opts, resume=run_dir)
        )
        report = runner.run()
    except (*USER_ERRORS, StoreError) as exc:
        raise UserError(str(exc)) from exc
    return report, runner.out


def shared_report(storage: str, study: str, out_dir: Path) -> tuple[Report, Path]:
    """The report of a shared study (``autotune report --storage URL --study NAME``), as its
    confirming worker assembled it, written to ``out_dir``.

    Raises:
        UserError: the storage cannot be opened, or the study has no confirmation yet.
    """
    from tuner.storage.shared import SharedStudy

    try:
        shared = SharedStudy(storage, study)
    except SharedError as exc:
        raise UserError(str(exc)) from exc
    doc = shared.result("confirm")
    if doc is None:
        n = len(shared.records())
        raise UserError(
            f"study {study}: {n} trials finished, no confirmation yet (the workers are still "
            "at it, or stopped before it)"
        )
    report = Report.model_validate(doc["report"])
    folder = out_dir / study
    write_reports(report, folder)
    return report, folder


def render_run(
    run_dir: Path,
    slo: list[str],
    max_error_rate: float | None = None,
    formats: Collection[str] = tuple(FORMATS),
) -> tuple[Report, Path]:
    """A run's report written again from its report.json (``autotune report RUN_DIR``); with
    ``slo``, every recorded trial re-scored under those SLOs (tuner/runs/rescore.py) into a folder
    of
    its own inside the run's, so the run's own report stays as it was.

    Raises:
        UserError: not a run folder, bad SLOs, or records missing.
    """
    from pydantic import ValidationError

    from probes.slo import SLOError, parse_slos
    from tuner.runs.rescore import RescoreError, folder_name, rescore

    path = run_dir / "report.json"
    try:
        report = Report.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise UserError(f"{run_dir} is not an autotune run folder (no report.json)") from None
    except (OSError, ValidationError) as exc:
        raise UserError(f"{path} cannot be read: {str(exc).splitlines()[0]}") from None
    if not slo:
        write_reports(report, run_dir, formats)
        return report, run_dir
    try:
        slos = parse_slos(slo)
        if not slos.latency:
            raise UserError("--slo: give a latency SLO to re-score under (quality needs a run)")
        again = rescore(run_dir, report, slos, max_error_rate)
    except (SLOError, RescoreError) as exc:
        raise UserError(str(exc)) from exc
    folder = run_dir / folder_name(slos)
    write_reports(again, folder, formats)
    return again, folder
