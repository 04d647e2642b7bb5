"""Several workers on one study (tuner/storage/shared.py).

The whole capability on a real PostgreSQL server (tests/postgres.py) with two real worker
processes on the fake engine, one of them SIGKILLed mid-trial; the pieces on SQLite: work done
once, the trial budget's slots, a dead worker's trial queued again, and no password written.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState
from typer.testing import CliRunner

from tests.postgres import PASSWORD
from tuner.cli.main import app
from tuner.engines.lifetime import leftovers
from tuner.options import redact
from tuner.storage.shared import Beat, SharedStudy

ROOT = Path(__file__).resolve().parents[2]


def _sqlite(tmp: Path) -> str:
    return f"sqlite:///{tmp / 'shared.db'}"


def test_redact_hides_a_password_only() -> None:
    assert redact("postgresql+psycopg://u:pw@h:5/db") == "postgresql+psycopg://u:***@h:5/db"
    assert redact("sqlite:///x.db") == "sqlite:///x.db"


def test_work_done_once_is_computed_by_one_worker_and_given_to_the_others(tmp_path: Path) -> None:
    """Worker b asks for the work while a computes it: b waits (it says so) and gets a's
    result; the work runs once."""
    url = _sqlite(tmp_path)
    b_waits = threading.Event()
    a = SharedStudy(url, "s", poll_s=0.05)
    b = SharedStudy(url, "s", poll_s=0.05, say=lambda m: b_waits.set() if "waiting" in m else None)
    calls: list[str] = []
    got: dict[str, object] = {}
    t = threading.Thread(target=lambda: got.update(b=b.once("base", lambda: {"value": 0}, "x")))

    def compute() -> dict[str, object]:
        calls.append("a")
        t.start()  # b asks while a computes
        assert b_waits.wait(timeout=30), "worker b never waited for a's work"
        return {"value": 42, "nan": float("nan")}

    first = a.once("base", compute, "x")
    t.join(timeout=30)
    assert calls == ["a"] and first[1] is True
    b_doc, b_computed = got["b"]  # type: ignore[misc]
    assert b_computed is False and b_doc["value"] == 42
    stored = b.result("base")
    assert stored is not None and stored["value"] == 42 and math.isnan(stored["nan"])


def test_a_stages_slots_are_its_trial_budget_across_workers(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)
    a, b = SharedStudy(url, "s"), SharedStudy(url, "s")
    claim_a, claim_b = a.slots("batching", 3), b.slots("batching", 3)
    held = [claim_a(), claim_b(), claim_a()]
    assert all(s is not None for s in held)
    assert claim_b() is None  # three, whoever takes them
    held[0].release()  # type: ignore[union-attr]  # not used: back in the pool
    again = claim_b()
    assert again is not None and claim_a() is None
    for s in (again, held[1], held[2]):
        s.done()  # type: ignore[union-attr]


def test_a_dead_workers_slot_goes_stale_and_is_queued_again(tmp_path: Path) -> None:
    url = _sqlite(tmp_path)
    a = SharedStudy(url, "s", heartbeat_s=1, grace_s=2)
    claim = a.slots("batching", 1)
    held = claim()
    assert held is not None
    held.beat.stop()  # the worker died: no more heartbeats
    time.sleep(3.5)
    b = SharedStudy(url, "s", heartbeat_s=1, grace_s=2)
    retry = b.slots("batching", 1)()
    assert retry is not None  # the stale slot was failed and queued again
    retry.done()
    study = optuna.load_study(study_name="s:batching:slots", storage=b.storage)
    states = sorted(t.state.name for t in study.get_trials())
    assert states == ["COMPLETE", "FAIL"]


def test_a_dead_workers_slot_taken_over_fails_its_trial_though_that_still_beats(
    tmp_path: Path,
) -> None:
    # The slot's heartbeat and the trial's are a beat apart: the slot can go stale first. Its
    # new owner must then fail the trial and queue it again, not spend the slot elsewhere.
    url = _sqlite(tmp_path)
    a = SharedStudy(url, "s", heartbeat_s=1, grace_s=2)
    held = a.slots("batching", 1)()
    assert held is not None
    stage, _ = a.study("batching")
    trial = stage.ask()
    trial.suggest_categorical("x", [1, 2, 3])
    held.hold(trial)
    beat = Beat(a.storage, trial._trial_id, 1)  # the trial still looks alive
    held.beat.stop()
    time.sleep(3.5)
    b = SharedStudy(url, "s", heartbeat_s=1, grace_s=2)
    retry = b.slots("batching", 1)()
    beat.stop()
    assert retry is not None
    stage_b, _ = b.study("batching")
    states = {t.number: t.state for t in stage_b.get_trials()}
    assert states[trial.number] == TrialState.FAIL
    (queued,) = stage_b.get_trials(states=(TrialState.WAITING,))
    assert queued.params == {"x": trial.params["x"]}  # the same configuration, next in line
    retry.done()


def test_storage_options_are_checked_before_anything_starts(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--model", "smollm2-135m", "--slo", "ttft=2s", "--output", str(tmp_path / "r")]
    for extra, needle in [
        (["--storage", "sqlite:///x.db"], "--storage and --study go together"),
        (["--storage", "http://x", "--study", "s"], "--storage must be a database URL"),
        (["--storage", "sqlite:///x.db", "--study", "a b"], "--study 'a b'"),
        (
            ["--storage", f"postgresql+psycopg://u:{PASSWORD}@127.0.0.1:1/db", "--study", "s"],
            "cannot open it",
        ),
    ]:
        res = runner.invoke(app, [*base, *extra])
        assert res.exit_code == 2, res.output
        assert needle in res.output and "Traceback" not in res.output
        assert PASSWORD not in res.output
    assert not (tmp_path / "r").exists()


WORKER = """
import sys
from pathlib import Path
from tests.unit.test_runner import HW, FakeEngine, _options
from tuner.run import stop
from tuner.run.runner import Runner

