"""tuner.search.study: one Optuna stage with a scripted evaluate (no engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.search.study import Outcome, config_key, run_stage
from tuner.spaces.space import Stage

STAGE = Stage.model_validate(
    {
        "name": "speculative",
        "knobs": [
            {
                "name": "method",
                "type": "categorical",
                "default": "none",
                "options": {"none": {}, "ngram": {"args": ["--ngram"]}},
            },
            {
                "name": "k",
                "type": "int",
                "low": 1,
                "high": 8,
                "flag": "--k",
                "when": {"method": ["ngram"]},
            },
        ],
        "candidates": [{"method": "ngram", "k": 3}],
    }
)


def test_conditional_knobs_are_sampled_only_when_active(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def evaluate(params: dict[str, Any]) -> Outcome:
        seen.append(params)
        return Outcome("ok", float(params.get("k", 0)), -0.1)

    result = run_stage(
        STAGE,
        evaluate,
        storage=tmp_path / "j.log",
        n_trials=6,
        seed=1,
        known=[({"method": "none"}, Outcome("ok", 0.5, -0.1))],
    )
    assert seen[0] == {"method": "ngram", "k": 3}  # the candidate first
    for p in seen:
        assert ("k" in p) == (p["method"] == "ngram")
    assert {"method": "none"} not in seen  # known: never restarted
    best = result.best()
    assert best is not None and best[1].score == max(float(p.get("k", 0)) for p in seen)


def test_refused_configurations_are_never_started_nor_counted(tmp_path: Path) -> None:
    started: list[dict[str, Any]] = []

    def evaluate(params: dict[str, Any]) -> Outcome:
        started.append(params)
        return Outcome("ok", 1.0, -0.1)

    def refuse(params: dict[str, Any]) -> str | None:
        return "k over 4" if params.get("k", 0) > 4 else None

    result = run_stage(
        STAGE,
        evaluate,
        storage=tmp_path / "j.log",
        n_trials=3,
        seed=0,
        refuse=refuse,
    )
    assert all(p.get("k", 0) <= 4 for p in started)
    assert result.started == len(started)
    assert all(why == "k over 4" for _, why in result.refused)


def test_a_proposer_chooses_what_is_measured_and_can_stop_the_stage(tmp_path: Path) -> None:
    started: list[dict[str, Any]] = []
    asked: list[set[tuple]] = []
    plan: list[dict[str, Any] | str] = [{"method": "ngram", "k": 7}, {"method": "ngram", "k": 2}]

    def evaluate(params: dict[str, Any]) -> Outcome:
        started.append(params)
        return Outcome("ok", float(params["k"]), -0.1)

    def propose(tried: set[tuple]) -> dict[str, Any] | str | None:
        asked.append(set(tried))
        return plan.pop(0) if plan else "the model expects nothing better"

    result = run_stage(
        STAGE,
        evaluate,
        storage=tmp_path / "j.log",
        n_trials=5,
        seed=0,
        known=[({"method": "none"}, Outcome("ok", 0.5, -0.1))],
        propose=propose,
    )
    # the proposals, in order, not the space's candidate (k=3) nor the sampler's
    assert started == [{"method": "ngram", "k": 7}, {"method": "ngram", "k": 2}]
    assert result.stopped_because == "the model expects nothing better"
    assert result.started == 2
    # each call is told what was tried before it
    assert asked[0] == {config_key({"method": "none"})}
    assert config_key({"method": "ngram", "k": 7}) in asked[1]


def test_a_proposer_with_nothing_to_say_leaves_the_choice_to_the_sampler(tmp_path: Path) -> None:
    started: list[dict[str, Any]] = []

    def evaluate(params: dict[str, Any]) -> Outcome:
        started.append(params)
        return Outcome("ok", 1.0, -0.1)

    result = run_stage(
        STAGE, evaluate, storage=tmp_path / "j.log", n_trials=3, seed=0, propose=lambda t: None
    )
    assert result.started == 3 == len(started)
    assert result.stopped_because == "trial budget reached (3)"
