"""The probe's logic: measure_inference on a Python generator with a scripted clock, the verdict on
recorded inputs, the prefill-rate fit, model sizes from safetensors headers, and the diagnosis
sweeps against the fake server."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from probes import measure_inference
from probes.client import LoadClient
from probes.diagnose import (
    MIXED_SPREAD,
    Diagnosis,
    SweepPoint,
    mixed_spread,
    prefill_rate,
    run_diagnosis,
)
from probes.inference import InferenceMeasurementError
from probes.records import RequestRecord
from probes.roofline import model_size, parse_cache_bytes
from probes.verdict import StagePlan, decide
from probes.workload import parse_workload
from tests.fakes.openai_server import FakeOpenAIServer
from tuner.cli.main import app
from tuner.run.stages import stage_weight


class ScriptedClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_measure_inference_medians_with_a_scripted_clock() -> None:
    clock = ScriptedClock()
    ttfts = iter([0.5, 0.100, 0.200, 0.150, 0.100, 0.300])  # warm-up first, then 5 repeats
    steps = iter([0.5, 0.010, 0.020, 0.010, 0.030, 0.010])

    def generate(prompt: str, max_new_tokens: int, stream: bool) -> Iterator[str]:
        assert stream and prompt == "hi"
        ttft, step = next(ttfts), next(steps)
        clock.t += ttft
        for i in range(max_new_tokens):
            if i:
                clock.t += step
            yield f"t{i}"

    out = measure_inference(generate, "hi", n_tokens=11, repeats=5, clock=clock)
    assert out["ttft_ms"] == pytest.approx(150.0)  # median of 100, 200, 150, 100, 300
    assert out["ms_per_token"] == pytest.approx(10.0)  # median of 10, 20, 10, 30, 10
    assert out["tokens_per_s"] == pytest.approx(100.0)
    assert out["tokens"] == 11


def test_measure_inference_needs_two_tokens() -> None:
    def one(prompt: str, max_new_tokens: int, stream: bool) -> Iterator[str]:
        yield "x"

    with pytest.raises(InferenceMeasurementError):
        measure_inference(one, "p", n_tokens=4, repeats=1, warmup=False)
    with pytest.raises(ValueError):
        measure_inference(one, "p", n_tokens=1)


def test_prefill_rate_is_the_inverse_slope() -> None:
    pts = [
        SweepPoint(
            prompt_tokens=n,
            output_tokens=2,
            concurrency=1,
            n_requests=3,
            ttft_ms_p50=20 + n / 2.0,
            tpot_ms_p50=None,
            e2e_ms_p50=None,
            output_tokens_per_s=0,
        )
        for n in (64, 256, 1024)
    ]
    assert prefill_rate(pts) == pytest.approx(2000.0)  # 0.5 ms per token
    assert prefill_rate(pts[:1]) is None


COMMON = dict(split_source="server", llc_bytes=32 * 2**20, batching_gain=4.0)


def test_verdict_memory_bound_decode_expects_quantisation() -> None:
    v = decide(
        prefill_share=0.3,
        tpot_c1_ms=25.0,
        weight_bytes=270_000_000,
        bandwidth_gbps=20.0,
        tpot_growth=3.0,
        **COMMON,
    )  # type: ignore[arg-type]
    assert v.bottleneck == "decode"
    assert v.decode_floor_ms == pytest.approx(13.5)
    assert v.decode_memory_bound is True
    plan = {s.name: s.expected for s in v.stages}
    assert plan == {"batching": "likely", "quantisation": "likely", "speculative": "unlikely"}
    # the probe says what it expects and why; the budget's weights are the tuner's
    assert all(set(s.model_dump()) == {"name", "expected", "reason"} for s in v.stages)


def test_verdict_weights_in_cache_are_not_dram_bound() -> None:
    v = decide(
        prefill_share=0.6,
        tpot_c1_ms=20.0,
        weight_bytes=270_000_000,
        bandwidth_gbps=20.0,
        tpot_growth=1.2,
        split_source="client",
        llc_bytes=480 * 2**20,
        batching_gain=4.0,
    )
    assert v.bottleneck == "prefill" and v.weights_fit_in_cache is True
    assert v.decode_memory_bound is False
    plan = {s.name: s.expected for s in v.stages}
    assert plan["quantisation"] == "unlikely" and plan["speculative"] == "unlikely"
    assert "cache" in v.summary


def test_verdict_overhead_bound_decode_and_spare_compute() -> None:
    slow = decide(
        prefill_share=0.2,
        tpot_c1_ms=100.0,
        weight_bytes=270_000_000,
        bandwidth_gbps=20.0,
        tpot_growth=1.1,
        **COMMON,
    )  # type: ignore[arg-type]
    assert slow.decode_memory_bound is False
    assert {s.name: s.expected for s in slow.stages}["quantisation"] == "unlikely"
    spare = decide(
        prefill_share=0.2,
        tpot_c1_ms=15.0,
        weight_bytes=270_000_000,
        bandwidth_gbps=20.0,
        tpot_growth=1.2,
        **COMMON,
    )  # type: ignore[arg-type]
    assert {s.name: s.expected for s in spare.stages}["speculative"] == "likely"


def test_verdict_sees_a_server_that_serves_one_request_at_a_time() -> None:
    """Measured on transformers serve without continuous batching: 21 -> 23 tokens/s and a flat
    time per token from concurrency 1 to 8: requests queue, so batching is the remedy."""
    base = dict(
        prefill_share=0.85,
        tpot_c1_ms=45.6,
        weight_bytes=270_000_000,
        bandwidth_gbps=33.3,
        split_source="client",
        llc_bytes=32 * 2**20,
        batching_gain=23 / 21,
    )
    serial = decide(tpot_growth=43.3 / 45.6, **base)  # type: ignore[arg-type]
    plan = {s.name: s for s in serial.stages}
    assert plan["batching"].expected == "likely" and "one after another" in plan["batching"].reason
    saturated = decide(tpot_growth=7.5, **base)  # type: ignore[arg-type]
    assert {s.name: s.expected for s in saturated.stages}["batching"] == "unlikely"


def test_verdict_without_roofline_is_unknown() -> None:
    v = decide(
        prefill_share=0.5,
        tpot_c1_ms=None,
        weight_bytes=None,
        bandwidth_gbps=None,
        split_source="client",
        llc_bytes=None,
        batching_gain=None,
        tpot_growth=None,
    )
    assert v.decode_memory_bound is None
    assert {s.expected for s in v.stages} == {"unknown"}


def _safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    header = {k: {"dtype": d, "shape": s, "data_offsets": [0, 0]} for k, (d, s) in tensors.items()}
    header["__metadata__"] = {"format": "pt"}  # type: ignore[assignment]
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


def test_model_size_reads_safetensors_headers(tmp_path: Path) -> None:
    _safetensors(tmp_path / "a.safetensors", {"w": ("BF16", [10, 20]), "b": ("F32", [5])})
    _safetensors(tmp_path / "b.safetensors", {"x": ("I8", [100])})
    size = model_size(tmp_path)
    assert size is not None
    assert size.parameters == 200 + 5 + 100
    assert size.weight_bytes == 400 + 20 + 100
    assert model_size(tmp_path / "nothing") is None


def test_parse_cache_bytes() -> None:
    assert parse_cache_bytes("32 MiB (1 instance)") == 32 * 2**20
    assert parse_cache_bytes("480 MiB") == 480 * 2**20
    assert parse_cache_bytes(None) is None and parse_cache_bytes("n/a") is None


def _fake_diagnosis(
    load_concurrency: int, workload: str = "synthetic:input=32,output=8", **kw: Any
) -> Diagnosis:
    """run_diagnosis on the fake server (TTFT 5 ms, 2 ms a token), no roofline."""
    from tests.fakes.tokenizer import CharTokenizer

    with FakeOpenAIServer(ttft_ms=5, itl_ms=2, max_concurrent=64) as srv:
        return run_diagnosis(
            LoadClient(srv.base_url),
            served_model="fake-model",
            tokenizer=CharTokenizer(),
            workload=parse_workload(workload),
            load_concurrency=load_concurrency,
            max_model_len=2048,
            measure_roofline=False,
            seed=1,
            **kw,
        )


@pytest.mark.timeout(60)
def test_diagnosis_against_the_fake_server() -> None:
    kept: dict[str, list[RequestRecord]] = {}
    d = _fake_diagnosis(8, keep=kept.__setitem__)
    assert [p.prompt_tokens for p in d.prefill_sweep] == [32, 64, 256, 1024]
    # up to the user's load, and four times it for the serving model's calibration
    assert [p.concurrency for p in d.decode_sweep] == [1, 4, 8, 32]
    assert d.load_metrics is not None and d.load_metrics.n_completed > 0
    assert d.load_metrics.n_requests == 16  # the load point is the user's, not the largest
    assert d.verdict.split_source == "server" or d.client_prefill_share is not None
    # The fake's batch limit is far above 8, so tokens/s grows with concurrency.
    assert d.verdict.batching_gain is not None and d.verdict.batching_gain > 1
    # every sweep point's records go to the caller, by name, as many as were sent
    assert {name: len(records) for name, records in kept.items()} == {
        "prefill-32": 3, "prefill-64": 3, "prefill-256": 3, "prefill-1024": 3,
        "decode-c1": 4, "decode-c4": 8, "decode-c8": 16, "decode-c32": 64, "mixed-c32": 128,
    }  # fmt: skip
    # the mixed point: the largest batch, a quarter of the outputs (8 -> at least 4)
    mixed = d.mixed_point
    assert mixed is not None and (mixed.concurrency, mixed.output_tokens) == (32, 4)
    assert mixed.prompt_tokens == 32 and mixed.n_requests == 128
    # its lengths spread (out of lockstep): +-25 % here, so that no output is under 3 tokens
    # (4 x 0.75); the decode sweep's are fixed
    outs = [r.max_tokens for r in kept["mixed-c32"]]
    prompts = [r.n_prompt_expected for r in kept["mixed-c32"]]
    assert min(outs) == 3 and max(outs) == 5 and len(set(prompts)) > 8
    assert min(prompts) >= 24 and max(prompts) <= 40
    assert {r.max_tokens for r in kept["decode-c32"]} == {8}


def test_the_mixed_points_spread_keeps_its_outputs_and_prompts_within_bounds() -> None:
    assert mixed_spread(128, 16, 8176) == MIXED_SPREAD  # the README's workload: 8-24 outputs
    assert mixed_spread(128, 4, 8176) == pytest.approx(0.25)  # 3-5, not 2-6
    assert mixed_spread(3000, 1000, 4080) == pytest.approx(0.02)  # the longest within the limit
    assert mixed_spread(4000, 1000, 4080) == 0.0


@pytest.mark.timeout(60)
def test_a_mixed_point_whose_shortest_prompt_cannot_be_built_keeps_fixed_lengths() -> None:
    kept: dict[str, list[RequestRecord]] = {}
    d = _fake_diagnosis(8, "synthetic:input=16,output=8", keep=kept.__setitem__)
    # 12 characters (16 x 0.75) cannot hold the fake tokenizer's salted prompt; 16 can
    assert d.mixed_point is not None and d.mixed_point.n_requests == 128
    assert {r.n_prompt_expected for r in kept["mixed-c32"]} == {16}
    assert {r.max_tokens for r in kept["mixed-c32"]} == {4}


def test_probe_cli_rejects_bad_input() -> None:
    runner = CliRunner()
    for args in (
        ["probe"],
        ["probe", "--model", "m", "--endpoint", "http://127.0.0.1:1"],
        ["probe", "--endpoint", "http://127.0.0.1:1", "--concurrency", "0"],
        ["probe", "--endpoint", "http://127.0.0.1:1", "--concurrency", "2", "--rate", "1"],
        ["probe", "--endpoint", "http://127.0.0.1:1", "--param", "max_num_seqs=4"],
        ["probe", "--endpoint", "http://127.0.0.1:1", "--workload", "synthetic:input=x"],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "autotune: error:" in result.output


def test_probe_cli_help() -> None:
    result = CliRunner().invoke(app, ["probe", "--help"])
    assert result.exit_code == 0
    assert "--endpoint" in result.output and "--diagnose" in result.output


def test_probe_on_an_endpoint_that_is_not_there_fails_clearly() -> None:
    result = CliRunner().invoke(
        app,
        ["probe", "--endpoint", "http://127.0.0.1:9", "--workload", "synthetic:input=8,output=4"],
    )
    assert result.exit_code == 2
    assert "is not answering" in result.output


@pytest.mark.timeout(60)
@pytest.mark.parametrize("rejects", [False, True])
def test_an_endpoint_is_asked_whether_it_takes_ignore_eos(tmp_path: Path, rejects: bool) -> None:
    from tuner.runs.probe_run import _server

    knobs = {"reject_fields": ("ignore_eos",)} if rejects else {}
    with (
        FakeOpenAIServer(ttft_ms=1, itl_ms=1, **knobs) as srv,
        _server(None, srv.base_url + "/v1", "fake-model", tmp_path, lambda m: None) as (
            url, name, folder, startup, ignore_eos, _mpath,
        ),
    ):  # fmt: skip
        assert (url, name, folder, startup) == (srv.base_url, "fake-model", None, None)
        assert ignore_eos is (not rejects)


@pytest.mark.timeout(60)
def test_probe_on_an_endpoint_measures_the_given_load(tmp_path: Path) -> None:
    from tuner.runs.probe_run import probe

    wl = tmp_path / "wl.jsonl"
    wl.write_text(json.dumps({"prompt": "hello there", "max_tokens": 4}) + "\n")
    with FakeOpenAIServer(ttft_ms=1, itl_ms=1) as srv:
        result = probe(
            workload=parse_workload(str(wl)),
            endpoint=srv.base_url + "/v1",
            served_model="fake-model",
            concurrency=2,
            requests=6,
            warmup=2,
            out_dir=tmp_path,
        )
        assert srv.stats.max_in_flight <= 2
    assert result.metrics.n_completed == 6 and result.metrics.n_failed == 0
    assert result.load == {"concurrency": 2}
    assert result.metrics.ttft_ms.p50 is not None and result.metrics.tpot_ms.p50 is not None
    # an endpoint autotune did not start: no CPU neighbour decided for it
    assert result.neighbour_cpu_pct == 0.0


@pytest.mark.timeout(60)
def test_every_sweep_point_is_measured_beside_the_neighbour(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The serving model is calibrated on the sweeps and checked against load points measured
    beside the run's CPU neighbour: the sweeps run beside it too, every point inside the one
    neighbour started before the first and stopped after the last (the roofline after it)."""
    import probes.diagnose as diagnose

    events: list[str] = []

    class Recorder:
        def __init__(self, pct: float) -> None:
            self.pct = pct

        def __enter__(self) -> None:
            events.append(f"on {self.pct:g}")

        def __exit__(self, *exc: object) -> None:
            events.append("off")

    def keep(name: str, records: list[object]) -> None:
        events.append(name)

    monkeypatch.setattr(diagnose, "Neighbour", Recorder)
    _fake_diagnosis(8, neighbour_pct=8.0, keep=keep)
    points = [e for e in events if e not in ("on 8", "off")]
    assert len(points) == 9  # 4 prefill lengths, 4 decode batches, the mixed point
    assert events == ["on 8", *points, "off"]