tmp, url, study = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
stop.install()
opts = _options(tmp, storage=url, study=study, trials=3, stages=["batching"],
                shared_heartbeat_s=1, shared_grace_s=4, command=["autotune", "--storage", url])
runner = Runner(opts, lambda m: print(m, flush=True), engine=FakeEngine(), hardware=HW)
print("RUN", runner.run_id, flush=True)
sys.exit(0 if runner.run().status == "complete" else 1)
"""


class Worker:
    """One ``autotune`` worker process (``script``: a Python program taking tmp, url, study)."""

    def __init__(self, tmp: Path, url: str, study: str, script: str = WORKER) -> None:
        tmp.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, str(tmp), url, study],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def run_id(self) -> str:
        return next(x.split()[1] for x in self.lines if x.startswith("RUN "))

    def measuring_a_stage_trial(self) -> bool:
        return any("(batching): ready" in x for x in self.lines)


@pytest.mark.timeout(240)
def test_two_workers_on_postgresql_one_killed_mid_trial(tmp_path: Path, postgres_url: str) -> None:
    two_workers_one_killed(tmp_path, postgres_url, WORKER, n_trials=3, wait_s=120)


def two_workers_one_killed(
    tmp_path: Path, postgres_url: str, script: str, n_trials: int, wait_s: float
) -> None:
    """Two workers on one study, the first to measure a stage trial SIGKILLed in it; the other
    must finish the study: every configuration measured once, the killed one's trial failed by
    its heartbeat and measured again, one report from the storage, no password written."""
    study = f"t{os.getpid()}{int(time.time()) % 100000}"
    a = Worker(tmp_path / "a", postgres_url, study, script)
    b = Worker(tmp_path / "b", postgres_url, study, script)
    try:
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            victim = next((w for w in (b, a) if w.measuring_a_stage_trial()), None)
            if victim is not None:
                break
            time.sleep(0.05)
        else:
            pytest.fail("no worker reached a stage trial:\n" + "".join(a.lines + b.lines))
        time.sleep(0.5)  # inside its first load point
        os.kill(victim.proc.pid, signal.SIGKILL)  # mid-trial: its slot and trial go stale
        survivor = a if victim is b else b
        assert survivor.proc.wait(timeout=wait_s * 4) == 0, "".join(survivor.lines[-30:])
    finally:
        for w in (a, b):
            if w.proc.poll() is None:
                w.proc.kill()
            w.proc.wait(timeout=30)
            w.reader.join(timeout=10)
    # The killed worker's engine went with it (its supervisor ends the group).
    deadline = time.monotonic() + 30
    while leftovers(victim.run_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not leftovers(victim.run_id)

    shared = SharedStudy(postgres_url, study)
    records = shared.records()
    numbers = [r["trial"]["number"] for r in records]
    assert len(numbers) == len(set(numbers))  # every number once
    stage = [r["trial"] for r in records if r["trial"]["stage"] == "batching"]
    params = [json.dumps(t["params"], sort_keys=True) for t in stage]
    assert len(params) == len(set(params)) == n_trials  # the budget across both; none twice
    trials = optuna.load_study(study_name=f"{study}:batching", storage=shared.storage)
    failed = [t for t in trials.get_trials() if t.state == TrialState.FAIL]
    assert failed, "the killed worker's trial was not failed by its heartbeat"
    # Each failed trial measured again by the survivor: its retry scored, or abandoned on its
    # points (PRUNED), with the same configuration.
    retried = {t.system_attrs.get("failed_trial"): t.params for t in trials.get_trials()
               if t.state in (TrialState.COMPLETE, TrialState.PRUNED)}  # fmt: skip
    assert all(retried.get(t.number) == t.params for t in failed), [
        (t.number, t.state.name, t.params, t.system_attrs.get("failed_trial"))
        for t in trials.get_trials()
    ]

    # One report from the shared study, the same as the survivor's.
    res = CliRunner().invoke(
        app, ["report", "--storage", postgres_url, "--study", study, "--output", str(tmp_path)]
    )
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / study / "report.json").read_text())
    assert report["recommended"] is not None and report["status"] == "complete"
    assert {t["number"] for t in report["trials"]} >= {t["number"] for t in stage}
    (own,) = (survivor.tmp / "results").glob("*/report.json")
    assert json.loads(own.read_text())["recommended"] == report["recommended"]
    # The password is in no file written and no line printed.
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.suffix in (".json", ".md", ".jsonl", ".log", ".journal"):
            assert PASSWORD not in path.read_text(errors="replace"), path
    assert PASSWORD not in "".join(a.lines + b.lines) + res.output
