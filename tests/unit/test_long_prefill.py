"""vLLM's long-prefill cap (``long_prefill_token_threshold``) as a knob of the batching stage:
in the search only where prompts are heavy-tailed (issue 32: knobs that only matter with such
traffic), launched as vLLM's flag, simulated by the serving model, refused above the model's
context length."""

from __future__ import annotations

import pytest

from probes.derive import heavy_prompts
from probes.workload import parse_workload
from tuner.servemodel.configs import sim_knobs
from tuner.spaces.space import SearchSpace, load_space, space_path

KNOB = "long_prefill_token_threshold"


@pytest.mark.parametrize(
    ("spec", "heavy"),
    [
        ("synthetic:input=128,output=64", False),
        ("synthetic:input=128,output=64,spread=0.5", False),
        ("synthetic:input=512,output=128,in_p99=2048", True),
        ("synthetic:input=128,output=256,out_p99=1024", False),  # long outputs, not prompts
    ],
)
def test_heavy_prompts_are_a_lognormal_input(spec: str, heavy: bool) -> None:
    assert heavy_prompts(parse_workload(spec)) is heavy


def _space(engine_device: tuple[str, str], heavy: bool) -> SearchSpace:
    ctx = {"heavy_prompts": "yes" if heavy else "", "max_model_len": 8192}
    return load_space(space_path(*engine_device)).for_machine(1, ctx)


@pytest.mark.parametrize("where", [("vllm", "cpu"), ("vllm", "cuda")])
def test_the_cap_is_searched_only_for_heavy_tailed_prompts(where: tuple[str, str]) -> None:
    light = _space(where, heavy=False).knobs()[KNOB]
    assert light.choices == [0] and light.default == 0
    heavy = _space(where, heavy=True).knobs()[KNOB]
    assert heavy.choices is not None and len(heavy.choices) == 4 and heavy.choices[0] == 0


def test_the_cap_launches_as_vllms_flag_and_is_simulated() -> None:
    space = _space(("vllm", "cpu"), heavy=True)
    ctx = {"heavy_prompts": "yes", "max_model_len": 8192}
    emit = space.render({KNOB: 512}, ctx)
    assert emit.args == ["--long-prefill-token-threshold", "512"]
    assert space.render({KNOB: 0}, ctx).args == []
    assert sim_knobs({KNOB: 512}, space, None).long_prefill_threshold == 512
    assert sim_knobs({}, space, None).long_prefill_threshold == 0


def test_a_cap_above_the_context_length_is_refused_before_a_start() -> None:
    space = _space(("vllm", "cpu"), heavy=True)
    assert space.broken_rule({KNOB: 1024}, {"max_model_len": 8192}) is None
    why = space.broken_rule({KNOB: 1024}, {"max_model_len": 512})
    assert why is not None and "context length" in why