def test_verdict_emulated_bf16_expects_batching_to_pay_off_through_float32() -> None:
    flat = dict(
        prefill_share=0.7,
        tpot_c1_ms=49.0,
        weight_bytes=270_000_000,
        bandwidth_gbps=20.0,
        tpot_growth=5.7,
        split_source="server",
        llc_bytes=32 * 2**20,
        batching_gain=1.1,  # tokens/s barely grows with the batch: batching alone is unlikely
    )
    plain = decide(**flat)  # type: ignore[arg-type]
    assert {s.name: s.expected for s in plain.stages}["batching"] == "unlikely"
    native = decide(bf16_over_fp32=1.9, **flat)  # type: ignore[arg-type]
    assert native.stages == plain.stages and "bf16 matmuls are slow" not in native.summary
    v = decide(bf16_over_fp32=1.1 / 74, **flat)  # type: ignore[arg-type]
    batching = next(s for s in v.stages if s.name == "batching")
    assert batching.expected == "likely" and "float32" in batching.reason
    before = next(s for s in plain.stages if s.name == "batching")
    assert stage_weight("batching", batching.expected) > stage_weight("batching", before.expected)
    assert "bf16 matmuls are slow here (1.5%" in v.summary
    assert v.bf16_over_fp32 == pytest.approx(1.1 / 74)


