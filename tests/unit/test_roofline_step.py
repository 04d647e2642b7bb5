"""tuner/servemodel/roofline.py and its use by the guide: a quantised build not measured yet,
predicted from the nearest measured build's step model scaled by the probe's roofline; figures
computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.roofline import DeviceRates, ModelSize
from tests.unit.probe_records import diagnosis_with
from tests.unit.test_guide import _baseline, _state
from tuner.run.state import RunState
from tuner.search.guide import Guide
from tuner.servemodel.configs import build_of
from tuner.servemodel.roofline import Roofline, bytes_per_weight, roofline_of, roofline_step
from tuner.servemodel.roofline import scale_step as scale
from tuner.servemodel.steptime import StepModel
from tuner.spaces.space import load_space, space_path

STEP = StepModel(
    base_s=0.040, per_prefill_token_s=0.0002, per_decode_s=0.001, per_ctx_ktoken_s=0.004
)
# 270 MB of bf16 weights read at 27 GB/s: 10 ms a step
BOUND = Roofline(weight_bytes=270_000_000, bytes_per_weight=2.0, bandwidth_gbps=27.0,
                 memory_bound=True)  # fmt: skip


def test_memory_bound_8bit_weights_save_half_the_weights_read() -> None:
    s = scale(STEP, BOUND, weights=(2.0, 1.0), kv=(1.0, 1.0))
    assert s is not None
    assert s.base_s == pytest.approx(0.040 - 0.005)  # half of the 10 ms read
    assert s.per_ctx_ktoken_s == pytest.approx(0.004)
    assert s.per_decode_s == STEP.per_decode_s and s.per_prefill_token_s == STEP.per_prefill_token_s


def test_memory_bound_4bit_weights_and_an_fp8_kv_cache() -> None:
    s = scale(STEP, BOUND, weights=(2.0, 0.5), kv=(2.0, 1.0))
    assert s is not None
    assert s.base_s == pytest.approx(0.040 - 0.0075)  # three quarters of the read
    assert s.per_ctx_ktoken_s == pytest.approx(0.002)  # the cache's reads halved


def test_the_saving_is_never_more_than_the_fixed_cost() -> None:
    small = STEP.model_copy(update={"base_s": 0.004})  # under the 10 ms read
    s = scale(small, BOUND, weights=(2.0, 1.0), kv=(1.0, 1.0))
    assert s is not None and s.base_s == pytest.approx(0.002)


def test_not_memory_bound_keeps_the_step_and_unknown_says_nothing() -> None:
    cached = Roofline(270_000_000, 2.0, 27.0, memory_bound=False)
    assert scale(STEP, cached, weights=(2.0, 1.0), kv=(2.0, 1.0)) == STEP
    unknown = Roofline(270_000_000, 2.0, 27.0, memory_bound=None)
    assert scale(STEP, unknown, weights=(2.0, 1.0), kv=(2.0, 1.0)) is None
    with pytest.raises(ValueError):
        scale(STEP, BOUND, weights=(0.0, 1.0), kv=(1.0, 1.0))


def test_bytes_per_weight_from_the_space() -> None:
    space = load_space(space_path("vllm", "cpu"))
    assert bytes_per_weight({}, space, 2.0) == 2.0  # the checkpoint's own
    assert bytes_per_weight({"quantization": "fp8_per_channel"}, space, 2.0) == 1.0
    assert bytes_per_weight({"dtype": "float32"}, space, 2.0) == 4.0
    # a pre-quantised checkpoint says nothing of its bits
    assert bytes_per_weight({"quantization": "checkpoint"}, space, 2.0) is None
    cuda = load_space(space_path("vllm", "cuda"))
    assert bytes_per_weight({"quantization": "bitsandbytes_4bit"}, cuda, 2.0) == 0.5


def test_roofline_step_only_across_the_quantisation_knobs(tmp_path: Path) -> None:
    st = _state(tmp_path)
    assert st.space is not None
    measured = {"cpu_binding": "all_cores"}
    build = build_of(measured, st.space)
    quant = {**measured, "quantization": "fp8_per_channel"}
    s = roofline_step(STEP, build, quant, st.space, BOUND, st.model_path)
    assert s is not None and s.base_s == pytest.approx(0.035)
    # an fp8 KV cache: SmolLM2's 2 x 30 x 3 x 64 values a token, 2 bytes each, then 1
    kv = roofline_step(STEP, build, {**measured, "kv_cache_dtype": "fp8"}, st.space, BOUND,
                       st.model_path)  # fmt: skip
    assert kv is not None and kv.per_ctx_ktoken_s == pytest.approx(0.002)
    assert kv.base_s == pytest.approx(STEP.base_s)
    # another knob changed too: not the roofline's to say
    other = {"cpu_binding": "auto", "quantization": "fp8_per_channel"}
    assert roofline_step(STEP, build, other, st.space, BOUND, st.model_path) is None


DEVICE = DeviceRates(
    device="cpu", threads=2, copy_bytes=1 << 28, memory_bandwidth_gbps=27.0, matmul_n=1024,
    matmul_dtype="bfloat16", matmul_tflops=1.0,
)  # fmt: skip


def _with_roofline(st: RunState, memory_bound: bool | None) -> None:
    d = diagnosis_with({})
    verdict = d.verdict.model_copy(update={"decode_memory_bound": memory_bound})
    size = ModelSize(parameters=135_000_000, weight_bytes=270_000_000, dtype="bf16")
    st.diagnosis = d.model_copy(update={"verdict": verdict, "model": size, "device": DEVICE})


def test_the_guide_predicts_a_quantised_build_by_the_roofline(tmp_path: Path) -> None:
    """Memory-bound: 8-bit weights shorten the measured build's steps, and the prediction is
    marked ``roofline`` (wider than a calibrated one); not memory-bound: the same capacity as
    the measured build, still marked; no roofline: transferred, as before."""
    st = _state(tmp_path)
    _baseline(st, 600.0)
    quant = {"quantization": "fp8_per_channel"}
    same = Guide(st).predict({})
    assert same is not None and same.basis == "calibrated"
    assert same.prediction.load is not None

    _with_roofline(st, True)
    bound = Guide(st).predict(quant)
    assert bound is not None and bound.basis == "roofline" and bound.build_trials == []
    assert bound.prediction.load is not None and bound.prediction.load > same.prediction.load
    assert bound.prediction.high is not None and same.prediction.high is not None
    width = (bound.prediction.high - bound.prediction.low) / bound.prediction.tokens_per_s
    own = (same.prediction.high - same.prediction.low) / same.prediction.tokens_per_s
    assert width > own

    _with_roofline(st, False)
    cached = Guide(st).predict(quant)
    assert cached is not None and cached.basis == "roofline"
    assert cached.prediction.load == pytest.approx(same.prediction.load, rel=0.02)

    _with_roofline(st, None)
    unknown = Guide(st).predict(quant)
    assert unknown is not None and unknown.basis == "transferred"


def test_roofline_of_a_diagnosis() -> None:
    assert roofline_of(None) is None
    assert roofline_of(diagnosis_with({})) is None  # no model size nor device rates
