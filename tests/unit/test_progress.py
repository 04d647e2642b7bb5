"""Progress (tuner/run/progress.py): on a terminal a status line under the log lines (stage,
trial k of n, the configuration, the best so far, elapsed and time left); elsewhere plain lines
only. On the fake engine of test_runner (a real process)."""

from __future__ import annotations

import io
import re
from pathlib import Path

from rich.console import Console

from tests.unit.test_runner import HW, FakeEngine, _options
from tuner.run.progress import Display
from tuner.run.runner import Runner


def _run(tmp_path: Path, console: Console) -> tuple[str, Display]:
    display = Display(console)
    Runner(_options(tmp_path, time_budget_s=600.0), display, engine=FakeEngine(), hardware=HW).run()
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue(), display


def test_a_terminal_gets_the_status_line(tmp_path: Path) -> None:
    out, display = _run(tmp_path, Console(file=io.StringIO(), force_terminal=True, width=240))
    assert "trial 1 (batching): starting" in out  # the log lines
    assert "stage batching | trial 1 of up to 2 | trial 1 (batching): max_concurrent=8" in out
    assert re.search(r"best \d+ tok/s", out)  # a score, once the baseline has one
    assert "elapsed, " in out and " left" in out
    assert display.live is None  # stopped with the run


def test_elsewhere_plain_lines_only(tmp_path: Path) -> None:
    out, _ = _run(tmp_path, Console(file=io.StringIO(), force_terminal=False))
    assert "trial 1 (batching): starting" in out
    assert "elapsed" not in out and "\x1b[" not in out