def test_device_rates_measure_float32_beside_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    import probes.roofline as roofline

    # never cut the side: a first small product slowed by a busy machine (the unit suite on
    # two workers) would otherwise cut 64 to 16
    monkeypatch.setattr(roofline, "MATMUL_MAX_S", float("inf"))
    r = roofline.measure_device("cpu", copy_mib=8, matmul_n=64, repeats=1)
    assert r.matmul_dtype == "bfloat16" and r.matmul_tflops > 0
    assert r.fp32_matmul_n == 64 and r.fp32_matmul_tflops is not None
    assert r.bf16_over_fp32 == pytest.approx(r.matmul_tflops / r.fp32_matmul_tflops)


def test_the_roofline_is_measured_in_a_process_of_its_own() -> None:
    """A fresh interpreter measures the device and hands its rates back as JSON; one that
    fails is a RooflineError with its last line, not a crash of the probe."""
    import probes.roofline as roofline

    r = roofline.measure_device_apart("cpu")
    assert r.device == "cpu" and r.matmul_tflops > 0 and r.fp32_matmul_tflops
    assert r.memory_bandwidth_gbps > 0
    with pytest.raises(roofline.RooflineError, match=r"failed: .*nonsense"):
        roofline.measure_device_apart("nonsense")


def test_a_slow_first_product_does_not_cut_the_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first bf16 product sets its kernel up (oneDNN): 0.2 s here, which at a quarter of
    the side extrapolates past MATMUL_MAX_S. Judged by the second, the side stays whole and
    bf16 and float32 are compared at the same size."""
    import torch

    import probes.roofline as roofline

    mm = torch.mm
    first: set[Any] = set()

    def slow_first(a: Any, b: Any) -> Any:
        if a.dtype not in first:
            first.add(a.dtype)
            time.sleep(0.2)
        return mm(a, b)

    monkeypatch.setattr(torch, "mm", slow_first)
    r = roofline.measure_device("cpu", copy_mib=8, matmul_n=64, repeats=1)
    assert first == {torch.bfloat16, torch.float32}  # the stand-in was used
    assert r.matmul_n == 64 and r.fp32_matmul_n == 64


def test_bf16_and_float32_are_timed_in_turn_so_a_busy_moment_slows_both_alike() -> None:
    """A scripted clock: every call takes 1 s, except during a 'busy' stretch (the 3rd to the
    8th timed call: 6 of 14), which take 10 s. In turn, the stretch falls on three rounds of
    each type, and both medians stay 1 s; one type after the other, it falls on four of the
    first type's seven, whose median it makes 10 s."""
    import probes.roofline as roofline

    now = [0.0]
    calls: list[str] = []

    def op(name: str) -> Callable[[], None]:
        def run() -> None:
            calls.append(name)
            measured = len(calls) - 2  # after the two warm-up calls
            now[0] += 10.0 if 3 <= measured <= 8 else 1.0

        return run

    times = roofline.in_turn([op("bf16"), op("fp32")], repeats=7, clock=lambda: now[0])
    assert calls == ["bf16", "fp32"] * 8  # a warm-up each, then in turn
    assert times == [1.0, 1.0]
    # The control: one type's rounds, then the other's, under the same stretch.
    now[0], calls[:] = 0.0, []
    one_then_other = [
        roofline.in_turn([op(n)], repeats=7, clock=lambda: now[0])[0] for n in ("a", "b")
    ]
    assert one_then_other == [10.0, 1.0]


