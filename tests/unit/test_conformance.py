"""Every engine adapter that launches a server, held to the same contract: its launch command
(absolute program, loopback host, the given port, the model), its reading of failure logs, and
teardown of its whole process group by ServerProcess (with a shim in place of the real program
that runs the fake server and a child of its own)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from tuner.engines import ENGINES, get_engine
from tuner.engines.base import EngineStartError, ServerProcess, free_port
from tuner.engines.transformers_serve import TransformersEngine
from tuner.engines.vllm import VLLMEngine

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fakes" / "openai_server.py"
LAUNCHING = sorted(n for n in ENGINES if get_engine(n).launches)
MODEL = "/models/m"


def _shim_engine(name: str, tmp: Path, extra: str = "") -> object:
    """The adapter with its program replaced by a script that runs the fake server."""
    for prog in ("python", "transformers"):
        p = tmp / prog
        p.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} --spawn-child {extra} "$@"\n')
        p.chmod(p.stat().st_mode | stat.S_IEXEC)
    if name == "vllm":
        return VLLMEngine(python=str(tmp / "python"))
    if name == "transformers":
        return TransformersEngine(python=str(tmp / "python"))
    raise AssertionError(f"no shim for engine {name}: add one with its adapter")


def test_every_registered_engine_is_covered() -> None:
    assert LAUNCHING == ["transformers", "vllm"]


@pytest.mark.parametrize("name", LAUNCHING)
def test_launch_command(name: str) -> None:
    engine = get_engine(name)
    spec = engine.launch_spec(MODEL, ["--x", "1"], {"A": "b"}, 8123)
    argv = spec.argv
    assert Path(argv[0]).is_absolute()
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert MODEL in argv and argv[-2:] == ["--x", "1"]
    # the contract (Engine.launch_spec): the configuration's arguments, and only they, follow
    # --port P
    assert spec.config_args == ["--x", "1"] and engine.launches is True
    assert spec.env == {"A": "b"}
    assert spec.with_port(9000).argv[argv.index("--port") + 1] == "9000"
    assert isinstance(engine.version(), str) and engine.version()


@pytest.mark.parametrize("name", LAUNCHING)
def test_failure_classification(name: str) -> None:
    engine = get_engine(name)
    oom = "Traceback (most recent call last):\n  ...\ntorch.OutOfMemoryError: out of memory\n"
    assert engine.classify_failure(oom, 1).startswith("out of memory")
    missing = "ModuleNotFoundError: No module named 'vllm'\n"
    assert engine.classify_failure(missing, 1).startswith("engine not installed")
    assert "code 3" in engine.classify_failure("", 3)
    assert len(engine.classify_failure("x" * 5000 + " Error: boom\n", 1)) < 400


@pytest.mark.parametrize("name", LAUNCHING)
@pytest.mark.timeout(60)
def test_teardown_stops_the_whole_group(name: str, tmp_path: Path) -> None:
    engine = _shim_engine(name, tmp_path)
    spec = engine.launch_spec(MODEL, [], {}, free_port())  # type: ignore[attr-defined]
    with ServerProcess(spec, tmp_path / "server.log", startup_timeout_s=30) as srv:
        srv.wait_ready()
        assert srv.proc is not None
        pgid = srv.proc.pid
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)
    assert "spawned child pid" in (tmp_path / "server.log").read_text()


@pytest.mark.parametrize("name", LAUNCHING)
@pytest.mark.timeout(60)
def test_a_failed_start_is_classified(name: str, tmp_path: Path) -> None:
    engine = _shim_engine(name, tmp_path, extra="--fail-start")
    spec = engine.launch_spec(MODEL, [], {}, free_port())  # type: ignore[attr-defined]
    with (
        ServerProcess(
            spec,
            tmp_path / "server.log",
            startup_timeout_s=30,
            classify=engine.classify_failure,  # type: ignore[attr-defined]
        ) as srv,
        pytest.raises(EngineStartError) as exc,
    ):
        srv.wait_ready()
    assert exc.value.reason and "exit" in str(exc.value)
