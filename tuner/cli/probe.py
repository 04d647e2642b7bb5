"""``autotune probe``: one load on a server, TTFT and time per token apart; with --diagnose,
where the time goes and which tuning stages can pay off (tuner/runs/probe_run.py)."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.common import fail, refused
from tuner.options import (
    DEFAULT_WORKLOAD,
    PROBE_REQUESTS,
    PROBE_WARMUP,
    RESULTS,
    check_probe,
    default,
)


def probe_cmd(
    model: Annotated[str | None, typer.Option(help="start this model (else --endpoint)")] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(help="a running OpenAI-compatible server's root URL (with or without /v1)"),
    ] = None,
    served_model: Annotated[
        str | None,
        typer.Option(
            help="the model name the endpoint serves [default: what /v1/models lists first]"
        ),
    ] = None,
    engine: Annotated[str, typer.Option(help="engine to start with --model")] = default("engine"),
    param: Annotated[
        list[str],
        typer.Option(help="knob=value of the engine's search space, for --model; repeatable"),
    ] = [],  # noqa: B006
    workload: Annotated[
        str, typer.Option(help="synthetic:input=N,output=M or a .jsonl file")
    ] = DEFAULT_WORKLOAD,
    concurrency: Annotated[int | None, typer.Option(help="closed-loop concurrency")] = None,
    rate: Annotated[float | None, typer.Option(help="open-loop Poisson rate, requests/s")] = None,
    requests: Annotated[int, typer.Option(help="measured requests")] = PROBE_REQUESTS,
    warmup: Annotated[int, typer.Option(help="warm-up requests, discarded")] = PROBE_WARMUP,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="tokenizer folder or id [default: the model folder, else the served name]"
        ),
    ] = None,
    diagnose: Annotated[
        bool,
        typer.Option(
            help="add the sweeps: prefill rate, decode scaling, phase split, roofline, verdict"
        ),
    ] = False,
    slo: Annotated[
        list[str],
        typer.Option(
            help="judge the point against these SLOs (ttft@p99=2s, ...), the percentile's "
            "sample-size rule included; repeatable"
        ),
    ] = [],  # noqa: B006
    grow: Annotated[
        bool,
        typer.Option(
            help="with --slo and --requests at least what the percentile needs (p99: 459 with "
            "none over, 662 with one): where requests over a limit leave the sample short, send "
            "up to --requests more at the same load, as many as it then needs"
        ),
    ] = True,
    json_path: Annotated[Path | None, typer.Option("--json", help="write the result here")] = None,
    output: Annotated[
        Path,
        typer.Option(
            help="where the server log goes (OUTPUT/probe); with --diagnose, a folder "
            "OUTPUT/probe-<time> keeps the result and every sweep's requests, from which "
            "autotune compare predicts this machine"
        ),
    ] = RESULTS,
) -> None:
    """Measure one load on a server, TTFT and time per token apart; --diagnose says where the
    time goes and which tuning stages can pay off."""
    from probes.slo import SLOError, parse_slos
    from probes.workload import WorkloadError, parse_workload

    with refused(ValueError):
        check_probe(
            model=model,
            endpoint=endpoint,
            concurrency=concurrency,
            rate=rate,
            requests=requests,
            warmup=warmup,
            params=param,
        )
    with refused(WorkloadError, SLOError):
        wl = parse_workload(workload)
        slos = parse_slos(slo) if slo else None
    from tuner.report.render_probe import render_probe

    # SIGTERM runs Ctrl-C's clean-up while the command runs; the caller's handler comes back
    # after (a test runner in the same process keeps its own).
    from tuner.run.stop import sigterm
    from tuner.runs.probe_run import ProbeError, parse_params, probe

    # a --diagnose probe's folder is kept whole: one per probe
    out_dir = output / (time.strftime("probe-%Y%m%d-%H%M%S") if diagnose else "probe")
    previous = signal.signal(signal.SIGTERM, sigterm)
    try:
        result = probe(
            workload=wl,
            model=model,
            engine=engine,
            params=parse_params(param),
            endpoint=endpoint,
            served_model=served_model,
            concurrency=concurrency,
            rate_rps=rate,
            requests=requests,
            warmup=warmup,
            tokenizer=tokenizer,
            diagnose=diagnose,
            slos=slos,
            grow=grow,
            out_dir=out_dir,
            progress=lambda m: typer.echo(m, err=True),
        )
    except ProbeError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        typer.echo("autotune: interrupted", err=True)
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    typer.echo(render_probe(result))
    if diagnose:
        typer.echo(
            f"probe: its folder is {out_dir}; autotune compare RUN_DIR {out_dir} predicts this "
            "machine from it",
            err=True,
        )
    if json_path is not None:
        from tuner.report.schema import dump_json, write_atomic

        write_atomic(json_path, dump_json(result))
        typer.echo(f"probe: wrote {json_path}", err=True)
