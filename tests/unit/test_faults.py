"""Faults injected into a real engine process (the fake engine, on cue), one per case: the run
goes on, every finished trial is kept, the failed configuration is told to Optuna as violating
its constraint, and nothing of the engine's session is left running."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from tests.unit.test_runner import HW, FakeEngine, _options
from tuner.engines.base import LaunchSpec
from tuner.engines.lifetime import leftovers
from tuner.run.runner import Runner
from tuner.search.study import CONSTRAINT

DIES = ("failed",)
PARTIAL = ("infeasible", "abandoned")  # some requests fail: over the error-rate limit
# fault -> (the fake's flags for trial 1, options, statuses trial 1 may end with, error text)
# The last field: the text the trial's error holds (the engine died or did not start), or None
# where requests failed and the engine lived on (then a point counted them as failed).
CASES: dict[str, tuple[list[str], dict[str, object], tuple[str, ...], str | None]] = {
    "exits at start-up": (["--fail-start"], {}, DIES, "fake failure"),
    "hangs at start-up": (["--hang"], {"startup_timeout_s": 4.0}, DIES, "start-up timeout"),
    "dies mid-measurement": (["--die-after", "25"], {}, DIES, "the engine died"),
    "runs out of memory under load": (["--die-above", "3"], {}, DIES, "exit code 137"),
    "answers HTTP 500 to some requests": (["--error-every", "4"], {}, PARTIAL, None),
    "breaks the stream of some requests": (["--break-every", "4"], {}, PARTIAL, None),
    "a request hangs": (["--hang-every", "9"], {"request_timeout_s": 2.0}, PARTIAL, None),
    "the engine program is missing": (["MISSING"], {}, DIES, "could not be run"),
}


class Faulty(FakeEngine):
    """Trial 1 (the space's first candidate: a batch limit of 8) gets the fault."""

    def __init__(self, flags: list[str]) -> None:
        self.flags = flags

    def launch_spec(
        self, model_path: str, args: list[str], env: dict[str, str], port: int
    ) -> LaunchSpec:
        spec = super().launch_spec(model_path, args, env, port)
        i = spec.argv.index("--max-concurrent")
        if spec.argv[i + 1] != "8" or "--fail-start" in spec.argv:
            return spec
        if self.flags == ["MISSING"]:
            return LaunchSpec(["/nonexistent/engine", *spec.argv[1:]], spec.env)
        return LaunchSpec([*spec.argv, *self.flags], spec.env)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fault", sorted(CASES))
def test_a_fault_in_one_configuration_costs_only_that_configuration(
    tmp_path: Path, fault: str
) -> None:
    flags, kw, statuses, error = CASES[fault]
    lines: list[str] = []
    runner = Runner(_options(tmp_path, **kw), lines.append, engine=Faulty(flags), hardware=HW)
    report = runner.run()
    assert report.status == "complete"
    data = json.loads((runner.out / "report.json").read_text())
    t1 = data["trials"][0]
    assert t1["params"] == {"max_concurrent": 8, "broken": False}
    assert t1["status"] in statuses, (t1["status"], t1["error"])
    if error is None:  # the engine lived: the failed requests are in its points' figures
        failed = [p["metrics"]["n_failed"] for p in t1["points"]]
        assert failed and max(failed) > 0, failed
    else:
        assert t1["error"] is not None and error in t1["error"], t1["error"]
    assert t1["score_tokens_per_s"] is None
    # Nothing finished is lost: the baseline and both trials are in the report and on disk.
    assert data["baseline"]["status"] == "ok"
    assert [t["number"] for t in data["trials"]] == [1, 2]
    for n in (0, 1, 2):
        assert (runner.out / "trials" / f"{n:03d}" / "trial.json").is_file()
    assert data["recommended"] is not None and data["recommended"]["from_trial"] == 0
    # Optuna learns the region is bad: a finished trial that violates its constraint.
    study = optuna.load_study(
        study_name="batching",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(runner.out / "optuna.journal"))
        ),
    )
    told = [
        t
        for t in study.trials
        if t.params.get("max_concurrent") == 8 and not t.params.get("broken")
    ]
    assert told
    if t1["status"] == "abandoned":  # beaten before its capacity was found: pruned
        assert told[0].state == optuna.trial.TrialState.PRUNED
    else:
        assert told[0].state == optuna.trial.TrialState.COMPLETE
        assert told[0].value == 0.0 and told[0].constraints[CONSTRAINT] > 0
    assert not leftovers(runner.run_id)  # no process of any engine this run started
