"""``autotune compare`` (tuner/runs/compare_runs.py, tuner/runs/compare_page.py): two recorded runs
of the
fake engine of test_runner (real processes, real records) under one SLO, priced; SLOs that
differ are re-scored to the strictest common one; runs of different workloads are flagged."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from probes.slo import parse_slos
from probes.workload import parse_workload
from tests.browser import open_page
from tests.unit.test_runner import HW, FakeEngine, _options
from tuner.cli.main import app
from tuner.report.schema import Report
from tuner.runs.compare_runs import CompareError, common_slo, compare, parse_prices


def _run(tmp: Path, **kw: object) -> Path:
    from tuner.run.runner import Runner

    tmp.mkdir(parents=True, exist_ok=True)
    runner = Runner(_options(tmp, **kw), lambda _: None, engine=FakeEngine(), hardware=HW)
    runner.run()
    return runner.out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, fake_run: Path) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("compare")
    # The same workload file (name and items) as the shared run's (p99 TTFT <= 300 ms): they
    # differ only in their SLOs.
    a = fake_run
    b = _run(root / "b", slos=parse_slos(["ttft@p90=80ms"]))
    (root / "c").mkdir()
    other = root / "c" / "other.jsonl"
    other.write_text('{"prompt": "other", "max_tokens": 4}\n')
    c = _run(root / "c", workload=parse_workload(str(other)))
    return a, b, c


def test_prices_and_their_errors() -> None:
    assert parse_prices(["box=2.5", "gpu=$1"]) == {"box": 2.5, "gpu": 1.0}
    for bad in ("box", "box=", "box=-1", "=3", "box=cheap"):
        with pytest.raises(CompareError, match="NAME=USD_PER_HOUR"):
            parse_prices([bad])


def test_the_strictest_common_slo(runs: tuple[Path, Path, Path]) -> None:
    a, b, _ = runs
    reports = [Report.model_validate_json((d / "report.json").read_bytes()) for d in (a, b)]
    assert [(s.metric, s.percentile, s.limit_ms) for s in common_slo(reports)] == [
        ("ttft", 90, 80.0),
        ("ttft", 99, 300.0),
    ]


def test_two_runs_with_cost(runs: tuple[Path, Path, Path]) -> None:
    a, b, _ = runs
    result = compare([a, b], {a.name: 2.0, b.name: 1.0})
    assert result.rescored  # the SLOs differ: both re-scored under both constraints
    assert any("re-scored" in w for w in result.warnings)
    assert not any("NOT COMPARABLE" in w for w in result.warnings)
    for row in result.rows:
        assert row.confirmed is False  # a re-scored figure is never called confirmed
        assert row.tokens_per_s and row.price_per_hour  # both runs priced, both re-scored
        assert row.usd_per_million_tokens == pytest.approx(
            row.price_per_hour / 3600 / row.tokens_per_s * 1e6
        )
        assert row.tokens_per_usd == pytest.approx(row.tokens_per_s * 3600 / row.price_per_hour)
    same = compare([a, a], {})
    assert not same.rescored and all(r.confirmed for r in same.rows)
    assert all(r.usd_per_million_tokens is None for r in same.rows)


def test_different_workloads_are_flagged(runs: tuple[Path, Path, Path]) -> None:
    a, _, c = runs
    result = compare([a, c], {})
    assert any(w.startswith("NOT COMPARABLE: the runs differ in workload") for w in result.warnings)


def test_the_cli_writes_both_formats(runs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    a, b, _ = runs
    out = tmp_path / "cmp"
    result = CliRunner().invoke(
        app, ["compare", str(a), str(b), "--price", f"{a.name}=2", "--output", str(out)]
    )
    assert result.exit_code == 0, result.output
    md = (out / "compare.md").read_text()
    assert "USD per 1M output tokens" in md and a.name in md and b.name in md
    page = open_page(out / "compare.html", tmp_path / "compare.png")
    assert page.console_errors == [] and page.requests == [(out / "compare.html").as_uri()]
    assert set(page.figures) == {"compare"} and page.figures["compare"] > 0
    bad = CliRunner().invoke(app, ["compare", str(a), str(b), "--price", "nobody=1"])
    assert bad.exit_code == 2 and "no run of that folder name" in bad.output
    one = CliRunner().invoke(app, ["compare", str(a)])
    assert one.exit_code == 2 and "two or more" in one.output


def _probe_folder(root: Path, run: Path) -> Path:
    """A --diagnose probe folder of vLLM's defaults on another machine whose step times are
    a known model (tests/unit/probe_records.py), with the run's model and workload."""
    from tests.unit.probe_records import LENGTHS, diagnosis_with, write_probe_records
    from tests.unit.test_guide import TRUE
    from tuner.engines.hardware import Hardware
    from tuner.report.schema import dump_json
    from tuner.runs.probe_run import PROBE_FILE, ProbeResult

    r = Report.model_validate_json((run / "report.json").read_bytes())
    folder = root / "probe-other"
    files = write_probe_records(folder / "records", TRUE)
    # written elsewhere, the folder moved here since: its records are found in it
    files = {k: f"/elsewhere/records/{Path(v).name}" for k, v in files.items()}
    model_dir = root / Path(r.model_path).name
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text("{}")
    result = ProbeResult(
        target={"model": "m", "engine": "vllm", "params": {}, "model_dir": str(model_dir)},
        workload=f"synthetic:input={LENGTHS[0]},output={LENGTHS[1]}",
        load={"concurrency": 8},
        metrics=r.baseline.metrics,  # type: ignore[union-attr]  # not read
        warmup_s=1.0,
        hardware=Hardware(hostname="other", cpu_model="c", cpu_count=1, memory_gib=1.0),
        diagnosis=diagnosis_with(files),
    )
    (folder / PROBE_FILE).write_bytes(dump_json(result))
    return folder


