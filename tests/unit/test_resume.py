"""Resume: a run stopped mid-trial continues in its folder without measuring again what
finished (tuner/run/checkpoint.py), on the fake engine of test_runner (a real process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tuner.engines.base as base_mod
from tests.unit.test_runner import HW, FakeEngine, _options
from tuner.cli.main import app
from tuner.run.runner import Runner
from tuner.storage.store import FolderStore


def _spy_on_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folders (trial number, "confirmation") of every engine started from now on."""
    started: list[str] = []
    real_start = base_mod.ServerProcess.start

    def spy(self: base_mod.ServerProcess) -> None:
        started.append(self.log_path.parent.name)
        real_start(self)

    monkeypatch.setattr(base_mod.ServerProcess, "start", spy)
    return started


def _starts(lines: list[str]) -> list[str]:
    return [line for line in lines if ": starting fake" in line]


@pytest.mark.timeout(180)
def test_a_run_stopped_in_trial_2_resumes_without_measuring_0_and_1_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = _options(tmp_path, time_budget_s=600.0)
    first: list[str] = []

    def stop_at_trial_2(line: str) -> None:
        first.append(line)
        if "trial 2 (batching): starting" in line:
            raise KeyboardInterrupt

    started_1 = _spy_on_starts(monkeypatch)
    r1 = Runner(opts, stop_at_trial_2, engine=FakeEngine(), hardware=HW)
    part = r1.run()
    assert part.status == "interrupted"
    store = FolderStore(r1.out)
    assert sorted(store.checkpoints()) == [0, 1]
    # The baseline and trial 1, and a side-by-side repeat of the two when the noise made them
    # too close to call (its log lies in the baseline's folder): all of them before trial 2.
    assert "002" not in started_1
    starts_1 = len(started_1)
    assert store.checkpoints()[1].engine_starts == starts_1
    assert not store.load_meta().done
    # Where the budget looked too short for trial 2 beside an unconfirmed trial 1 (a slow
    # moment of a loaded machine), trial 1 was confirmed on its own server before trial 2.
    placed = store.checkpoints()[1].trial_confirmed is not None
    before = json.loads((r1.out / "report.json").read_text())
    elapsed_1 = before["timing"]["wall_s"]

    second: list[str] = []
    started = _spy_on_starts(monkeypatch)
    r2 = Runner(opts, second.append, engine=FakeEngine(), hardware=HW, resume=r1.out)
    report = r2.run()
    assert report.status == "complete" and r2.out == r1.out and r2.run_id == r1.run_id
    data = json.loads((r1.out / "report.json").read_text())
    # Trials 0 and 1 came back from their checkpoints: the only starts are trial 2's and the
    # confirmation's (none if trial 1's confirmation came back with it).
    want = ["002"] if placed else ["002", "confirmation"]
    assert started == want, "\n".join(["run 1:", *first, "run 2:", *second])
    assert not _starts([line for line in second if "baseline" in line or "trial 1" in line])
    assert any("trial 1: ok, as measured before the resume" in line for line in second)
    assert data["baseline"] == before["baseline"]
    assert data["trials"][0] == before["trials"][0]
    # Trial 2, interrupted before it finished, was measured again from the start.
    assert data["trials"][1]["params"] == {"max_concurrent": 8, "broken": True}
    assert data["trials"][1]["status"] == "failed"
    assert data["recommended"]["from_trial"] == 1
    assert data["salt"] == before["salt"]
    # Engine starts and time are counted over the whole run: run 1's, trial 2's, the
    # confirmation's.
    assert data["timing"]["engine_starts"] == starts_1 + len(want)
    assert data["timing"]["wall_s"] > elapsed_1 * 0.5
    assert data["stages"][0]["trials"] == [1, 2]
    meta = FolderStore(r1.out).load_meta()
    assert meta.done and meta.resumes == 1
    assert (r1.out / "optuna.journal.before-resume-1").exists()
    # The interrupted attempt's folder was kept aside, not deleted.
    assert (r1.out / "trials" / "002.stale-1").is_dir()


