"""Bad input through the real CLI: one clear line, exit 2, before any engine starts.

Each case builds what it needs in a temporary folder (a model folder without a tokenizer, a
space file that is not UTF-8, ...) and runs ``autotune`` or ``autotune probe`` with it. Cases
that need a tokenizer use the embedded default's own (SmolLM2-135M, installed by setup.sh).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.unit.test_runner import FAKE, FakeEngine
from tuner.cli.main import app
from tuner.engines.base import LaunchSpec
from tuner.engines.hardware import detect_hardware
from tuner.spaces.space import space_path

Case = Callable[[Path], list[str]]


def _no_tokenizer(tmp: Path) -> list[str]:
    model = tmp / "bare-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    return ["--model", str(model)]


def _not_utf8_workload(tmp: Path) -> list[str]:
    wl = tmp / "wl.jsonl"
    wl.write_bytes(b'{"prompt": "caf\xe9"}\n')
    return ["--workload", str(wl)]


def _not_utf8_space(tmp: Path) -> list[str]:
    space = tmp / "space.yaml"
    space.write_bytes(b"engine: vllm\ndevice: cpu\n# \xff\xfe\nstages: []\n")
    return ["--search-space", str(space)]


def _bad_pattern(tmp: Path) -> list[str]:
    text = space_path("vllm", "cpu").read_text(encoding="utf-8")
    assert 'no_effect_log: "Quantizing 0 layers"' in text
    space = tmp / "space.yaml"
    space.write_text(text.replace('"Quantizing 0 layers"', '"Quantizing ([0-9 layers"'))
    return ["--search-space", str(space)]


def _other_engine(tmp: Path) -> list[str]:
    return ["--search-space", str(space_path("transformers", "cpu"))]


def _other_device(tmp: Path) -> list[str]:
    other = "cuda" if detect_hardware().device == "cpu" else "cpu"
    return ["--search-space", str(space_path("vllm", other))]


TUNE: dict[str, tuple[Case, str]] = {
    "a model folder without a tokenizer": (_no_tokenizer, "no tokenizer loads from"),
    "a synthetic workload too short to build": (
        lambda tmp: ["--workload", "synthetic:input=3,output=8"],
        "a prompt of 3 tokens cannot be built",
    ),
    "a workload file that is not UTF-8": (_not_utf8_workload, "not UTF-8 text"),
    "a space file that is not UTF-8": (_not_utf8_space, "not UTF-8 text"),
    "a bad no_effect_log pattern": (_bad_pattern, "is not a regular expression"),
    "a space file for another engine": (_other_engine, "is for transformers on cpu"),
    "a space file for another device": (_other_device, "this run tunes vllm on"),
    "--startup-timeout 0": (lambda tmp: ["--startup-timeout", "0"], "--startup-timeout must be >"),
    "--tokenizer with an engine autotune starts": (
        lambda tmp: ["--tokenizer", "gpt2"],
        "--tokenizer is for --engine endpoint",
    ),
}


def _one_error_line(output: str, needle: str) -> None:
    errors = [line for line in output.splitlines() if line.startswith("autotune: error:")]
    assert len(errors) == 1, output
    assert needle in errors[0], output
    assert "Traceback" not in output
    assert output.strip().splitlines()[-1] == errors[0]  # nothing after it


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(TUNE))
def test_bad_tuning_input_is_one_line_and_exit_2_before_anything_starts(
    tmp_path: Path, case: str
) -> None:
    build, needle = TUNE[case]
    out = tmp_path / "results"
    args = ["--model", "smollm2-135m", "--slo", "ttft=2s", "--output", str(out)]
    res = CliRunner().invoke(app, [*args, *build(tmp_path)])
    assert res.exit_code == 2, res.output
    _one_error_line(res.output, needle)
    assert not out.exists()  # no run folder: nothing started


class FailsToStart(FakeEngine):
    """The fake engine, told to print an error and exit at start-up."""

    def launch_spec(
        self, model_path: str, args: list[str], env: dict[str, str], port: int
    ) -> LaunchSpec:
        spec = super().launch_spec(model_path, args, env, port)
        return LaunchSpec([*spec.argv, "--fail-start"], spec.env)


FAKE_SPACE = "engine: fake\ndevice: {device}\nstages: []\n"


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``--engine fake`` starts tests/fakes/openai_server.py with --fail-start."""
    from tuner.engines import ENGINES
    from tuner.runs import probe_run

    space = tmp_path / "fake-space.yaml"
    space.write_text(FAKE_SPACE.format(device=detect_hardware().device))
    monkeypatch.setitem(ENGINES, "fake", FailsToStart)
    monkeypatch.setattr(probe_run, "space_path", lambda engine, device: space)
    assert FAKE.is_file()
    return space


PROBE: dict[str, tuple[list[str], str]] = {
    "an endpoint without a scheme": (["--endpoint", "localhost:8000"], "must start with http://"),
    "an unknown engine": (
        ["--model", "smollm2-135m", "--engine", "vlm"],
        "engine 'vlm' is unknown",
    ),
    "an unknown model": (["--model", "no-such-model"], "model 'no-such-model' is neither"),
    "a too-short workload": (
        ["--model", "smollm2-135m", "--workload", "synthetic:input=2,output=4"],
        "cannot be built",
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(PROBE))
def test_bad_probe_input_is_one_line_and_exit_2(case: str, tmp_path: Path) -> None:
    args, needle = PROBE[case]
    res = CliRunner().invoke(app, ["probe", *args, "--output", str(tmp_path)])
    assert res.exit_code == 2, res.output
    _one_error_line(res.output, needle)


def test_probe_with_a_missing_space_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_engine: Path
) -> None:
    fake_engine.unlink()
    res = CliRunner().invoke(app, ["probe", "--model", "smollm2-135m", "--engine", "fake"])
    assert res.exit_code == 2, res.output
    _one_error_line(res.output, f"search space {fake_engine}")


@pytest.mark.timeout(60)
def test_probe_with_an_engine_that_fails_to_start(tmp_path: Path, fake_engine: Path) -> None:
    res = CliRunner().invoke(
        app, ["probe", "--model", "smollm2-135m", "--engine", "fake", "--output", str(tmp_path)]
    )
    assert res.exit_code == 2, res.output
    _one_error_line(res.output, "fake failed to start")
    log = (tmp_path / "probe" / "server.log").read_text()
    assert "Available memory" in log  # the fake's start-up failure, as it printed it
