"""Ctrl-C on a real tuning process (the fake engine): the first finishes the load point being
measured, writes it and stops; the second stops at once; both leave no engine running."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuner.engines.lifetime import leftovers

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys
from pathlib import Path
from tests.unit.test_runner import HW, FakeEngine, _options
from tuner.run import stop
from tuner.run.runner import Runner

tmp = Path(sys.argv[1])
stop.install()
class WithChild(FakeEngine):  # an engine with a child of its own, as vLLM's engine core
    def launch_spec(self, *a, **k):
        spec = super().launch_spec(*a, **k)
        return type(spec)([*spec.argv, "--spawn-child"], spec.env)

runner = Runner(_options(tmp, search_min_requests=200), lambda m: print(m, file=sys.stderr,
                flush=True), engine=WithChild(), hardware=HW)
print(runner.run_id, file=sys.stderr, flush=True)
sys.exit(130 if runner.run().status == "interrupted" else 0)
"""


def _start(tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _read_until(proc: subprocess.Popen[str], needle: str, lines: list[str]) -> None:
    assert proc.stderr is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if needle in line:
            return
    pytest.fail(f"{needle!r} never came; got {lines[-5:]}")


def _start_until_ready(tmp_path: Path) -> tuple[subprocess.Popen[str], list[str], str]:
    """The tuning process, once its baseline engine is ready; its lines so far; its run id."""
    proc = _start(tmp_path)
    lines: list[str] = []
    _read_until(proc, "baseline: ready", lines)
    return proc, lines, _run_id(lines)


def _run_id(lines: list[str]) -> str:
    line = next(x for x in lines if "] run " in x)  # "[00:00] run <id>; results in ..."
    return line.split("] run ", 1)[1].split(";", 1)[0]


def _finish(proc: subprocess.Popen[str], lines: list[str]) -> int:
    assert proc.stderr is not None
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines += err.splitlines(keepends=True) if err else []
    return proc.returncode


@pytest.mark.timeout(120)
def test_the_first_ctrl_c_finishes_the_point_and_writes_it(tmp_path: Path) -> None:
    proc, lines, run_id = _start_until_ready(tmp_path)
    time.sleep(0.5)  # inside the first point (200 requests at c=2: several seconds)
    os.killpg(proc.pid, signal.SIGINT)
    assert _finish(proc, lines) == 130
    text = "".join(lines)
    assert "stopping after the current load point" in text
    out = tmp_path / "results" / run_id
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "interrupted"
    trial = json.loads((out / "trials" / "000" / "trial.json").read_text())
    # The point under way when Ctrl-C came was finished and written, all its requests in.
    assert len(trial["points"]) == 1
    p = trial["points"][0]
    assert p["metrics"]["n_requests"] == 200
    assert len(Path(p["records_file"]).read_text().splitlines()) == 200
    assert "--resume" in text
    assert not leftovers(run_id)


@pytest.mark.timeout(120)
def test_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    proc, lines, run_id = _start_until_ready(tmp_path)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    assert _finish(proc, lines) == 130
    out = tmp_path / "results" / run_id
    assert json.loads((out / "report.json").read_text())["status"] == "interrupted"
    # The point under way was dropped, not half-written.
    tdir = out / "trials" / "000"
    assert not list(tdir.glob("*.jsonl"))
    trial_json = tdir / "trial.json"
    assert not trial_json.exists() or json.loads(trial_json.read_text())["points"] == []
    assert not leftovers(run_id)


@pytest.mark.timeout(120)
def test_sigkill_of_the_tuner_takes_its_engine_along(tmp_path: Path) -> None:
    proc, _, run_id = _start_until_ready(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)  # the tuner only: its engine is in a session of its own
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while leftovers(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not leftovers(run_id)  # the engine and its child died with the tuner


@pytest.mark.parametrize("runner", ["asyncio", "uvloop"])
def test_a_second_ctrl_c_inside_an_event_loop_cannot_be_swallowed(runner: str) -> None:
    """aiohttp turns an exception raised in its protocol callbacks into ClientPayloadError:
    a second Ctrl-C landing there became a failed request and the point ran on (1 time in 15
    on the AMD machine). Raised from a callback of the loop's own, it gets out."""
    import asyncio
    import contextlib

    from tuner.run import stop

    ran_on = []

    async def a_point() -> None:
        for _ in range(2):  # both presses land inside code that swallows everything
            with contextlib.suppress(BaseException):
                stop.STOP.on_sigint(signal.SIGINT, None)
        for _ in range(100):
            await asyncio.sleep(0.01)
        ran_on.append(True)

    restore = stop.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            if runner == "uvloop":
                import uvloop

                uvloop.run(a_point())
            else:
                asyncio.run(a_point())
    finally:
        restore()
    assert not ran_on


def test_a_stop_now_queued_on_a_loop_that_ends_first_is_raised_by_the_next_check() -> None:
    """A SIGTERM landing while an event loop shuts down is queued as a callback the loop never
    runs; it must not be lost: the next check raises it (not as the first Ctrl-C's stop)."""
    import asyncio

    from tuner.run import stop

    async def a_point_ending() -> None:
        asyncio.get_running_loop().stop()  # ends after this step, before what it queues
        stop.sigterm(signal.SIGTERM, None)

    restore = stop.install()
    try:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(a_point_ending())
        loop.close()  # the queued callback never ran
        with pytest.raises(KeyboardInterrupt) as raised:
            stop.check()
        assert not isinstance(raised.value, stop.StopRequested)
        stop.check()  # raised once, then clear
    finally:
        restore()