@pytest.mark.timeout(180)
def test_a_resumed_run_reports_what_an_uninterrupted_one_does(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    whole = Runner(
        _options(tmp_path / "a", salt="fixed"), lambda _: None, engine=FakeEngine(), hardware=HW
    ).run()
    opts = _options(tmp_path / "b", salt="fixed")

    def stop_in_confirmation(line: str) -> None:
        if "confirmation: trial" in line:
            raise KeyboardInterrupt

    r1 = Runner(opts, stop_in_confirmation, engine=FakeEngine(), hardware=HW)
    assert r1.run().status == "interrupted"
    resumed = Runner(opts, lambda _: None, engine=FakeEngine(), hardware=HW, resume=r1.out).run()

    def shape(rep: object) -> list[tuple[int, dict, str]]:
        return [(t.number, t.params, t.status) for t in rep.trials]  # type: ignore[attr-defined]

    assert shape(resumed) == shape(whole)
    assert resumed.recommended is not None and whole.recommended is not None
    assert resumed.recommended.from_trial == whole.recommended.from_trial
    assert [s.name for s in resumed.stages] == [s.name for s in whole.stages]
    assert [s.trials for s in resumed.stages] == [s.trials for s in whole.stages]


def test_resume_takes_no_other_tuning_option(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["--resume", str(tmp_path), "--trials", "3"])
    assert res.exit_code == 2
    assert "drop --trials" in res.output


@pytest.mark.parametrize(
    ("meta", "needle"),
    [
        (None, "not an autotune run folder"),
        (
            '{"schema_version": 1, "run_id": "r", "salt": "s", "options": {}, "done": true}',
            "is complete: nothing to resume",
        ),
        (
            '{"schema_version": 1, "run_id": "r", "salt": "s", "options": {"trials": -1}}',
            "run.json",
        ),
    ],
)
def test_resume_refuses_what_it_cannot_continue(
    tmp_path: Path, meta: str | None, needle: str
) -> None:
    if meta is not None:
        (tmp_path / "run.json").write_text(meta)
    res = CliRunner().invoke(app, ["--resume", str(tmp_path)])
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_resume_of_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["--resume", str(tmp_path / "nope")])
    assert res.exit_code == 2 and "no such folder" in res.output


SPACE_TPE = """
engine: fake
device: cpu
baseline:
  args: [--max-concurrent, "2"]
common:
  args: [--itl-ms, "10"]
stages:
  - name: batching
    knobs:
      - {name: max_concurrent, type: int, low: 1, high: 16, default: 2, flag: --max-concurrent}
"""


@pytest.mark.timeout(240)
def test_the_seeded_sampler_replays_past_its_random_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No candidates: trials 1-3 are TPE's seeded random start, trial 4 its first model-based
    proposal from the first three outcomes. Stopped in trial 5, the resumed search must ask
    for the same four configurations again and get each from its checkpoint."""
    opts = _options(tmp_path, trials=6, salt="tpe")
    (tmp_path / "fake.yaml").write_text(SPACE_TPE)

    def stop_at_trial_5(line: str) -> None:
        if "trial 5 (batching): starting" in line:
            raise KeyboardInterrupt

    r1 = Runner(opts, stop_at_trial_5, engine=FakeEngine(), hardware=HW)
    assert r1.run().status == "interrupted"
    first = FolderStore(r1.out).checkpoints()
    assert sorted(first) == [0, 1, 2, 3, 4]
    started = _spy_on_starts(monkeypatch)
    lines: list[str] = []
    r2 = Runner(opts, lines.append, engine=FakeEngine(), hardware=HW, resume=r1.out)
    report = r2.run()
    assert report.status == "complete"
    replayed = [t for t in report.trials if t.number <= 4]
    assert [t.params for t in replayed] == [first[n].params for n in (1, 2, 3, 4)]
    assert sum("as measured before the resume" in line for line in lines) == 5  # 0-4
    assert not {"000", "001", "002", "003", "004"} & set(started)
    assert "005" in started  # the interrupted one, measured again


def test_a_restore_puts_the_budget_where_the_checkpoint_left_it(tmp_path: Path) -> None:
    from tuner.run import checkpoint

    opts = _options(tmp_path, time_budget_s=1000.0)
    r = Runner(opts, lambda _: None, engine=FakeEngine(), hardware=HW).state
    now = [5000.0]
    r.clock.now = r.budget.now = lambda: now[0]
    r.clock.t0 = 4990.0  # this process has run 10 s
    r.budget.deadline = 4990.0 + 1000.0
    store = FolderStore(tmp_path / "store")
    r.store = store
    from tests.unit.test_store import _checkpoint

    cp = _checkpoint(1, elapsed_s=400.0, stage_left_s=120.0, samples={})
    checkpoint.restore(r, cp)
    assert r.clock.elapsed() == pytest.approx(400.0)
    assert r.budget.left() == pytest.approx(600.0)  # the whole run's budget, less 400 s spent
    assert r.budget.stage_fits(119.0) and not r.budget.stage_fits(121.0)
    assert r.clock.engine_starts == cp.engine_starts
