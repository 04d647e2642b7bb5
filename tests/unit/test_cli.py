"""tuner.cli.main: --help, and every bad input refused with one clear line and exit code 2.

Only refusals are run here: each case fails validation before anything starts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli.main import app, parse_duration

runner = CliRunner()


def test_help() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    assert "--slo" in result.output
    assert "--trials" in result.output
    assert "--workload" in result.output
    assert "--model" in result.output
    assert "--accept-divergence" in result.output and "--draft-model" in result.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--slo", "ttft=fast"], "SLO 'ttft=fast' is malformed"),
        (["--slo", "ttft@p42=1s"], "p42 is not supported"),
        (["--slo", "ttfb=1s"], "metric 'ttfb' is unknown"),
        (["--slo", "ttft=1s", "--slo", "ttft=2s"], "given twice"),
        (["--slo", "quality=1%"], "give at least one latency SLO"),
        (["--workload", "synthetic:input=abc,output=8"], "bad part 'input=abc'"),
        (["--workload", "no/such/file.jsonl"], "nor an existing file"),
        (["--engine", "vlm"], "engine 'vlm' is unknown; known: endpoint, transformers, vllm"),
        (["--engine", "endpoint"], "--engine endpoint needs --endpoint URL"),
        (["--engine", "endpoint", "--endpoint", "localhost:8000"], "is not an http(s) URL"),
        (["--endpoint", "http://127.0.0.1:8000"], "--endpoint is for --engine endpoint"),
        (["--trials", "-1"], "--trials must be >= 0, got -1"),
        (["--time-budget", "15x"], "duration '15x' is malformed"),
        (["--time-budget", "soon"], "duration 'soon' is malformed"),
        (["--startup-timeout", "5 minutes"], "is malformed"),
        (["--load-margin", "100%"], "--load-margin must be in [0%, 100%), got 100%"),
        (["--headroom", "-5"], "--headroom must be in [0%, 100%), got -5%"),
        (["--load", "burst"], "--load 'burst' is unknown; known: rate, concurrency"),
        (["--neighbour-cpu", "lots"], "--neighbour-cpu 'lots' is not a percentage"),
        (["--neighbour-cpu", "150%"], "--neighbour-cpu must be <= 100, got 150"),
        (["--max-error-rate", "1.5"], "--max-error-rate must be in [0, 1)"),
        (["--max-error-rate", "-0.1"], "--max-error-rate must be in [0, 1)"),
        (["--search-space", "no/such/space.yaml"], "--search-space no/such/space.yaml does not"),
        (["--draft-model", "./no/such/draft"], "--draft-model ./no/such/draft is not a folder"),
        (["--eagle-model", "/no/such/eagle"], "--eagle-model /no/such/eagle is not a folder"),
        (["--quantized-model", "~/no/such/q"], "--quantized-model ~/no/such/q is not a folder"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["--model", "smollm2-135m", *args])
    assert result.exit_code == 2, result.output
    assert "autotune: error:" in result.output
    assert needle in result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_missing_model_is_exit_2() -> None:
    result = runner.invoke(app, ["--slo", "ttft=1s"])
    assert result.exit_code == 2
    assert "autotune: error: --model is required" in result.output
    assert "Traceback" not in result.output


def test_the_error_goes_to_stderr() -> None:
    result = runner.invoke(app, ["--model", "m", "--trials", "-3"])
    assert result.exit_code == 2
    assert "autotune: error:" in result.stderr
    assert "autotune: error:" not in result.stdout


def test_a_bad_option_type_is_a_usage_error() -> None:
    result = runner.invoke(app, ["--model", "m", "--trials", "many"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_the_workload_file_is_checked_before_anything_starts(tmp_path: Path) -> None:
    f = tmp_path / "w.jsonl"
    f.write_text('{"prompt": "hi"}\n{"nope": 1}\n')
    result = runner.invoke(app, ["--model", "m", "--workload", str(f)])
    assert result.exit_code == 2
    assert f"{f}:2:" in result.output


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("15m", 900.0),
        ("1h30m", 5400.0),
        ("1h30m15s", 5415.0),
        ("1.5h", 5400.0),
        ("2.5m", 150.0),
        ("120", 120.0),
        ("2.5", 2.5),
        (" 15M ", 900.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "m", "15x", "1h 30m", "-5s", "ten minutes", "1h30", "s15"])
def test_parse_duration_rejects_malformed(text: str) -> None:
    with pytest.raises(ValueError, match="malformed; forms: 90s, 15m, 1h30m"):
        parse_duration(text)


@pytest.mark.parametrize(("flag", "expected"), [([], None), (["--neighbour-cpu", "0"], 0.0)])
def test_the_neighbour_is_auto_unless_given(
    flag: list[str], expected: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Left out, --neighbour-cpu is decided by the run (None here: tuner/run/runner.py decides it
    on the machine and says so); given, it is what was given."""
    from tuner import api

    seen: list[object] = []

    def tune(opts: object, progress: object) -> None:
        seen.append(getattr(opts, "neighbour_cpu_pct", "missing"))
        raise api.UserError("stop here")

    monkeypatch.setattr(api, "tune", tune)
    result = runner.invoke(app, ["--model", "smollm2-135m", *flag])
    assert result.exit_code == 2 and "stop here" in result.output
    assert seen == [expected]


def test_the_defaults_are_the_options_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Left out, every flag is what tuner/options/ says: the CLI writes no default of its own."""
    from probes.slo import parse_slos
    from tuner import api
    from tuner.options import DEFAULT_SLO, DEFAULT_WORKLOAD, TuneOptions

    seen: list[TuneOptions] = []

    def tune(opts: TuneOptions, progress: object) -> None:
        seen.append(opts)
        raise api.UserError("stop here")

    monkeypatch.setattr(api, "tune", tune)
    result = runner.invoke(app, ["--model", "smollm2-135m"])
    assert result.exit_code == 2 and "stop here" in result.output
    (opts,) = seen
    assert opts.slos == parse_slos([DEFAULT_SLO])
    assert opts.workload.label == DEFAULT_WORKLOAD
    own = TuneOptions(model="m", slos=opts.slos, workload=opts.workload)
    taken = {"engine", "trials", "output_dir", "max_error_rate", "seed", "load_model"}
    taken |= {"startup_timeout_s", "request_timeout_s", "headroom", "load_margin"}
    taken |= {"serving_model", "accept_divergence", "salt", "time_budget_s", "stages"}
    for name in sorted(taken):
        assert getattr(opts, name) == getattr(own, name), name