@pytest.mark.timeout(60)
def test_the_prefill_sweep_skips_prompts_that_would_take_too_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import probes.diagnose as diagnose

    # The fake's TTFT (5 ms) scaled to 256 tokens is 20 ms: over this limit, so the sweep stops
    # after the two lengths a fit needs.
    monkeypatch.setattr(diagnose, "PREFILL_MAX_S", 0.012)
    said: list[str] = []
    d = _fake_diagnosis(4, progress=said.append)
    assert [p.prompt_tokens for p in d.prefill_sweep] == [32, 64]
    assert any("prefill of 256, 1024 tokens skipped" in s for s in said), said
    assert [p.concurrency for p in d.decode_sweep] == [1, 4, 16]  # the decode sweep is whole


@pytest.mark.timeout(60)
def test_a_decode_sweep_that_learnt_enough_from_one_request_ends_there() -> None:
    seen: list[int] = []

    def enough(p: SweepPoint) -> bool:
        seen.append(p.concurrency)
        return True

    d = _fake_diagnosis(8, enough=enough)
    assert seen == [1] and [p.concurrency for p in d.decode_sweep] == [1]
    assert d.load_metrics is None
    one = d.decode_sweep[0]
    assert one.ttft_ms_p50 is not None and one.e2e_ms_p50 is not None
    assert d.client_prefill_share == pytest.approx(one.ttft_ms_p50 / one.e2e_ms_p50)


def test_a_report_written_with_the_probes_old_budget_weights_still_loads() -> None:
    """Reports before 2026-12-06 carried the tuner's budget share in the probe's stage plan."""
    old = {"name": "batching", "expected": "likely", "reason": "r", "weight": 0.6}
    assert StagePlan.model_validate(old).model_dump() == {
        "name": "batching",
        "expected": "likely",
        "reason": "r",
    }
