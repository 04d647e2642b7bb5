"""Re-scoring a recorded run under other SLOs without measuring again (tuner/runs/rescore.py,
``autotune report RUN_DIR --slo``), on a run of the fake engine of test_runner (a real
process, real per-request records)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from probes.slo import parse_slos
from tuner.cli.main import app
from tuner.report.schema import Report
from tuner.runs.rescore import RescoreError, rescore


@pytest.fixture
def run_dir(fake_run: Path) -> Path:
    return fake_run


def _report(run_dir: Path) -> Report:
    return Report.model_validate_json((run_dir / "report.json").read_bytes())


def _scored(r: Report) -> dict[int, float | None]:
    return {t.number: t.score_tokens_per_s for t in [r.baseline, *r.trials] if t is not None}


def test_the_same_slos_give_the_runs_own_scores(run_dir: Path) -> None:
    """The re-score judges and estimates as the run did: under the run's own SLOs every
    trial's score and status come back as the run found them."""
    report = _report(run_dir)
    again = rescore(run_dir, report, parse_slos(["ttft=300ms"]))
    assert _scored(again) == pytest.approx(_scored(report))
    assert [t.status for t in again.trials] == [t.status for t in report.trials]
    assert again.rescored is not None and again.recommended is None
    assert again.rescored.best_trial == report.recommended.from_trial  # type: ignore[union-attr]


def test_a_stricter_slo_and_another_percentile(run_dir: Path) -> None:
    report = _report(run_dir)
    slos = parse_slos(["ttft@p90=40ms"])
    again = rescore(run_dir, report, slos)
    x = again.rescored
    assert x is not None
    assert [(s.metric, s.percentile, s.limit_ms) for s in again.slo] == [("ttft", 90, 40.0)]
    assert [s.percentile for s in x.from_slo] == [99]
    # Every point judged again at p90 against 40 ms, from its own records.
    for t in [again.baseline, *again.trials]:
        assert t is not None
        for p in t.points:
            (check,) = [c for c in p.verdict.checks if c.percentile is not None]
            assert check.percentile == 90 and check.limit_ms == 40.0
            assert check.measured_ms == p.metrics.ttft_ms.p90
            assert p.verdict.holds == (
                p.metrics.ttft_ms.p90 <= 40.0 and p.metrics.error_rate <= 0.01
            )
    # Stricter: no trial's score grows.
    for n, score in _scored(again).items():
        before = _scored(report)[n]
        assert score is None or (before is not None and score <= before * 1.001)
    assert x.best_trial is not None  # the fake engine meets 40 ms at its lower loads
    assert x.confirm_command is not None and x.confirm_command[:2] == ["autotune", "probe"]
    assert "ttft@p90=40ms" in x.confirm_command
    assert all("cannot" not in u for u in x.unanswerable)


def test_what_the_recorded_loads_cannot_say(run_dir: Path) -> None:
    report = _report(run_dir)
    tight = rescore(run_dir, report, parse_slos(["ttft=1ms"]))
    assert tight.rescored is not None and tight.rescored.best_trial is None
    assert all(t.status == "infeasible" for t in tight.trials if t.points)
    assert any("capacity below c=" in u and "the lowest load measured" in u
               for u in tight.rescored.unanswerable)  # fmt: skip
    loose = rescore(run_dir, report, parse_slos(["ttft=60s"]))
    assert loose.rescored is not None
    assert any(
        "at least" in u and "the highest load measured" in u for u in loose.rescored.unanswerable
    )


def test_missing_records_are_an_error(run_dir: Path, tmp_path: Path) -> None:
    report = _report(run_dir)
    assert report.baseline is not None
    gone = report.baseline.points[0].model_copy(update={"records_file": str(tmp_path / "x.jsonl")})
    broken = report.model_copy(
        update={"baseline": report.baseline.model_copy(update={"points": [gone]})}
    )
    with pytest.raises(RescoreError, match="records file"):
        rescore(tmp_path, broken, parse_slos(["ttft=1s"]))


def test_the_cli_writes_the_rescore_beside_the_run_and_keeps_the_run(run_dir: Path) -> None:
    before = (run_dir / "report.json").read_bytes()
    result = CliRunner().invoke(app, ["report", str(run_dir), "--slo", "ttft@p90=60ms"])
    assert result.exit_code == 0, result.output
    assert "UNCONFIRMED" in result.output and "autotune probe" in result.output
    folder = run_dir / "rescored-ttft-p90-60ms"
    data = json.loads((folder / "report.json").read_text())
    assert data["rescored"]["from_slo"][0]["percentile"] == 99 and data["recommended"] is None
    assert "## Re-scored" in (folder / "report.md").read_text()
    assert "UNCONFIRMED" in (folder / "report.html").read_text()
    assert (run_dir / "report.json").read_bytes() == before
    only_md = CliRunner().invoke(app, ["report", str(run_dir), "--format", "md"])
    assert only_md.exit_code == 0, only_md.output
    assert (run_dir / "report.json").read_bytes() == before


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "/nonexistent-run"], "no report.json"),
        (["report", "RUN", "--slo", "ttft=fast"], "malformed"),
        (["report", "RUN", "--slo", "quality=1%"], "latency SLO"),
        (["report", "RUN", "--format", "pdf"], "--format"),
        (["report"], "give a run folder"),
    ],
)
def test_bad_report_input(run_dir: Path, args: list[str], message: str) -> None:
    args = [str(run_dir) if a == "RUN" else a for a in args]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and message in result.output, result.output
