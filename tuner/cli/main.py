"""The command line (typer, thin): parses, and hands over to tuner.api. Its defaults and every
check on the values it parses are tuner/options/'s; a check's error is its one line here.

Tuning is the root command:

    autotune --model smollm2-135m --slo ttft=2s --workload synthetic:input=128,output=64

Bad input is one clear line on stderr and exit code 2; an interrupted run exits 130 after
writing what it measured; a failed run exits 1.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from tuner.cli.common import fail, finish, refused
from tuner.options import (
    AUTO_NEIGHBOUR_PCT,
    DEFAULT_SLO,
    DEFAULT_WORKLOAD,
    NEIGHBOUR_AUTO,
    RESULTS,
    SMALL_MACHINE_CORES,
    TuneOptions,
    check_engine,
    default,
    problem,
)

if TYPE_CHECKING:
    from probes.workload import Workload
    from tuner.report.schema import Report


app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    help="Tune an LLM inference server for the highest throughput under latency SLOs.",
)


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``1h30m``, ``1.5h`` or plain seconds -> seconds."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        return float(t)
    parts = re.findall(r"(\d+(?:\.\d+)?)(h|m|s)", t)
    if not parts or "".join(a + b for a, b in parts) != t:
        raise ValueError(f"duration {text!r} is malformed; forms: 90s, 15m, 1h30m")
    return sum(float(a) * {"h": 3600, "m": 60, "s": 1}[b] for a, b in parts)


def _percent(flag: str, text: str, example: str) -> float:
    """``10%`` or ``10`` -> 10.0; anything else is one clear line and exit 2."""
    try:
        return float(text.strip().rstrip("%"))
    except ValueError:
        fail(f"{flag} {text!r} is not a percentage such as {example}")


def _as_percent(fraction: float) -> str:
    """0.1 -> ``10%``: a fraction's default as the flag takes it."""
    return f"{fraction * 100:g}%"


def _as_duration(seconds: float) -> str:
    """300.0 -> ``300s``: a duration's default as the flag takes it."""
    return f"{seconds:g}s"


