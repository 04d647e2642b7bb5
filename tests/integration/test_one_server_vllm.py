"""The exactness check on real vLLM servers, where the answer is known in advance.

The check compares a configuration's greedy outputs with a reference configuration's, token by
token (tuner/run/gates.py ``ExactnessGate``, over probes/exactness.py). Here the reference is
the CI space's baseline (eager, bf16 on this CPU backend) and the two configurations checked
against it are chosen for their known answer:

- the same model and numerics with a front-end knob changed (``--stream-interval 8``: how
  often tokens are streamed, not what is computed): the outputs must be identical;
- float32 compute instead of bf16: other numerics, which change a greedy token within the
  eight 32-token continuations (bf16 rounds every activation to 8 bits of mantissa), so the
  check must report a divergence with its position.

An exactness check that always says "identical" fails the second; one that always says
"diverged" fails the first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.engines.base import ServerProcess, free_port
from tuner.engines.hardware import detect_hardware, template_context
from tuner.engines.models import resolve_model
from tuner.engines.vllm import VLLMEngine
from tuner.run.gates import ExactnessGate, rejection
from tuner.spaces.launch import launch_settings
from tuner.spaces.space import load_space

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CI_SPACE = ROOT / "tests" / "data" / "vllm-cpu-ci.yaml"


def _outputs(gate: ExactnessGate, tmp: Path, name: str, extra: list[str]) -> list:
    engine = VLLMEngine()
    model = resolve_model("smollm2-135m").path
    args, env = launch_settings(load_space(CI_SPACE), {}, template_context(detect_hardware()))
    spec = engine.launch_spec(model, [*args, *extra], env, free_port())
    with ServerProcess(spec, tmp / f"{name}.log", startup_timeout_s=300) as srv:
        srv.wait_ready(served_model=model)
        return gate.outputs(srv.base_url, model)


@pytest.mark.timeout(900)
def test_the_exactness_check_says_identical_and_diverged_where_each_is_known(
    tmp_path: Path,
) -> None:
    gate = ExactnessGate()
    gate.keep(0, _outputs(gate, tmp_path, "reference", []))
    gate.reference = 0

    same = gate.compare(_outputs(gate, tmp_path, "stream-interval", ["--stream-interval", "8"]))
    assert same.checked is True and same.reference_trial == 0
    assert same.identical is True, same.first_divergence
    assert same.prompts == 8 and same.tokens_compared >= 8 * 16
    assert same.divergent_prompts == 0 and same.first_divergence is None
    assert rejection(same, accept_divergence=False) is None

    other = gate.compare(_outputs(gate, tmp_path, "float32", ["--dtype", "float32"]))
    assert other.checked is True and other.identical is False
    assert other.divergent_prompts >= 1
    d = other.first_divergence
    assert d is not None and d.position >= 0 and d.expected != d.got
    assert 0 <= d.prompt_index < 8
    assert d.reference_margin is not None and d.reference_margin >= 0
    why = rejection(other, accept_divergence=False)
    assert why is not None and "changed the greedy outputs" in why
    assert rejection(other, accept_divergence=True) is None
