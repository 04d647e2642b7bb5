"""What the commands share: bad input as one line and exit 2, and the end of a run (its
summary, or --json's object, and its exit code)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

if TYPE_CHECKING:
    from tuner.report.schema import Report


def fail(msg: str, code: int = 2) -> NoReturn:
    typer.echo(f"autotune: error: {msg}", err=True)
    raise typer.Exit(code)


@contextmanager
def refused(*errors: type[Exception]) -> Iterator[None]:
    """A check or parse inside: any of ``errors`` it raises is the input's fault, and becomes
    ``fail``'s one line and exit 2 before anything starts."""
    try:
        yield
    except errors as exc:
        fail(str(exc))


def finish(report: Report, out_dir: Path, as_json: bool = False) -> None:
    """The summary (text, or --json's object) and the exit code (tuner/report/summary.py)."""
    import json

    from tuner.report.render import render_summary
    from tuner.report.summary import INTERRUPTED, OK, exit_code, summary

    if as_json:
        typer.echo(json.dumps(summary(report, out_dir)))
    else:
        typer.echo(render_summary(report, str(out_dir)))
    code = exit_code(report)
    if code == INTERRUPTED:
        typer.echo(f"autotune: continue it with: autotune --resume {out_dir}", err=True)
    if code != OK:
        raise typer.Exit(code)