@app.callback(invoke_without_command=True)
def tune_cmd(
    ctx: typer.Context,
    model: Annotated[
        str, typer.Option(help="smollm2-135m (embedded), a model folder, or a hub id")
    ] = "",
    slo: Annotated[
        list[str],
        typer.Option(
            help=f"ttft=200ms, tpot@p95=50ms, e2e=2s, quality=1%; repeat or comma-separate "
            f"[default: {DEFAULT_SLO}]"
        ),
    ] = [],  # noqa: B006
    engine: Annotated[
        str, typer.Option(help="engine to tune: vllm, transformers, or endpoint (a running server)")
    ] = default("engine"),
    endpoint: Annotated[
        str | None,
        typer.Option(help="with --engine endpoint: the running server's root URL"),
    ] = None,
    served_model: Annotated[
        str | None,
        typer.Option(help="with --engine endpoint: the model name it serves [default: its first]"),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(help="tokenizer folder or id for generated prompts [default: the model]"),
    ] = None,
    workload: Annotated[
        str,
        typer.Option(
            help="synthetic:input=N,output=M[,spread=0.5|in_p99=N][,prefix_groups=G,"
            "prefix_len=K][,turns=T][,arrivals=gamma,cv=C], pairs:FILE[,...], "
            "trace:FILE[,scale=S] or a .jsonl file (docs/usage.md)"
        ),
    ] = DEFAULT_WORKLOAD,
    check_workload: Annotated[
        list[str],
        typer.Option(
            help="after the confirmation, measure the recommendation and the baseline on this "
            "held-out workload too (same forms as --workload, or derived: the tuned one's mean "
            "lengths in another shape); repeatable; not in a time budget that cannot hold it; "
            "under --objective robust, a workload every configuration is ranked on instead",
        ),
    ] = [],  # noqa: B006
    objective: Annotated[
        str,
        typer.Option(
            help="what ranks configurations: tuned (their capacity on --workload) or robust "
            "(their worst gain over the defaults on --workload and on each --check-workload, "
            "each measured on the configuration's own server)",
        ),
    ] = default("objective"),
    load: Annotated[
        str,
        typer.Option(
            help="load model: rate (open-loop arrivals, Poisson or the workload's own, what a "
            "service sees; capacity in requests/s) or concurrency (a closed loop of N clients)"
        ),
    ] = default("load_model"),
    salt: Annotated[
        str | None,
        typer.Option(
            help="the workload's random salt, to reproduce a run's prompts [default: fresh]"
        ),
    ] = None,
    trials: Annotated[
        int,
        typer.Option(help="server configurations to start after the baseline, across all stages"),
    ] = default("trials"),
    time_budget: Annotated[
        str | None, typer.Option(help="cap on the whole run's wall time, e.g. 15m")
    ] = None,
    output: Annotated[
        Path,
        typer.Option(help="folder for results/<run-id>/"),
    ] = RESULTS,
    max_error_rate: Annotated[
        float,
        typer.Option(help="highest tolerated error rate"),
    ] = default("max_error_rate"),
    seed: Annotated[
        int,
        typer.Option(help="seed of the sampler and the workload salts"),
    ] = default("seed"),
    startup_timeout: Annotated[
        str, typer.Option(help="most an engine start may take")
    ] = _as_duration(default("startup_timeout_s")),
    request_timeout: Annotated[
        str, typer.Option(help="most one request may take; past it, it counts as an error")
    ] = _as_duration(default("request_timeout_s")),
    search_space: Annotated[
        Path | None, typer.Option(help="a search-space file instead of the engine's own")
    ] = None,
    headroom: Annotated[
        str,
        typer.Option(
            help="confirm the recommendation with latencies this far under their limits, e.g. 10%",
        ),
    ] = _as_percent(default("headroom")),
    load_margin: Annotated[
        str,
        typer.Option(
            help="under --load rate, recommend at most this far under the fitted capacity, e.g. "
            "15% (open-loop latency explodes near saturation; a heavier client sees it first)",
        ),
    ] = _as_percent(default("load_margin")),
    neighbour_cpu: Annotated[
        str,
        typer.Option(
            help="score and confirm beside a process burning this share of one core, e.g. "
            f"{AUTO_NEIGHBOUR_PCT:g}% (costs the server about what a co-located vLLM benchmark "
            f"client does); {NEIGHBOUR_AUTO}: {AUTO_NEIGHBOUR_PCT:g}% on a machine of "
            f"{SMALL_MACHINE_CORES} cores where autotune starts the server, else none",
        ),
    ] = NEIGHBOUR_AUTO,
    stages: Annotated[
        str | None,
        typer.Option(help="run only these stages, e.g. batching,quantisation [default: all]"),
    ] = None,
    draft_model: Annotated[
        str | None,
        typer.Option(help="a draft model (folder or hub id) the speculative stage may try"),
    ] = None,
    eagle_model: Annotated[
        str | None,
        typer.Option(help="an EAGLE head (folder or hub id) the speculative stage may try"),
    ] = None,
    quantized_model: Annotated[
        str | None,
        typer.Option(help="a pre-quantised checkpoint of --model the quantisation stage may try"),
    ] = None,
    serving_model: Annotated[
        bool,
        typer.Option(
            "--serving-model/--no-serving-model",
            help="let the serving model, calibrated on the measured builds, choose what the "
            "batching stage measures (off: Optuna's sampler alone)",
        ),
    ] = default("serving_model"),
    accept_divergence: Annotated[
        bool,
        typer.Option(
            "--accept-divergence",
            help="allow recommending speculative decoding whose greedy outputs differ from "
            "the same configuration without it",
        ),
    ] = default("accept_divergence"),
    storage: Annotated[
        str | None,
        typer.Option(
            help="share one study between several autotune workers (one per GPU or machine) "
            "through this database, e.g. postgresql+psycopg://user:password@host/db",
        ),
    ] = None,
    study: Annotated[
        str | None, typer.Option(help="with --storage: the shared study's name")
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="continue an interrupted run in its folder (results/<run-id>), with the "
            "options it was started with: finished trials are kept, not measured again",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="print the outcome as one JSON object on stdout (progress stays on stderr)",
        ),
    ] = False,
) -> None:
    """Tune a server: baseline, then the search stages, then a confirmed recommendation.

    Exit codes: 0 a recommendation; 1 the run failed; 2 bad input (nothing started); 3 no
    configuration met the SLOs; 130 interrupted (--resume continues it)."""
    if ctx.invoked_subcommand is not None:
        return
    if resume is not None:
        _resume(ctx, resume, as_json)
        return
    from probes.slo import SLOError, parse_slos
    from probes.workload import WorkloadError, parse_workload

    if not slo:
        typer.echo(
            f"autotune: no --slo given; using the default {DEFAULT_SLO} (p99 TTFT <= 2 s)", err=True
        )
    with refused(SLOError, WorkloadError, ValueError):
        slos = parse_slos(slo or [DEFAULT_SLO])
        wl = parse_workload(workload)
        checks = [_check_workload(w, parse_workload) for w in check_workload]
        budget_s = parse_duration(time_budget) if time_budget else None
        startup_s = parse_duration(startup_timeout)
        request_s = parse_duration(request_timeout)
    headroom_frac = _percent("--headroom", headroom, "10%") / 100.0
    margin_frac = _percent("--load-margin", load_margin, "15%") / 100.0
    neighbour_pct = (
        None
        if neighbour_cpu.strip().lower() == NEIGHBOUR_AUTO
        else _percent("--neighbour-cpu", neighbour_cpu, "8%")
    )
    stage_list = None
    if stages is not None:
        stage_list = [s.strip() for s in stages.split(",") if s.strip()]

    from pydantic import ValidationError

    from tuner import api

    try:
        opts = TuneOptions(
            model=model,
            slos=slos,
            workload=wl,
            check_workloads=checks,
            objective=objective,
            engine=engine,
            load_model=load,
            salt=salt,
            trials=trials,
            time_budget_s=budget_s,
            output_dir=output,
            max_error_rate=max_error_rate,
            seed=seed,
            startup_timeout_s=startup_s,
            request_timeout_s=request_s,
            space_file=search_space,
            stages=stage_list,
            headroom=headroom_frac,
            load_margin=margin_frac,
            neighbour_cpu_pct=neighbour_pct,
            draft_model=draft_model,
            eagle_model=eagle_model,
            quantized_model=quantized_model,
            accept_divergence=accept_divergence,
            serving_model=serving_model,
            endpoint=endpoint,
            served_model=served_model,
            tokenizer=tokenizer,
            storage=storage,
            study=study,
            command=["autotune", *sys.argv[1:]],  # a storage password is redacted
        )
    except ValidationError as exc:
        fail(problem(exc))
    with refused(ValueError):
        check_engine(engine)
    from tuner.run.progress import Display

    _run_tuning(lambda: api.tune(opts, Display()), as_json)


