"""Fixtures shared by the unit and integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["tests.postgres"]


@pytest.fixture(scope="session")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of one complete run on the fake engine of test_runner (a real process, real
    per-request records; three trials, p99 TTFT <= 300 ms), shared by the tests that read a
    finished run: the page, the exports, the re-score, the comparison, the Optuna storage.
    They read it; a test that writes puts its files in a folder of its own."""
    from tests.unit.test_runner import HW, FakeEngine, _options
    from tuner.run.runner import Runner

    tmp = tmp_path_factory.mktemp("fake-run")
    runner = Runner(_options(tmp, trials=3), lambda _: None, engine=FakeEngine(), hardware=HW)
    report = runner.run()
    assert report.status == "complete" and report.recommended is not None
    return runner.out
