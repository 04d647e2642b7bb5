"""tuner.engines: the registry, vLLM's launch command and its reading of failure logs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tuner.engines import ENGINES, UnknownEngineError, get_engine
from tuner.engines.base import LaunchSpec
from tuner.engines.vllm import VLLMEngine
from tuner.spaces.space import load_space

SPACES = Path(__file__).resolve().parents[2] / "search_spaces"
CTX: dict[str, Any] = {"cpu_list": "0,1", "last_cpu": 1, "n_cpus": 2, "n_gpus": 2}
MODEL_DIR = "/models/smollm2-135m-instruct"


def test_get_engine_vllm() -> None:
    engine = get_engine("vllm")
    assert isinstance(engine, VLLMEngine)
    assert engine.name == "vllm"
    assert engine.supports_ignore_eos is True
    assert engine.series is not None and engine.series.path == "/metrics"
    assert all(n.startswith("vllm:") for n in (*engine.series.gauges, *engine.series.counters))


def test_unknown_engine_lists_the_known_ones() -> None:
    with pytest.raises(UnknownEngineError) as exc:
        get_engine("vlm")
    msg = str(exc.value)
    assert "engine 'vlm' is unknown" in msg
    assert "known: " + ", ".join(sorted(ENGINES)) in msg
    assert "vllm" in msg


def test_unknown_engine_error_is_a_value_error() -> None:
    assert issubclass(UnknownEngineError, ValueError)


def test_version_is_a_string() -> None:
    assert isinstance(VLLMEngine().version(), str)


def test_launch_spec_starts_the_openai_server_with_this_python() -> None:
    spec = VLLMEngine().launch_spec(MODEL_DIR, [], {}, 8123)
    assert spec.argv == [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        MODEL_DIR,
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
    ]
    assert spec.env == {}


def test_launch_spec_uses_the_given_python() -> None:
    spec = VLLMEngine(python="/opt/py/bin/python").launch_spec(MODEL_DIR, [], {}, 1)
    assert spec.argv[0] == "/opt/py/bin/python"


def test_launch_spec_with_cpu_space_params() -> None:
    space = load_space(SPACES / "vllm-cpu.yaml")
    e = space.render(
        {
            "max_num_seqs": 64,
            "enable_chunked_prefill": False,
            "cpu_binding": "all_cores",
            "kv_cache_space_gib": 2,
            "uvicorn_access_log": False,
        },
        CTX,
    )
    env_in = dict(e.env)
    spec = VLLMEngine().launch_spec(MODEL_DIR, e.args, e.env, 9000)
    assert spec.argv[spec.argv.index("--port") + 1] == "9000"
    tail = spec.argv[spec.argv.index("--port") + 2 :]
    assert tail == [
        "--max-num-seqs",
        "64",
        "--no-enable-chunked-prefill",
        "--disable-uvicorn-access-log",
    ]
    assert spec.env == {
        "VLLM_CPU_OMP_THREADS_BIND": "0,1",
        "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
        "VLLM_CPU_KVCACHE_SPACE": "2",
    }
    spec.env["X"] = "1"
    assert e.env == env_in  # the spec holds its own copy


def test_launch_spec_with_cuda_space_params() -> None:
    space = load_space(SPACES / "vllm-cuda.yaml").for_machine(2)
    e = space.render(
        {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.85, "enforce_eager": True}, CTX
    )
    argv = VLLMEngine().launch_spec(MODEL_DIR, e.args, e.env, 9001).argv
    i = argv.index("--tensor-parallel-size")
    assert argv[i + 1] == "2"
    j = argv.index("--gpu-memory-utilization")
    assert argv[j + 1] == "0.85"
    assert "--enforce-eager" in argv
    assert argv.count("--port") == 1


def test_launch_spec_with_port() -> None:
    spec = LaunchSpec(["python", "-m", "x", "--port", "1", "--max-num-seqs", "8"], {"A": "1"})
    moved = spec.with_port(4242)
    assert moved.argv == ["python", "-m", "x", "--port", "4242", "--max-num-seqs", "8"]
    assert moved.env == {"A": "1"}
    assert spec.argv[4] == "1"  # the original is untouched
    moved.env["B"] = "2"
    assert spec.env == {"A": "1"}


# ---------------------------------------------------------------------------- failure logs

# Log tails as vLLM 0.32 writes them (long lines split here only to fit the line length).
CPU_MEMORY_LOG = "\n".join(
    [
        "INFO 11-29 18:01:02 [__init__.py:241] Automatically detected platform cpu.",
        "INFO 11-29 18:01:09 [api_server.py:1805] vLLM API server version 0.32.0",
        "(EngineCore_DP0 pid=4242) INFO 11-29 18:01:20 [cpu_worker.py:90] OMP threads binding",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/runpy.py", line 198, in _run_module_as_main',
        '  File ".../vllm/v1/worker/cpu_worker.py", line 120, in determine_available_memory',
        "(EngineCore_DP0 pid=4242) ERROR 11-29 18:01:21 [core.py:708] ValueError: Available "
        "memory on node 0 (6.37/7.84 GiB) on startup is less than desired CPU memory "
        "utilization (0.92, 7.21 GiB). Decrease memory utilization or reduce memory used by "
        "other processes.",
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
        "",
    ]
)

CUDA_OOM_LOG = "\n".join(
    [
        "INFO 11-29 18:01:09 [api_server.py:1805] vLLM API server version 0.32.0",
        "(EngineCore_DP0 pid=77) ERROR 11-29 18:02:11 [core.py:708]   File "
        '"/usr/lib/python3/dist-packages/torch/nn/modules/linear.py", line 125, in forward',
        "(EngineCore_DP0 pid=77) ERROR 11-29 18:02:11 [core.py:708] torch.OutOfMemoryError: "
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "79.19 GiB of which 1.06 GiB is free.",
        "",
    ]
)

BAD_ARGS_LOG = "\n".join(
    [
        "usage: api_server.py [-h] [--host HOST] [--port PORT] [--model MODEL]",
        "                     [--max-num-seqs MAX_NUM_SEQS]",
        "api_server.py: error: unrecognized arguments: --foo",
        "",
    ]
)

KV_CACHE_LOG = (
    "(EngineCore_DP0 pid=9) ERROR 11-29 18:03:00 [core.py:708] ValueError: To serve at least "
    "one request with the models's max seq len (8192), (0.38 GiB KV cache is needed, which is "
    "larger than the available KV cache memory (0.10 GiB). Try increasing "
    "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n"
)

CONFIG_LOG = "\n".join(
    [
        "pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig",
        "  Value error, max_num_batched_tokens (256) is smaller than max_model_len (8192). "
        "[type=value_error]",
        "",
    ]
)


@pytest.mark.parametrize(
    ("log", "reason", "detail"),
    [
        (
            CPU_MEMORY_LOG,
            "not enough free memory for the requested KV cache",
            "ValueError: Available memory on node 0 (6.37/7.84 GiB)",
        ),
        (CUDA_OOM_LOG, "out of memory", "torch.OutOfMemoryError: CUDA out of memory"),
        (
            BAD_ARGS_LOG,
            "bad engine arguments",
            "api_server.py: error: unrecognized arguments: --foo",
        ),
        (KV_CACHE_LOG, "KV cache too small", "ValueError: To serve at least one request"),
        (
            CONFIG_LOG,
            "invalid engine configuration",
            "max_num_batched_tokens (256) is smaller than max_model_len (8192)",
        ),
        (
            "ModuleNotFoundError: No module named 'vllm'\n",
            "engine not installed",
            "ModuleNotFoundError: No module named 'vllm'",
        ),
    ],
    ids=["cpu-memory", "cuda-oom", "bad-args", "kv-cache", "config", "not-installed"],
)
def test_classify_failure(log: str, reason: str, detail: str) -> None:
    got = VLLMEngine().classify_failure(log, 1)
    assert got.startswith(reason + " (")
    assert detail in got


def test_classify_failure_strips_the_engine_core_prefix() -> None:
    log = "\n".join(line for line in CPU_MEMORY_LOG.splitlines() if "RuntimeError" not in line)
    got = VLLMEngine().classify_failure(log, 1)
    assert "(ValueError: Available memory on node 0 (6.37/7.84 GiB)" in got
    assert "pid=" not in got and "core.py" not in got


def test_classify_failure_without_a_known_pattern_gives_the_exit_code() -> None:
    engine = VLLMEngine()
    assert engine.classify_failure("", -9) == "exited with code -9"
    assert engine.classify_failure("KeyError: 'x'\n", 1) == "exited with code 1 (KeyError: 'x')"


def test_classify_failure_keeps_the_detail_short() -> None:
    got = VLLMEngine().classify_failure("ValueError: " + "x" * 5000, 1)
    assert len(got) < 400
