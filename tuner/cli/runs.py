"""Commands over recorded runs: ``autotune report`` (render again, re-score under other SLOs,
a shared study's report) and ``autotune compare`` (runs across machines, with cost)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.common import fail, finish


def report_cmd(
    run_dir: Annotated[
        Path | None, typer.Argument(help="a run folder: render it again, or re-score it with --slo")
    ] = None,
    slo: Annotated[
        list[str],
        typer.Option(
            help="re-score every recorded trial under these SLOs (ttft@p90=1s, tpot=50ms, ...) "
            "without measuring again; repeatable"
        ),
    ] = [],  # noqa: B006
    max_error_rate: Annotated[
        float | None, typer.Option(help="with --slo: the error-rate limit [default: the run's]")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="files to write: md, html, json, comma-separated")
    ] = "md,html,json",
    storage: Annotated[
        str | None, typer.Option(help="a shared study's database URL (instead of RUN_DIR)")
    ] = None,
    study: Annotated[str | None, typer.Option(help="the shared study's name")] = None,
    output: Annotated[
        Path, typer.Option(help="with --storage: folder for <study>/report.*")
    ] = Path("results"),
) -> None:
    """Render a run's report again, re-score it under other SLOs from its per-request records
    (--slo), or build a shared study's report (--storage, --study)."""
    from tuner import api

    formats = {f.strip() for f in fmt.split(",") if f.strip()}
    if not formats or formats - {"md", "html", "json"}:
        fail(f"--format {fmt!r}: give md, html or json, comma-separated")
    if (run_dir is None) == (storage is None):
        fail("give a run folder, or --storage URL --study NAME for a shared study")
    if storage is not None:
        if study is None or slo:
            fail("--storage goes with --study NAME (and no --slo)")
        try:
            report, folder = api.shared_report(storage, study, output)
        except api.UserError as exc:
            fail(str(exc))
        finish(report, folder)
        return
    assert run_dir is not None
    if max_error_rate is not None and not 0 <= max_error_rate < 1:
        fail(f"--max-error-rate must be in [0, 1), got {max_error_rate}")
    try:
        report, folder = api.render_run(run_dir, slo, max_error_rate, formats)
    except api.UserError as exc:
        fail(str(exc))
    from tuner.report.render import render_summary
    from tuner.report.render_rescore import render_rescore_summary

    text = (
        render_rescore_summary(report) if report.rescored else render_summary(report, str(folder))
    )
    typer.echo(text)
    typer.echo(f"autotune: wrote {', '.join(sorted(formats))} in {folder}", err=True)


def compare_cmd(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            help="run folders (two or more); a probe folder (autotune probe --diagnose on "
            "another machine) is predicted from its probe and marked so"
        ),
    ],
    price: Annotated[
        list[str],
        typer.Option(
            help="NAME=USD_PER_HOUR: the price of the machine a run measured (NAME: its folder "
            "name, run id or hostname); repeatable"
        ),
    ] = [],  # noqa: B006
    output: Annotated[
        Path | None,
        typer.Option(
            help="folder for compare.md and compare.html [default: results/compare-<time>]"
        ),
    ] = None,
) -> None:
    """Compare runs across machines under one SLO, with the cost of a million output tokens
    (a probe folder's machine predicted by the serving model, marked predicted)."""
    from tuner.report.schema import write_atomic
    from tuner.runs.compare_page import render_html, render_markdown
    from tuner.runs.compare_runs import CompareError, compare, parse_prices
    from tuner.runs.rescore import RescoreError

    if len(run_dirs) < 2:
        fail("give two or more run folders to compare")
    try:  # a folder of neither kind is refused there, before anything is read
        result = compare(run_dirs, parse_prices(price))
    except (CompareError, RescoreError) as exc:
        fail(str(exc))
    folder = output or Path("results") / time.strftime("compare-%Y%m%d-%H%M%S")
    md = render_markdown(result)
    write_atomic(folder / "compare.md", md.encode())
    write_atomic(folder / "compare.html", render_html(result).encode())
    typer.echo(md)
    typer.echo(f"autotune: wrote compare.md and compare.html in {folder}", err=True)
