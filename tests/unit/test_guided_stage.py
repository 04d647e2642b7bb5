"""tuner/run/guided_stage.py: the model advises, and a failure of it does not end the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.run_state import run_state
from tuner.run.guided_stage import GuidedStage
from tuner.search.choice import Candidate
from tuner.search.guide import Guide
from tuner.search.study import config_key
from tuner.spaces.space import Stage

STAGE = Stage.model_validate(
    {
        "name": "batching",
        "knobs": [
            {"name": "max_num_seqs", "type": "int", "low": 8, "high": 64, "flag": "--s",
             "sim": "max_num_seqs"},
        ],
        "candidates": [{"max_num_seqs": 16}, {"max_num_seqs": 32}],
    }
)  # fmt: skip


class Broken(Guide):
    calls = 0

    def fits(self) -> dict[str, Any]:
        return {"b": object()}

    def before(self, params: dict[str, Any]) -> None:
        Broken.calls += 1
        raise ZeroDivisionError("a model bug")

    def propose(
        self,
        stage: Stage,
        carried: dict[str, Any],
        tried: set[tuple],
        *,
        last: bool = False,
        first: bool = False,
    ) -> None:
        raise ZeroDivisionError("a model bug")


class Recording(Guide):
    """A model that proposes the stage's first candidate and records what it was told."""

    told: list[bool]
    firsts: list[bool]

    def fits(self) -> dict[str, Any]:
        return {"b": object()}

    def propose(
        self,
        stage: Stage,
        carried: dict[str, Any],
        tried: set[tuple],
        *,
        last: bool = False,
        first: bool = False,
    ) -> Any:
        self.told.append(last)
        self.firsts.append(first)
        return Candidate(dict(stage.candidates[0]), None, "calibrated", [])  # type: ignore[arg-type]


def test_a_failing_model_is_set_aside_and_the_stage_goes_on(tmp_path: Path) -> None:
    st = run_state(tmp_path)
    said: list[str] = []
    st.say = said.append
    g = GuidedStage(st, Broken(st))
    assert g.before({"max_num_seqs": 16}, 1) is None
    assert g.off is not None and "ZeroDivisionError: a model bug" in g.off
    assert any("set aside" in line for line in said)
    assert st.notes and "set aside" in st.notes[0]
    # later calls do not ask the model again; the space's candidates come next
    assert g.before({"max_num_seqs": 16}, 2) is None
    assert Broken.calls == 1
    tried = {config_key({"max_num_seqs": 16})}
    assert g.propose(STAGE, {}, tried) == {"max_num_seqs": 32}


def test_a_model_failing_in_a_proposal_falls_back_to_the_candidates(tmp_path: Path) -> None:
    st = run_state(tmp_path)
    st.say = lambda msg: None
    g = GuidedStage(st, Broken(st))
    assert g.propose(STAGE, {}, set()) == {"max_num_seqs": 16}
    assert g.off is not None
    # with every candidate tried, the sampler proposes (None)
    tried = {config_key(c) for c in STAGE.candidates}
    assert g.propose(STAGE, {}, tried) is None


def test_the_stages_last_trial_is_told_to_the_model_and_said(tmp_path: Path) -> None:
    st = run_state(tmp_path)
    said: list[str] = []
    st.say = said.append
    guide = Recording(st)
    guide.told, guide.firsts = [], []
    g = GuidedStage(st, guide)
    assert g.propose(STAGE, {}, set()) == {"max_num_seqs": 16}
    assert g.propose(STAGE, {}, set(), last=lambda: True, started=[1]) == {"max_num_seqs": 16}
    assert guide.told == [False, True]
    assert guide.firsts == [True, False]  # the stage's first trial, then one after its own
    assert "the stage's last" not in said[0] and "next (the stage's last" in said[1]


class ExpectsNothing(Guide):
    """A calibrated model that expects no configuration to beat the best."""

    def fits(self) -> dict[str, Any]:
        return {"b": object()}

    def propose(
        self,
        stage: Stage,
        carried: dict[str, Any],
        tried: set[tuple],
        *,
        last: bool = False,
        first: bool = False,
    ) -> None:
        return None


def test_a_model_expecting_nothing_is_checked_by_the_stages_first_candidate(
    tmp_path: Path,
) -> None:
    st = run_state(tmp_path)
    said: list[str] = []
    st.say = said.append
    g = GuidedStage(st, ExpectsNothing(st))
    # the stage has measured none of its own: its first candidate is measured to check
    assert g.propose(STAGE, {}, set(), started=[]) == {"max_num_seqs": 16}
    assert "its first candidate is measured to check that" in said[-1]
    # once it has measured one, the model's expectation stops it, with the reason
    why = g.propose(STAGE, {}, {config_key({"max_num_seqs": 16})}, started=[1])
    assert isinstance(why, str) and why.startswith("the serving model expects none of the")
    # no candidate left: the expectation stops it too
    every = {config_key(c) for c in STAGE.candidates}
    assert isinstance(g.propose(STAGE, {}, every, started=[]), str)
