"""tuner.engines.base.ServerProcess with the fake server script as the engine.

Each test starts real processes in their own process group and checks, by that group's id, that
nothing of it is left alive afterwards. Orphaned children are reaped by PID 1, which may take a
moment, so "gone" is polled for with a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from probes.client import LoadClient, run_load
from probes.workload import FileItem, FileWorkload, prepare_requests
from tuner.engines.base import EngineStartError, LaunchSpec, ServerProcess, free_port
from tuner.engines.vllm import VLLMEngine

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "openai_server.py"
MODEL = "fake-model"


def fake_spec(*extra: str, port: int | None = None) -> LaunchSpec:
    """The fake server's command line, vLLM-style arguments included (the fake ignores them)."""
    port = port or free_port()
    return LaunchSpec(
        [
            sys.executable,
            str(FAKE),
            "--model",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--ttft-ms",
            "1",
            "--itl-ms",
            "0",
            "--max-num-seqs",
            "8",
            *extra,
        ],
        {"FAKE_SERVER_ENV": "1"},
    )


def live_members(pgid: int) -> list[psutil.Process]:
    """Processes of the group that are still running (zombies are dead, merely unreaped)."""
    out = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def group_gone(pgid: int, within_s: float = 10.0) -> bool:
    """Whether the group ends within the deadline: first no live member (a SIGKILLed process
    takes a moment to die on a busy machine), then os.killpg(pgid, 0) raises
    ProcessLookupError (once PID 1 has reaped the orphans)."""
    deadline = time.monotonic() + within_s
    while live_members(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def assert_group_gone(pgid: int, within_s: float = 10.0) -> None:
    assert group_gone(pgid, within_s), f"process group {pgid} still has {live_members(pgid)}"


@pytest.fixture
def groups() -> Iterator[list[int]]:
    """Process groups a test started; whatever is left of them is killed afterwards."""
    started: list[int] = []
    yield started
    for pgid in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


@pytest.mark.timeout(60)
def test_wait_ready_returns_the_startup_time(tmp_path: Path, groups: list[int]) -> None:
    log = tmp_path / "logs" / "server.log"
    with ServerProcess(fake_spec(), log, startup_timeout_s=30) as sp:
        assert sp.proc is not None
        groups.append(sp.proc.pid)
        startup_s = sp.wait_ready(served_model=MODEL, poll_s=0.05)
        assert startup_s > 0
        assert sp.startup_s == startup_s
        assert sp.served_model == MODEL
        # it really serves
        wl = FileWorkload(path="x", items=(FileItem(prompt="a b", max_tokens=3),))
        reqs = prepare_requests(wl, 2, model=MODEL, tokenizer=None, seed=0)
        result = run_load(LoadClient(sp.base_url), reqs, concurrency=2)
        assert all(r.ok for r in result.records)
    assert_group_gone(groups[0])
    text = log.read_text()
    assert text.startswith("$ " + sys.executable)
    assert "FAKE_SERVER_ENV" in text


@pytest.mark.timeout(60)
def test_a_served_model_name_not_listed_falls_back_to_the_first(
    tmp_path: Path, groups: list[int]
) -> None:
    with ServerProcess(fake_spec(), tmp_path / "s.log", startup_timeout_s=30) as sp:
        assert sp.proc is not None
        groups.append(sp.proc.pid)
        sp.wait_ready(served_model="other", poll_s=0.05)
        assert sp.served_model == MODEL


@pytest.mark.timeout(60)
def test_a_server_that_dies_at_start_raises_with_the_engines_reason(
    tmp_path: Path, groups: list[int]
) -> None:
    engine = VLLMEngine()
    sp = ServerProcess(
        fake_spec("--fail-start"),
        tmp_path / "s.log",
        startup_timeout_s=45,
        classify=engine.classify_failure,
    )
    with sp, pytest.raises(EngineStartError) as exc:
        assert sp.proc is not None
        groups.append(sp.proc.pid)
        sp.wait_ready(poll_s=0.05)
    assert exc.value.reason.startswith("not enough free memory for the requested KV cache")
    assert "Available memory on node 0" in exc.value.reason
    assert exc.value.detail == "exit code 1"
    assert_group_gone(groups[0])


@pytest.mark.timeout(60)
def test_a_server_that_never_becomes_healthy_times_out(tmp_path: Path, groups: list[int]) -> None:
    port = free_port()
    spec = LaunchSpec([sys.executable, "-c", "import time; time.sleep(60)", "--port", str(port)])
    sp = ServerProcess(spec, tmp_path / "s.log", startup_timeout_s=1.0)
    with sp, pytest.raises(EngineStartError) as exc:
        assert sp.proc is not None
        groups.append(sp.proc.pid)
        sp.wait_ready(poll_s=0.05)
    assert exc.value.reason == "start-up timeout"
    assert "not ready after 1 s" in exc.value.detail
    assert "ConnectionRefusedError" in exc.value.detail  # the last check says what it saw
    assert_group_gone(groups[0])


@pytest.mark.timeout(60)
def test_on_wait_reports_progress(tmp_path: Path, groups: list[int]) -> None:
    waits: list[float] = []
    spec = LaunchSpec([sys.executable, "-c", "import time; time.sleep(60)", "--port", "1"])
    sp = ServerProcess(spec, tmp_path / "s.log", startup_timeout_s=0.3, on_wait=waits.append)
    with sp, pytest.raises(EngineStartError):
        assert sp.proc is not None
        groups.append(sp.proc.pid)
        sp.wait_ready(poll_s=0.05)
    assert waits and waits == sorted(waits)


@pytest.mark.timeout(60)
def test_stop_ends_the_whole_process_group(tmp_path: Path, groups: list[int]) -> None:
    sp = ServerProcess(fake_spec("--spawn-child"), tmp_path / "s.log", startup_timeout_s=30)
    sp.start()
    assert sp.proc is not None
    pgid = sp.proc.pid
    groups.append(pgid)
    sp.wait_ready(poll_s=0.05)
    assert len(live_members(pgid)) == 3  # the supervisor, the server and its child
    sp.stop()
    assert sp.proc is None
    assert_group_gone(pgid)
    sp.stop()  # a second stop is harmless


@pytest.mark.timeout(60)
def test_stop_kills_a_child_that_ignores_sigterm(tmp_path: Path, groups: list[int]) -> None:
    spec = fake_spec("--spawn-child", "--child-ignores-sigterm")
    sp = ServerProcess(spec, tmp_path / "s.log", startup_timeout_s=30)
    sp.start()
    assert sp.proc is not None
    pgid = sp.proc.pid
    groups.append(pgid)
    sp.wait_ready(poll_s=0.05)
    assert len(live_members(pgid)) == 3
    sp.stop(grace_s=1.0)
    assert_group_gone(pgid)


@pytest.mark.timeout(60)
def test_an_exception_inside_the_with_block_still_stops_the_group(
    tmp_path: Path, groups: list[int]
) -> None:
    class Boom(Exception):
        pass

    with (
        pytest.raises(Boom),
        ServerProcess(fake_spec("--spawn-child"), tmp_path / "s.log", startup_timeout_s=30) as sp,
    ):
        assert sp.proc is not None
        groups.append(sp.proc.pid)
        sp.wait_ready(poll_s=0.05)
        raise Boom
    assert_group_gone(groups[0])


@pytest.mark.timeout(60)
def test_children_of_a_server_that_died_at_start_are_stopped(
    tmp_path: Path, groups: list[int]
) -> None:
    # vLLM's API server can die while its engine-core child lives on, holding the memory.
    sp = ServerProcess(
        fake_spec("--fail-start", "--spawn-child"), tmp_path / "s.log", startup_timeout_s=30
    )
    with sp, pytest.raises(EngineStartError):
        assert sp.proc is not None
        groups.append(sp.proc.pid)
        sp.wait_ready(poll_s=0.05)
    assert_group_gone(groups[0], within_s=3.0)


@pytest.mark.timeout(60)
def test_start_runs_the_argv_in_a_new_session_with_the_env(tmp_path: Path) -> None:
    calls: list[tuple[list[str], dict[str, Any]]] = []

    def popen(argv: list[str], **kw: Any) -> subprocess.Popen:
        calls.append((argv, kw))
        return subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)

    spec = LaunchSpec([sys.executable, "--port", "8123"], {"VLLM_CPU_KVCACHE_SPACE": "4"})
    sp = ServerProcess(spec, tmp_path / "a" / "b.log", popen=popen)
    assert sp.port == 8123
    assert sp.base_url == "http://127.0.0.1:8123"
    sp.start()
    sp.stop(grace_s=1.0)
    ((argv, kw),) = calls
    # The engine's argv under the supervisor that ends its whole group with the tuner.
    assert argv[:2] == [sys.executable, "-c"] and argv[4:] == [sys.executable, "--port", "8123"]
    assert kw["start_new_session"] is True
    assert kw["stdin"] == subprocess.DEVNULL
    assert kw["stderr"] == subprocess.STDOUT
    assert kw["env"]["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert kw["env"]["PATH"] == os.environ["PATH"]  # added to the environment, not replacing it
    assert "shell" not in kw


def test_stop_before_start_is_harmless(tmp_path: Path) -> None:
    ServerProcess(LaunchSpec(["x", "--port", "1"]), tmp_path / "s.log").stop()


@pytest.mark.timeout(60)
def test_the_fake_script_fails_at_start_when_asked() -> None:
    # vLLM-style arguments it does not know are accepted and ignored
    argv = [sys.executable, str(FAKE), "--port", "1", "--fail-start", "--max-num-seqs", "8"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 1
    assert "Available memory on node 0" in done.stderr


@pytest.mark.timeout(60)
def test_a_second_signal_during_teardown_still_kills_the_group(
    tmp_path: Path, groups: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = fake_spec("--spawn-child", "--child-ignores-sigterm")
    sp = ServerProcess(spec, tmp_path / "s.log", startup_timeout_s=30)
    sp.start()
    assert sp.proc is not None
    pgid = sp.proc.pid
    groups.append(pgid)
    sp.wait_ready(poll_s=0.05)
    import tuner.engines.base as base_mod

    def interrupted(_: float) -> None:  # Ctrl-C again while the grace period runs
        raise KeyboardInterrupt

    monkeypatch.setattr(base_mod.time, "sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        sp.stop(grace_s=30.0)  # the child ignores SIGTERM: only a SIGKILL ends it
    monkeypatch.undo()
    with contextlib.suppress(ChildProcessError):  # reaped already, or reaped here
        os.waitpid(pgid, 0)
    assert_group_gone(pgid, within_s=5.0)


def test_a_missing_engine_program_is_a_start_error(tmp_path: Path) -> None:
    sp = ServerProcess(LaunchSpec(["/nonexistent/engine", "--port", "1"], {}), tmp_path / "s.log")
    with pytest.raises(EngineStartError, match="could not be run: /nonexistent/engine"):
        sp.start()


def test_the_run_marker_reaches_the_engine_and_its_children(
    tmp_path: Path, groups: list[int]
) -> None:
    from tuner.engines.lifetime import leftovers, sweep

    sp = ServerProcess(
        fake_spec("--spawn-child"), tmp_path / "s.log", startup_timeout_s=30, run_id="run-x1"
    )
    sp.start()
    assert sp.proc is not None
    groups.append(sp.proc.pid)
    sp.wait_ready(poll_s=0.05)
    found = leftovers("run-x1")
    assert len(found) == 3 and sp.proc.pid in found  # the supervisor, the server, its child
    assert not leftovers("run-x2")
    assert sorted(sweep("run-x1", grace_s=5.0)) == found
    assert not leftovers("run-x1")
    sp.stop()
