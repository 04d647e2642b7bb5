"""``autotune predict RUN_DIR --param k=v ...``: a configuration's capacity from a run's
calibration, without starting an engine (tuner/runs/predict_run.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.common import refused
from tuner.options import check_load


def predict_cmd(
    run_dir: Annotated[Path, typer.Argument(help="a finished run's folder: its calibration")],
    param: Annotated[
        list[str],
        typer.Option(help="knob=value of the run's search space (repeatable); others: defaults"),
    ] = [],  # noqa: B006
    workload: Annotated[
        str | None,
        typer.Option(help="synthetic:input=N,output=M[,spread=S] [default: the run's lengths]"),
    ] = None,
    slo: Annotated[
        list[str], typer.Option(help="SLOs as for tuning (repeatable) [default: the run's]")
    ] = [],  # noqa: B006
    load: Annotated[
        str | None, typer.Option(help="rate or concurrency [default: the run's load model]")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object on stdout")
    ] = False,
) -> None:
    """Predict a configuration's capacity from a run's calibration, with its interval and the
    evidence it rests on; no engine is started."""
    from probes.slo import SLOError, parse_slos
    from probes.workload import WorkloadError, parse_workload
    from tuner.runs.predict_run import PredictError, predict_from_run
    from tuner.runs.probe_run import ProbeError, parse_params

    with refused(ValueError):
        if load is not None:
            check_load(load)
    with refused(ProbeError, SLOError, WorkloadError):
        params = parse_params(param)
        wl = parse_workload(workload) if workload else None
        slos = parse_slos(slo) if slo else None
    with refused(PredictError):
        result = predict_from_run(run_dir, params, workload=wl, slos=slos, load_model=load)
    if as_json:
        typer.echo(json.dumps(result.model_dump(mode="json")))
        return
    typer.echo(render(result))


def render(r: object) -> str:
    """The prediction in a few lines."""
    from tuner.runs.predict_run import RunPrediction

    assert isinstance(r, RunPrediction)
    cap = r.capacity
    key = "rate_rps" if r.load_model == "rate" else "concurrency"
    unit = "requests/s" if key == "rate_rps" else "concurrent requests"
    lo, hi = cap["interval"]["output_tokens_per_s"]
    llo, lhi = cap["interval"][key]

    def f(x: float | None, spec: str = ".0f") -> str:
        return "?" if x is None else format(x, spec)

    shown = " ".join(f"{k}={v}" for k, v in r.params.items()) or "the engine's defaults"
    lines = [f"predicted for {shown} ({r.basis}; workload {r.workload}, {r.load_model} load):"]
    if cap[key] is None:
        lines.append("  no load meets the SLOs")
    else:
        lines.append(
            f"  capacity {f(cap[key], '.2f')} {unit} [{f(llo, '.2f')}-{f(lhi, '.2f')}], "
            f"{f(cap['output_tokens_per_s'])} output tokens/s [{f(lo)}-{f(hi)}]"
        )
        a = r.at_capacity
        lines.append(
            f"  there: TTFT p50 {f(a.get('ttft_ms_p50'))} ms, p99 {f(a.get('ttft_ms_p99'))} ms; "
            f"time per output token p50 {f(a.get('tpot_ms_p50'), '.1f')} ms"
        )
    e = r.evidence
    lines.append(
        f"  rests on: build {e.build_used!r}"
        + ("" if e.build_distance == 0 else f" ({e.build_distance} build knob(s) differ)")
    )
    for b in e.measured_builds:
        lines.append(f"    measured build {b.build!r}: trials {b.trials}, {b.requests} requests")
    for name, k in e.scheduler_knobs.items():
        lines.append(f"    {name}: asked {k.asked}, measured {k.measured}")
    err = e.run_model_error.get("capacity")
    if err:
        lines.append(
            f"  the run's own capacity error: median {err['median']:.1%}, worst "
            f"{err['worst']:.1%} over {err['n']:.0f} trials"
        )
    return "\n".join(lines)
