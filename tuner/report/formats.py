"""The report's formats, one entry each in ``FORMATS``: the file it is written to and how it is
rendered from the report. Every place that writes a run's report (the end of a run, ``autotune
report``, a shared study's report) writes it through ``write_reports``, and ``--format`` takes
the names here, so a new format is one entry.

report.html links the recommendation's deployment files (tuner/report/exports.py): where it is
written, they are written first, beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from tuner.report.exports import write_exports
from tuner.report.schema import Report, dump_json, write_atomic


@dataclass(frozen=True)
class ReportFormat:
    """A format's file, and its bytes from the report and the names of the deployment files
    written beside it (``exports``: written before it; otherwise it is given none)."""

    file: str
    render: Callable[[Report, list[str]], bytes]
    exports: bool = False


def _markdown(report: Report, files: list[str]) -> bytes:
    from tuner.report.render import render_markdown

    return render_markdown(report).encode()


def _page(report: Report, files: list[str]) -> bytes:
    # plotly is imported with the page, only where one is written
    from tuner.report.html import render_html
    from tuner.report.views import build

    return render_html(build(report, files)).encode()


# In the order they are written: report.json first, so a renderer's failure leaves it on disk.
FORMATS: dict[str, ReportFormat] = {
    "json": ReportFormat("report.json", lambda report, files: dump_json(report)),
    "md": ReportFormat("report.md", _markdown),
    "html": ReportFormat("report.html", _page, exports=True),
}


def write_reports(
    report: Report, folder: Path, names: Collection[str] = tuple(FORMATS)
) -> list[Path]:
    """The report in ``folder`` in each format of ``names`` (with the deployment files where
    one links them), each file atomically; returns the report files written."""
    folder.mkdir(parents=True, exist_ok=True)
    exported: list[str] | None = None
    written = []
    for name, fmt in FORMATS.items():
        if name not in names:
            continue
        files: list[str] = []
        if fmt.exports:
            if exported is None:
                exported = [p.name for p in write_exports(report, folder)]
            files = exported
        path = folder / fmt.file
        write_atomic(path, fmt.render(report, files))
        written.append(path)
    return written