def _check_workload(spec: str, parse: Callable[[str], Workload]) -> Workload | Literal["derived"]:
    """One ``--check-workload``: ``derived`` (made from the tuned workload once it is known),
    or a workload of ``--workload``'s forms.

    Raises:
        WorkloadError: naming the flag and what is wrong with the spec.
    """
    from probes.workload import WorkloadError

    if spec.strip() == "derived":
        return "derived"
    try:
        return parse(spec)
    except WorkloadError as exc:
        raise WorkloadError(f"--check-workload: {exc}") from None


def _run_tuning(call: Callable[[], tuple[Report, Path]], as_json: bool = False) -> None:
    """Run a tuning (new or resumed) with SIGTERM handled like Ctrl-C, then its summary."""
    from tuner import api
    from tuner.run import stop

    # The first Ctrl-C finishes the current point, the second (or SIGTERM) stops at once
    # (tuner/run/stop.py); the caller's handlers come back after (a test runner keeps its own).
    restore = stop.install()
    try:
        report, out_dir = call()
    except api.UserError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        typer.echo("autotune: interrupted", err=True)
        raise typer.Exit(130) from None
    finally:
        restore()
    finish(report, out_dir, as_json)


def _resume(ctx: typer.Context, run_dir: Path, as_json: bool = False) -> None:
    """``--resume RUN_DIR``: the run's own options, so no other tuning option is taken."""
    from tuner import api

    # By name: typer ships its own copy of click, so its ParameterSource is not click's.
    given = [
        name
        for name in ctx.params
        if name not in ("resume", "as_json")
        and getattr(ctx.get_parameter_source(name), "name", "") in ("COMMANDLINE", "ENVIRONMENT")
    ]
    if given:
        flags = ", ".join("--" + n.replace("_", "-") for n in given)
        fail(f"--resume continues a run with the options it was started with; drop {flags}")
    if not run_dir.is_dir():
        fail(f"--resume {run_dir}: no such folder")
    from tuner.run.progress import Display

    _run_tuning(lambda: api.resume(run_dir, Display()), as_json)


def _register() -> None:
    """The commands of their own modules; the root command (tuning) is this one's."""
    from tuner.cli.predict import predict_cmd
    from tuner.cli.probe import probe_cmd
    from tuner.cli.runs import compare_cmd, report_cmd

    app.command("probe")(probe_cmd)
    app.command("predict")(predict_cmd)
    app.command("report")(report_cmd)
    app.command("compare")(compare_cmd)


_register()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
