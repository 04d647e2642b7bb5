"""The report's formats (tuner/report/formats.py): each entry is written to its file by the one
writer every command uses, the deployment files only beside the page that links them, and a new
format is one entry, which ``autotune report --format`` then takes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli.main import app
from tuner.report.exports import ENV_FILE, SERVE_FILE
from tuner.report.formats import FORMATS, ReportFormat, write_reports
from tuner.report.schema import Report
from tuner.report.summary import summary


@pytest.fixture
def report(fake_run: Path) -> Report:
    return Report.model_validate_json((fake_run / "report.json").read_bytes())


def test_every_format_is_written_to_its_file_with_the_deployment_files_beside_the_page(
    report: Report, tmp_path: Path
) -> None:
    written = write_reports(report, tmp_path / "all")
    assert [p.name for p in written] == ["report.json", "report.md", "report.html"]
    folder = tmp_path / "all"
    assert Report.model_validate_json((folder / "report.json").read_bytes()) == report
    assert (folder / "report.md").read_text().startswith("# autotune")
    exported = [ENV_FILE, SERVE_FILE]  # the fake engine has no files of its own
    assert all((folder / name).is_file() for name in exported)
    for fmt in FORMATS.values():  # each file is its entry's rendering, the page given the exports
        files = exported if fmt.exports else []
        assert (folder / fmt.file).read_bytes() == fmt.render(report, files), fmt.file
    assert set(summary(report, folder)["files"]) == {*(f.file for f in FORMATS.values()), *exported}


def test_only_the_formats_asked_for_and_no_deployment_files_without_the_page(
    report: Report, tmp_path: Path
) -> None:
    write_reports(report, tmp_path / "md", ["md"])
    assert sorted(p.name for p in (tmp_path / "md").iterdir()) == ["report.md"]
    write_reports(report, tmp_path / "page", {"html", "json"})
    names = sorted(p.name for p in (tmp_path / "page").iterdir())
    assert names == sorted(["report.html", "report.json", ENV_FILE, SERVE_FILE])


def test_a_new_format_is_one_entry(
    report: Report, fake_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def text(r: Report, files: list[str]) -> bytes:
        return f"{r.run_id}: {len(r.trials)} trials\n".encode()

    monkeypatch.setitem(FORMATS, "txt", ReportFormat("report.txt", text))
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(fake_run / "report.json", run / "report.json")
    res = CliRunner().invoke(app, ["report", str(run), "--format", "txt"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in run.iterdir()) == ["report.json", "report.txt"]
    assert (run / "report.txt").read_text() == f"{report.run_id}: {len(report.trials)} trials\n"
    bad = CliRunner().invoke(app, ["report", str(run), "--format", "pdf"])
    assert bad.exit_code == 2
    assert "--format 'pdf': give json, md, html or txt, comma-separated" in bad.output
