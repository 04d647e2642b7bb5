"""The run's Optuna storage opened as it is, with Optuna's own API (what optuna-dashboard reads:
``optuna-dashboard <run>/optuna.journal``): every trial of the report is there once, with its
parameters, its score, its state and why."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import FrozenTrial, TrialState


def test_every_trial_is_in_the_optuna_storage(fake_run: Path) -> None:
    report = json.loads((fake_run / "report.json").read_text())
    storage = JournalStorage(JournalFileBackend(str(fake_run / "optuna.journal")))
    studies = optuna.get_all_study_names(storage)
    assert studies == [s["name"] for s in report["stages"] if s["status"] == "run"]
    seen: dict[int, list[tuple[str, FrozenTrial]]] = {}
    for name in studies:
        for ft in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False):
            if ft.user_attrs["status"] == "known":  # the configuration the stage started from
                assert ft.user_attrs["autotune_trial"] == 0
                continue
            if ft.user_attrs.get("autotune_status") == "refused":  # never started
                assert ft.user_attrs["reason"].startswith("the engine would refuse it")
                continue
            # A configuration proposed again is told its first measurement: same trial number.
            seen.setdefault(ft.user_attrs["autotune_trial"], []).append((name, ft))
    assert sorted(seen) == [t["number"] for t in report["trials"]]
    rescored_later = {c["trials"][0] for c in report["comparisons"]}
    if report["recommended"] is not None:
        rescored_later.add(report["recommended"]["from_trial"])
    for t in report["trials"]:
        for name, ft in seen[t["number"]]:
            assert name == t["stage"]
            assert ft.params == t["params"]
            assert ft.user_attrs["autotune_status"] == t["status"]
            assert ft.user_attrs["reason"] == (t["rejected"] or t["error"] or "")
            if t["status"] == "ok":
                assert ft.state == TrialState.COMPLETE
                assert ft.value == t["told_tokens_per_s"]
                if t["told_tokens_per_s"] == t["score_tokens_per_s"]:
                    assert ft.user_attrs["capacity_load"] == t["estimate"]["load"]
                else:  # measured again after it was told: beside a newer trial, or confirmed
                    assert t["number"] in rescored_later
            elif t["status"] == "failed":
                assert ft.state == TrialState.COMPLETE and ft.value == 0.0
                assert ft.user_attrs["reason"] and ft.user_attrs["constraint"] > 0  # infeasible
