"""report.html: the figures (tuner/report/views.py) and the page (tuner/report/html.py), opened in
a real
headless Chromium (tests/browser.py) on the report of a run on the fake engine of
test_runner (a real process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser import open_page
from tuner.report.schema import Report
from tuner.report.views import build, pareto


@pytest.fixture
def run_dir(fake_run: Path) -> Path:
    return fake_run


def test_pareto_front_keeps_the_points_nothing_beats() -> None:
    # (tokens/s, latency): more tokens/s at a lower latency beats; ties at both do not.
    pairs = [(100.0, 50.0), (200.0, 80.0), (150.0, 90.0), (200.0, 80.0), (50.0, None)]
    assert pareto(pairs) == [True, True, False, True, False]
    assert pareto([(10.0, 5.0), (10.0, 6.0), (9.0, 5.0)]) == [True, False, False]


def test_the_figures_come_from_every_measured_point(run_dir: Path) -> None:
    report = Report.model_validate_json((run_dir / "report.json").read_bytes())
    view = build(report)
    trials = [report.baseline, *report.trials]
    assert len(view.points) == sum(len(t.points) for t in trials if t)
    assert report.recommended is not None and view.recommended is not None
    assert view.recommended.confirmation
    assert view.recommended.tokens_per_s == report.recommended.metrics.output_tokens_per_s
    # The highest throughput measured is on both fronts; a point another beats is on neither.
    marks = [*view.points, view.recommended, *([view.baseline] if view.baseline else [])]
    top = max(marks, key=lambda p: p.tokens_per_s)
    assert top.front_ttft and top.front_tpot
    for p in marks:
        beaten = any(
            q.tokens_per_s > p.tokens_per_s and (q.ttft_ms or 0) < (p.ttft_ms or 0) for q in marks
        )
        assert not (beaten and p.front_ttft)
    for p in view.points:
        assert p.per_user_tokens_per_s == pytest.approx(1000.0 / p.tpot_p50_ms)
    assert view.waterfall[0].label == "baseline"
    assert view.waterfall[-1].label == "confirmed"
    assert [r.number for r in view.rows] == [t.number for t in trials if t]
    assert sum(r.recommended for r in view.rows) == 1
    assert view.ttft_limit_ms == 300.0 and view.ttft_percentile == 99
    assert view.probe is None  # the fake run has no probe


def test_the_page_renders_every_plot_offline_in_chromium(run_dir: Path, tmp_path: Path) -> None:
    page = run_dir / "report.html"
    check = open_page(page, tmp_path / "report.png")
    assert check.console_errors == []
    # The page alone: no request but its own file (the browser is offline; a request would
    # still be seen here before it failed).
    assert check.requests == [page.resolve().as_uri()]
    assert set(check.figures) == {"pareto", "interactivity", "curves", "stages"}
    assert all(n > 0 for n in check.figures.values()), check.figures
    data = json.loads((run_dir / "report.json").read_text())
    n = data["recommended"]["from_trial"]
    assert (f"trial {n}:" if n else "the baseline") in check.answer
    assert (tmp_path / "report.png").stat().st_size > 10_000
