"""Plain Python entry points behind the CLI.

from tuner.api import tune
from probes.slo import parse_slos
from probes.workload import parse_workload
report, folder = tune(model="smollm2-135m", slos=parse_slos(["ttft=2s"]),
                      workload=parse_workload("synthetic:input=128,output=64"), trials=4)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probes.slo import SLOSet
from probes.workload import Workload
from tuner.engines import UnknownEngineError
from tuner.engines.endpoint import EndpointError
from tuner.models import ModelError
from tuner.report import Report
from tuner.runner import Progress, Runner, TuneOptions
from tuner.space import SpaceError


class UserError(RuntimeError):
    """A problem the user can fix (model, engine, search space); the message says how."""


def tune(
    *,
    model: str,
    slos: SLOSet,
    workload: Workload,
    progress: Progress | None = None,
    **options: Any,
) -> tuple[Report, Path]:
    """Run a tuning; returns the report and the folder holding it.

    Raises:
        UserError: an unknown model or engine, or an invalid search space.
        KeyboardInterrupt: after the partial report has been written.
    """
    opts = TuneOptions(model=model, slos=slos, workload=workload, **options)
    try:
        runner = Runner(opts, progress) if progress else Runner(opts)
        report = runner.run()
    except (ModelError, UnknownEngineError, SpaceError, EndpointError) as exc:
        raise UserError(str(exc)) from exc
    return report, runner.out
