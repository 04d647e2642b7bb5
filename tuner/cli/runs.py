"""Commands over recorded runs: ``autotune report`` (render again, re-score under other SLOs,
a shared study's report) and ``autotune compare`` (runs across machines, with cost)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.common import finish, refused
from tuner.options import REPORT_FORMATS, RESULTS, check_compare, check_report


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
        str,
        typer.Option(
            "--format", help=f"files to write: {', '.join(REPORT_FORMATS)}, comma-separated"
        ),
    ] = ",".join(REPORT_FORMATS),
    storage: Annotated[
        str | None, typer.Option(help="a shared study's database URL (instead of RUN_DIR)")
    ] = None,
    study: Annotated[str | None, typer.Option(help="the shared study's name")] = None,
    output: Annotated[
        Path, typer.Option(help="with --storage: folder for <study>/report.*")
    ] = RESULTS,
) -> None:
    """Render a run's report again, re-score it under other SLOs from its per-request records
    (--slo), or build a shared study's report (--storage, --study)."""
    from tuner import api

    formats = {f.strip() for f in fmt.split(",") if f.strip()}
    with refused(ValueError):
        check_report(
            fmt=fmt,
            formats=formats,
            run_dir=run_dir,
            storage=storage,
            study=study,
            slo=slo,
            max_error_rate=max_error_rate,
        )
    if storage is not None:
        assert study is not None
        with refused(api.UserError):
            report, folder = api.shared_report(storage, study, output)
        finish(report, folder)
        return
    assert run_dir is not None
    with refused(api.UserError):
        report, folder = api.render_run(run_dir, slo, max_error_rate, formats)
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

    with refused(ValueError):
        check_compare(run_dirs)
    with refused(CompareError, RescoreError):  # a folder of neither kind is refused there
        result = compare(run_dirs, parse_prices(price))
    folder = output or RESULTS / time.strftime("compare-%Y%m%d-%H%M%S")
    md = render_markdown(result)
    write_atomic(folder / "compare.md", md.encode())
    write_atomic(folder / "compare.html", render_html(result).encode())
    typer.echo(md)
    typer.echo(f"autotune: wrote compare.md and compare.html in {folder}", err=True)
