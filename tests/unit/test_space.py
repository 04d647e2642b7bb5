"""tuner.spaces.space: the shipped search spaces load, render and adapt; broken files are
refused."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tuner.spaces.knob import Emit
from tuner.spaces.space import (
    STAGE_ORDER,
    SearchSpace,
    SpaceError,
    found_in_log,
    load_space,
    space_path,
)

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
CPU = SPACES / "vllm-cpu.yaml"
CUDA = SPACES / "vllm-cuda.yaml"
CTX: dict[str, Any] = {"cpu_list": "0,1", "last_cpu": 1, "n_cpus": 2, "n_gpus": 0}


@pytest.fixture(scope="module")
def cpu() -> SearchSpace:
    return load_space(CPU)


@pytest.fixture(scope="module")
def cuda() -> SearchSpace:
    return load_space(CUDA)


# ---------------------------------------------------------------------------- shipped files


def test_space_path_finds_the_shipped_files() -> None:
    assert space_path("vllm", "cpu").resolve() == CPU.resolve()
    assert space_path("vllm", "cuda").resolve() == CUDA.resolve()


@pytest.mark.parametrize("path", [CPU, CUDA], ids=["cpu", "cuda"])
def test_shipped_spaces_are_valid(path: Path) -> None:
    space = load_space(path)
    assert space.engine == "vllm"
    assert space.device == path.stem.split("-")[1]
    names = [s.name for s in space.stages]
    assert names == sorted(names, key=STAGE_ORDER.index)
    assert space.stage("batching") is not None
    assert space.knobs(), "a space with no knob tunes nothing"


def test_cpu_baseline_fixes_the_kv_cache(cpu: SearchSpace) -> None:
    assert cpu.baseline.env == {"VLLM_CPU_KVCACHE_SPACE": "4"}
    assert cpu.baseline.reason


def test_render_int_flags(cpu: SearchSpace) -> None:
    e = cpu.render({"max_num_seqs": 64, "max_num_batched_tokens": 4096}, CTX)
    assert e.args == ["--max-num-seqs", "64", "--max-num-batched-tokens", "4096"]
    assert e.env == {}


def test_render_a_whole_float_as_an_int(cpu: SearchSpace) -> None:
    assert cpu.render({"max_num_seqs": 64.0}, CTX).args == ["--max-num-seqs", "64"]


def test_render_bool_flag_and_flag_false(cpu: SearchSpace) -> None:
    assert cpu.render({"enable_chunked_prefill": True}, CTX).args == ["--enable-chunked-prefill"]
    assert cpu.render({"enable_chunked_prefill": False}, CTX).args == [
        "--no-enable-chunked-prefill"
    ]
    assert cpu.render({"enforce_eager": True}, CTX).args == ["--enforce-eager"]
    assert cpu.render({"enforce_eager": False}, CTX).args == []
    assert cpu.render({"uvicorn_access_log": True}, CTX).args == []
    assert cpu.render({"uvicorn_access_log": False}, CTX).args == ["--disable-uvicorn-access-log"]


def test_render_env_knob(cpu: SearchSpace) -> None:
    e = cpu.render({"kv_cache_space_gib": 6}, CTX)
    assert e == Emit(args=[], env={"VLLM_CPU_KVCACHE_SPACE": "6"})


def test_render_categorical_options_with_templates(cpu: SearchSpace) -> None:
    e = cpu.render({"cpu_binding": "all_cores"}, {**CTX, "cpu_list": "0,1,2,3"})
    assert e.args == []
    assert e.env == {"VLLM_CPU_OMP_THREADS_BIND": "0,1,2,3", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    assert cpu.render({"cpu_binding": "auto"}, CTX).env == {"VLLM_CPU_OMP_THREADS_BIND": "auto"}


def test_render_the_cpu_candidate(cpu: SearchSpace) -> None:
    stage = cpu.stage("batching")
    assert stage is not None and stage.candidates
    e = cpu.render(stage.candidates[0], CTX)
    assert "--max-num-seqs" in e.args
    assert "--disable-uvicorn-access-log" in e.args
    assert e.env["VLLM_CPU_OMP_THREADS_BIND"] == "0,1"
    assert e.env["VLLM_CPU_KVCACHE_SPACE"] == "4"


def test_render_cuda_float_and_categorical_flags(cuda: SearchSpace) -> None:
    e = cuda.render({"gpu_memory_utilization": 0.85, "tensor_parallel_size": 2}, CTX)
    assert e.args == ["--gpu-memory-utilization", "0.85", "--tensor-parallel-size", "2"]


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"max_num_seq": 64}, "parameter 'max_num_seq' is unknown; known: dtype, max_num_seqs"),
        ({"max_num_seqs": 8}, "outside [16, 512]"),
        ({"max_num_seqs": 64.5}, "not a whole number"),
        ({"max_num_seqs": "64"}, "not a number"),
        ({"max_num_seqs": True}, "not a number"),
        ({"enforce_eager": "yes"}, "not true/false"),
        ({"cpu_binding": "numa"}, "not one of"),
    ],
)
def test_render_rejects_bad_parameters(
    cpu: SearchSpace, params: dict[str, Any], needle: str
) -> None:
    with pytest.raises(SpaceError) as exc:
        cpu.render(params, CTX)
    assert needle in str(exc.value)


@pytest.mark.parametrize("n_gpus", [0, 1])
def test_for_machine_drops_tensor_parallelism_below_two_gpus(
    cuda: SearchSpace, n_gpus: int
) -> None:
    space = cuda.for_machine(n_gpus)
    assert "tensor_parallel_size" not in space.knobs()
    assert "gpu_memory_utilization" in space.knobs()
    with pytest.raises(SpaceError, match="'tensor_parallel_size' is unknown"):
        space.render({"tensor_parallel_size": 2}, CTX)


@pytest.mark.parametrize("n_gpus", [2, 8])
def test_for_machine_keeps_tensor_parallelism_with_two_gpus_or_more(
    cuda: SearchSpace, n_gpus: int
) -> None:
    assert "tensor_parallel_size" in cuda.for_machine(n_gpus).knobs()


def test_for_machine_leaves_the_original_alone(cuda: SearchSpace) -> None:
    cuda.for_machine(0)
    assert "tensor_parallel_size" in cuda.knobs()


# ---------------------------------------------------------------------------- broken files


def minimal() -> dict[str, Any]:
    return {
        "engine": "vllm",
        "device": "cpu",
        "stages": [
            {
                "name": "batching",
                "knobs": [
                    {
                        "name": "max_num_seqs",
                        "type": "int",
                        "low": 16,
                        "high": 512,
                        "flag": "--max-num-seqs",
                    },
                    {"name": "eager", "type": "bool", "flag": "--enforce-eager"},
                ],
                "candidates": [{"max_num_seqs": 64, "eager": False}],
            }
        ],
    }


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_the_minimal_space_is_valid(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, minimal()))
    assert list(space.knobs()) == ["max_num_seqs", "eager"]


def broken(edit: str) -> dict[str, Any]:
    data = copy.deepcopy(minimal())
    stage = data["stages"][0]
    knob = stage["knobs"][0]
    if edit == "low>high":
        knob["low"], knob["high"] = 512, 16
    elif edit == "unknown candidate knob":
        stage["candidates"] = [{"max_num_seqz": 64}]
    elif edit == "out-of-range candidate":
        stage["candidates"] = [{"max_num_seqs": 4096}]
    elif edit == "stages out of order":
        data["stages"] = [
            {"name": "speculative", "knobs": []},
            {"name": "batching", "knobs": stage["knobs"]},
        ]
    elif edit == "stage twice":
        data["stages"] = [stage, {"name": "batching", "knobs": []}]
    elif edit == "duplicate knob":
        data["stages"].append({"name": "quantisation", "knobs": [dict(knob)]})
    elif edit == "no rendering":
        del knob["flag"]
    elif edit == "unknown field":
        knob["flagg"] = "--x"
    elif edit == "unknown stage":
        stage["name"] = "pruning"
    elif edit == "categorical without choices":
        stage["knobs"].append({"name": "mode", "type": "categorical", "flag": "--mode"})
    elif edit == "flag_false on an int":
        knob["flag_false"] = "--no-max"
    elif edit == "log range from zero":
        knob.update(low=0, log=True)
    elif edit == "choices and options disagree":
        stage["knobs"].append(
            {
                "name": "mode",
                "type": "categorical",
                "choices": ["a", "b"],
                "options": {"a": {"args": ["--a"]}, "c": {"args": ["--c"]}},
            }
        )
    return data


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ("low>high", "knob max_num_seqs: needs low <= high"),
        ("unknown candidate knob", "knob 'max_num_seqz' is unknown; known: max_num_seqs, eager"),
        ("out-of-range candidate", "max_num_seqs: 4096 is outside [16, 512]"),
        ("stages out of order", "stages must be unique and in the order batching, quantisation"),
        ("stage twice", "stages must be unique"),
        ("duplicate knob", "knob max_num_seqs appears twice"),
        ("no rendering", "say how it is rendered"),
        ("unknown field", "flagg"),
        ("unknown stage", "pruning"),
        ("categorical without choices", "a categorical needs choices"),
        ("flag_false on an int", "flag_false is for bool knobs only"),
        ("log range from zero", "a log range needs low > 0"),
        ("choices and options disagree", "choices and options disagree"),
    ],
)
def test_invalid_space_is_refused_naming_the_problem(
    tmp_path: Path, edit: str, needle: str
) -> None:
    path = write(tmp_path, broken(edit))
    with pytest.raises(SpaceError) as exc:
        load_space(path)
    msg = str(exc.value)
    assert needle in msg
    assert str(path) in msg  # the file is named


def test_a_default_may_lie_outside_the_searched_range(tmp_path: Path) -> None:
    # The default is the engine's own value; the range is what the search explores.
    data = minimal()
    data["stages"][0]["knobs"][0]["default"] = 1024
    space = load_space(write(tmp_path, data))
    assert space.knobs()["max_num_seqs"].default == 1024


def test_bad_yaml_is_a_space_error(tmp_path: Path) -> None:
    path = write(tmp_path, "engine: vllm\nstages: [\n")
    with pytest.raises(SpaceError, match=re.escape(str(path))):
        load_space(path)


def test_a_missing_file_is_a_space_error(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match=r"nope\.yaml"):
        load_space(tmp_path / "nope.yaml")


def test_an_empty_file_is_a_space_error(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match="is invalid"):
        load_space(write(tmp_path, ""))


# ---------------------------------------------------------------- stages 2 and 3, rules
def test_json_args_merge_into_one_argument(cpu: SearchSpace) -> None:
    e = cpu.render(
        {"speculative_method": "ngram", "num_speculative_tokens": 3, "ngram_window": "2-4"}, {}
    )
    i = e.args.index("--speculative-config")
    assert json.loads(e.args[i + 1]) == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "prompt_lookup_min": 2,
        "prompt_lookup_max": 4,
    }
    assert e.args.count("--speculative-config") == 1


def test_conditional_knobs_exist_only_when_their_condition_holds(cpu: SearchSpace) -> None:
    spec = cpu.stage("speculative")
    assert spec is not None
    assert [k.name for k in spec.active({"speculative_method": "none"})] == ["speculative_method"]
    names = [k.name for k in spec.active({"speculative_method": "ngram"})]
    assert names == ["speculative_method", "num_speculative_tokens", "ngram_window"]
    assert spec.defaults() == {"speculative_method": "none"}


def test_options_that_need_a_user_path_are_dropped_without_it(cpu: SearchSpace) -> None:
    bare = cpu.for_machine(0, {"draft_model": "", "eagle_model": None})
    spec = bare.stage("speculative")
    assert spec is not None
    assert spec.knobs[0].choices == ["none", "ngram"]
    given = cpu.for_machine(0, {"draft_model": "/m/draft", "quantized_model": "/m/q"})
    method = given.knobs()["speculative_method"]
    assert method.choices == ["none", "ngram", "draft_model"]
    e = given.render(
        {
            "speculative_method": "draft_model",
            "num_speculative_tokens": 2,
            "quantization": "checkpoint",
        },
        {"draft_model": "/m/draft", "quantized_model": "/m/q"},
    )
    cfg = json.loads(e.args[e.args.index("--speculative-config") + 1])
    assert cfg == {"model": "/m/draft", "num_speculative_tokens": 2}
    assert e.args[e.args.index("--model") + 1] == "/m/q"


def test_no_effect_patterns_and_changed_knobs(cpu: SearchSpace) -> None:
    params = {"quantization": "int8_per_channel_weight_only", "kv_cache_dtype": "auto"}
    assert cpu.no_effect_patterns(params) == [
        ("quantization=int8_per_channel_weight_only", "Quantizing 0 layers")
    ]
    assert cpu.changed("quantisation", params) == {"quantization": "int8_per_channel_weight_only"}
    assert cpu.changed("quantisation", {"quantization": "none", "max_num_seqs": 8}) == {}
    assert cpu.changed("speculative", {"speculative_method": "ngram"}) == {
        "speculative_method": "ngram"
    }


def test_found_in_log_skips_the_command_line() -> None:
    log = "$ python -m x --log-line Quantizing 0 layers\nINFO Quantizing 0 layers of types:\n"
    assert found_in_log("Quantizing 0 layers", log) == "INFO Quantizing 0 layers of types:"
    assert found_in_log("Quantizing 0 layers", log.splitlines()[0]) is None


def test_rules_refuse_what_the_engine_would_refuse(cpu: SearchSpace) -> None:
    ctx = {"max_model_len": 8192}
    assert cpu.broken_rule({"max_num_seqs": 455, "max_num_batched_tokens": 278}, ctx)
    assert cpu.broken_rule({"max_num_seqs": 64, "max_num_batched_tokens": 278}, ctx) is None
    why = cpu.broken_rule({"enable_chunked_prefill": False, "max_num_batched_tokens": 4115}, ctx)
    assert why is not None and "{max_model_len}=8192" in why
    assert (
        cpu.broken_rule({"enable_chunked_prefill": False, "max_num_batched_tokens": 8192}, ctx)
        is None
    )
    # Undecidable without the model's length: left to the engine.
    assert (
        cpu.broken_rule({"enable_chunked_prefill": False, "max_num_batched_tokens": 4115}, {})
        is None
    )


def test_a_malformed_rule_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(
        "engine: e\ndevice: cpu\nrules:\n  - {require: 'a >>= b', reason: r}\nstages:\n"
        "  - name: batching\n    knobs:\n      - {name: a, type: int, low: 1, high: 2, flag: --a}\n"
    )
    with pytest.raises(SpaceError, match="the form is"):
        load_space(p)


def test_when_must_name_an_earlier_knob(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text(
        "engine: e\ndevice: cpu\nstages:\n  - name: batching\n    knobs:\n"
        "      - {name: a, type: int, low: 1, high: 2, flag: --a, when: {b: [true]}}\n"
        "      - {name: b, type: bool, flag: --b}\n"
    )
    with pytest.raises(SpaceError, match="not an earlier knob"):
        load_space(p)


def test_transformers_space_contrasts_continuous_with_static() -> None:
    t = load_space(space_path("transformers", "cpu"))
    batching = t.stage("batching")
    assert batching is not None and batching.contrast is not None
    assert batching.contrast.knob == "continuous_batching" and batching.contrast.on is True
    assert batching.defaults() == {"continuous_batching": False, "compile": False}
    e = t.render(
        {"continuous_batching": True, "cb_num_blocks": 512, "quantization": "bnb-4bit"}, {}
    )
    assert e.args == [
        "--continuous-batching",
        "--cb-num-blocks",
        "512",
        "--quantization",
        "bnb-4bit",
    ]


def test_float32_exists_only_on_a_cpu_that_emulates_bf16(cpu: SearchSpace) -> None:
    native = cpu.for_machine(0, {**CTX, "bf16_emulated": ""})
    assert native.knobs()["dtype"].choices == ["auto"]
    first = native.stage("batching").candidates  # type: ignore[union-attr]
    assert first and all(c["dtype"] == "auto" for c in first)  # the float32 ones are dropped
    emulated = cpu.for_machine(0, {**CTX, "bf16_emulated": "yes"})
    assert emulated.knobs()["dtype"].choices == ["auto", "float32"]
    cands = emulated.stage("batching").candidates  # type: ignore[union-attr]
    assert [c["dtype"] for c in cands[:2]] == ["float32", "float32"]  # they go first
    assert [c["dtype"] for c in cands[2:]] == ["auto"] * (len(cands) - 2)
    args = emulated.render(cands[0], CTX).args
    assert args[args.index("--dtype") + 1] == "float32"
    assert "--dtype" not in emulated.render(cands[2], CTX).args


def test_an_fp8_kv_cache_exists_only_on_a_cpu_with_avx512(cpu: SearchSpace) -> None:
    bare = cpu.for_machine(0, {**CTX, "avx512": ""})
    assert bare.knobs()["kv_cache_dtype"].choices == ["auto"]
    quant = bare.stage("quantisation")
    assert quant is not None and all(c["kv_cache_dtype"] == "auto" for c in quant.candidates)
    full = cpu.for_machine(0, {**CTX, "avx512": "yes"})
    assert full.knobs()["kv_cache_dtype"].choices == ["auto", "fp8", "fp8_e5m2", "fp8_e4m3"]
    assert full.render({"kv_cache_dtype": "fp8"}, CTX).args == ["--kv-cache-dtype", "fp8"]