def test_a_probe_folder_is_predicted_beside_measured_runs(
    runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    from probes.slo import parse_slos as slos
    from tests.unit.probe_records import LENGTHS
    from tests.unit.test_guide import TRUE
    from tuner.servemodel.configs import sim_knobs
    from tuner.servemodel.load import cycled
    from tuner.servemodel.predict import mean_of, predict
    from tuner.spaces.space import load_space, space_path

    a, _, _ = runs
    probe = _probe_folder(tmp_path, a)
    result = compare([a, probe], {"other": 0.5})
    measured, predicted = result.rows
    assert measured.figure == "measured" and predicted.figure == "predicted"
    assert predicted.machine.startswith("other:") and not predicted.confirmed
    # the probe's calibration predicts what the true step model serves under the run's SLO
    # and load model (closed loop)
    space = load_space(space_path("vllm", "cpu"))
    truth = predict(
        TRUE, sim_knobs({}, space, None), cycled([LENGTHS]), slos(["ttft=300ms"]), 0.01,
        "concurrency", mean_lengths=mean_of([LENGTHS]),
    )  # fmt: skip
    assert predicted.load.startswith("c=")
    assert predicted.tokens_per_s == pytest.approx(truth.tokens_per_s, rel=0.1)
    # given at the load a run would claim (closed loop: the capacity's whole clients), beside
    # the capacity it was taken from
    assert predicted.predicted_capacity is not None
    assert predicted.tokens_per_s <= predicted.predicted_capacity  # type: ignore[operator]
    lo, hi = predicted.interval  # type: ignore[misc]
    assert hi is not None and lo < predicted.tokens_per_s < hi
    assert predicted.usd_per_million_tokens == pytest.approx(
        0.5 / 3600 / predicted.tokens_per_s * 1e6  # type: ignore[operator]
    )
    # the probe's workload is not the run's (a file): said, not hidden
    assert any("NOT COMPARABLE: probe-other probed workload" in w for w in result.warnings)
    md = CliRunner().invoke(app, ["compare", str(a), str(probe), "--output", str(tmp_path / "o")])
    assert md.exit_code == 0, md.output
    assert "PREDICTED from its probe alone" in (tmp_path / "o" / "compare.md").read_text()


def test_probe_folders_alone_or_a_folder_of_neither_kind_are_refused(
    runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    a, _, _ = runs
    probe = _probe_folder(tmp_path, a)
    with pytest.raises(CompareError, match="at least one run folder"):
        compare([probe, probe], {})
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompareError, match="neither a run folder"):
        compare([a, tmp_path / "empty"], {})
    cli = CliRunner().invoke(app, ["compare", str(a), str(tmp_path / "empty")])
    assert cli.exit_code == 2 and "neither a run folder" in cli.output
