"""tuner/run/gate_steps.py: the greedy outputs a new best keeps as the exactness gate's
reference are taken only where a trial, a speculative one among them, could still follow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.unit.run_state import run_state
from tests.unit.test_sizing import BUDGET_S, Clock, _trial
from tuner.engines.base import RunningServer
from tuner.run.gate_steps import GateSteps
from tuner.run.state import RunState
from tuner.spaces.space import load_space, space_path


class _Server:
    base_url = "http://127.0.0.1:1"
    served_model = "m"


def _steps(tmp_path: Path, clock: Clock) -> tuple[RunState, GateSteps, list[int]]:
    st = run_state(tmp_path, budget_s=BUDGET_S, now=clock)
    st.space = load_space(space_path("vllm", "cpu")).for_machine(0, {"max_model_len": 8192})
    st.baseline = _trial(0, 60.0, 2.0)
    asked: list[int] = []

    def outputs(base_url: str, model: str) -> list[Any]:
        asked.append(1)
        return []

    st.exactness.outputs = outputs  # type: ignore[method-assign]
    return st, GateSteps(st), asked


def test_a_new_best_keeps_its_greedy_outputs_while_a_trial_can_follow(tmp_path: Path) -> None:
    clock = Clock()
    st, steps, asked = _steps(tmp_path, clock)
    lead = _trial(1, 60.0, 3.0)
    server: RunningServer = _Server()  # type: ignore[assignment]
    steps.exactness(server, lead, tmp_path, "trial 1", st.baseline)
    assert asked == [1] and 1 in st.exactness.greedy
    assert (tmp_path / "greedy.json").exists()


def test_a_new_best_that_nothing_can_follow_takes_no_greedy_outputs(tmp_path: Path) -> None:
    clock = Clock()
    st, steps, asked = _steps(tmp_path, clock)
    lead = _trial(1, 60.0, 3.0)
    clock.t = BUDGET_S - 30.0  # less than a start
    server: RunningServer = _Server()  # type: ignore[assignment]
    steps.exactness(server, lead, tmp_path, "trial 1", st.baseline)
    assert asked == [] and 1 not in st.exactness.greedy
    # A configuration that does not lead keeps none, whatever the time.
    clock.t = 0.0
    behind = _trial(2, 60.0, 1.0)
    steps.exactness(server, behind, tmp_path, "trial 2", lead)
    assert asked == []


def test_in_a_shared_study_a_new_best_keeps_its_greedy_outputs_for_the_other_workers(
    tmp_path: Path,
) -> None:
    clock = Clock()
    st, steps, asked = _steps(tmp_path, clock)
    st.shared = object()  # type: ignore[assignment]  # only its presence counts here
    clock.t = BUDGET_S - 30.0  # no trial fits on this worker's budget
    server: RunningServer = _Server()  # type: ignore[assignment]
    steps.exactness(server, _trial(1, 60.0, 3.0), tmp_path, "trial 1", st.baseline)
    assert asked == [1]  # another worker may start the speculative stage from it
