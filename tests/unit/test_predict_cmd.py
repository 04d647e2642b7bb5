"""`autotune predict`: a configuration from a recorded run's calibration, no engine started;
bad input is one line and exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from tuner.cli.main import app

SIMULATED = "        flag: --max-concurrent\n        sim: max_num_seqs\n"


def _simulated_run(fake_run: Path, tmp_path: Path) -> Path:
    """The fake run, with its space naming the batch limit as simulated (sim:)."""
    run = tmp_path / "run"
    shutil.copytree(fake_run, run)
    data = json.loads((run / "report.json").read_text())
    space = Path(data["options"]["space_file"])
    text = space.read_text()
    assert "        flag: --max-concurrent\n" in text
    copy = tmp_path / "space.yaml"
    copy.write_text(text.replace("        flag: --max-concurrent\n", SIMULATED, 1))
    data["options"]["space_file"] = str(copy)
    (run / "report.json").write_text(json.dumps(data))
    return run


def test_predict_prints_a_capacity_with_its_interval_and_evidence(
    fake_run: Path, tmp_path: Path
) -> None:
    run = _simulated_run(fake_run, tmp_path)
    res = CliRunner().invoke(app, ["predict", str(run), "--param", "max_concurrent=4", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    cap = out["capacity"]
    # the fake run measured a closed loop: the capacity is a concurrency
    assert out["basis"] == "calibrated" and out["load_model"] == "concurrency"
    assert cap["concurrency"] > 0 and cap["output_tokens_per_s"] > 0
    lo, hi = cap["interval"]["output_tokens_per_s"]
    assert lo <= cap["output_tokens_per_s"] and (hi is None or hi >= cap["output_tokens_per_s"])
    ev = out["evidence"]
    assert ev["build_distance"] == 0 and ev["measured_builds"]
    assert ev["scheduler_knobs"]["max_concurrent"]["asked"] == 4
    # more slots serve more: the prediction follows the batch limit
    one = CliRunner().invoke(app, ["predict", str(run), "--param", "max_concurrent=1", "--json"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout)["capacity"]["output_tokens_per_s"] < cap["output_tokens_per_s"]


def test_bad_input_is_one_line_and_exit_2(fake_run: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["predict", str(tmp_path / "nothing")])
    assert res.exit_code == 2 and "is not an autotune run folder" in res.output
    res = runner.invoke(app, ["predict", str(fake_run), "--param", "bogus=1"])
    assert res.exit_code == 2 and "knob 'bogus' is unknown; known: " in res.output
    res = runner.invoke(app, ["predict", str(fake_run), "--load", "sideways"])
    assert res.exit_code == 2 and "--load 'sideways' is unknown" in res.output
    # a space that names no simulated batch limit cannot be predicted, and says why
    res = runner.invoke(app, ["predict", str(fake_run)])
    assert res.exit_code == 2 and "names no max_num_seqs knob" in res.output


def test_params_read_as_the_recommendation_line_prints_them() -> None:
    from tuner.runs.probe_run import parse_params

    line = ["uvicorn_access_log=False", "enforce_eager=True", "max_num_seqs=8", "dtype=auto"]
    assert parse_params(line) == {
        "uvicorn_access_log": False,
        "enforce_eager": True,
        "max_num_seqs": 8,
        "dtype": "auto",
    }
    assert parse_params(["enforce_eager=false"]) == {"enforce_eager": False}
