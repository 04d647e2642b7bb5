"""A RunState for tests of the steps that read it (sizing, the guide): no engine, an in-memory
store, a model folder with the config.json given, and the clock and budget given."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from probes.slo import parse_slos
from probes.workload import parse_workload
from tuner.engines.hardware import Hardware
from tuner.options import TuneOptions
from tuner.run.budget import Budget, PhaseTimes
from tuner.run.gates import QualityGate
from tuner.run.state import RunState
from tuner.scoring.capacity import LoadAxis
from tuner.scoring.estimate import constraints
from tuner.storage.store import MemoryStore


def run_state(
    tmp_path: Path,
    *,
    budget_s: float | None = None,
    now: Callable[[], float] | None = None,
    model_config: dict[str, Any] | None = None,
) -> RunState:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(model_config or {}))
    opts = TuneOptions(
        model=str(model),
        slos=parse_slos(["ttft=2s"]),
        workload=parse_workload("synthetic:input=128,output=64"),
        time_budget_s=budget_s,
        output_dir=tmp_path / "results",
    )
    clock = PhaseTimes(now=now) if now is not None else PhaseTimes()
    budget = Budget(budget_s, now=now, start=0.0) if now is not None else Budget(budget_s)
    return RunState(
        opts=opts,
        say=lambda msg: None,
        engine=None,  # type: ignore[arg-type]  # not started here
        hw=Hardware(hostname="h", cpu_model="c", cpu_count=2, memory_gib=1.0),
        run_id="r",
        out=tmp_path / "run",
        store=MemoryStore(),
        salt="s",
        rng=random.Random(0),
        axis=LoadAxis("rate", minimum=0.01, maximum=100.0),
        cons=constraints(opts.slos, opts.max_error_rate),
        clock=clock,
        budget=budget,
        quality=QualityGate(1.0),
    )
