"""The probe's verdict: which phase dominates, whether decoding is memory-bound, which stages
can pay off. Pure logic over measured figures, so it is tested on recorded inputs.

Rules (each figure comes from the probe's own sweeps, never from a data sheet):

- Phase split: the share of a request's time spent before the first token (prefill, queueing
  included) against after it (decoding), from the server's prefill/decode histograms where the
  engine has them, else from the client (TTFT against E2E - TTFT).
- Decode floor: reading every weight once per step at the measured copy bandwidth,
  ``weight_bytes / bandwidth``. Decoding is called memory-bound when a single sequence's TPOT is
  within 2x of that floor (the weights dominate the step), unless the weights fit in the
  last-level cache, in which case DRAM bandwidth is not what bounds it.
- Batching pays off when output tokens/s grows at least 1.5x from concurrency 1 to the largest
  concurrency swept (a step serves many sequences for about the price of one). It pays off too
  where bf16 matmuls run at under half float32's rate (``BF16_EMULATED``: a CPU without bf16
  instructions emulates them; the batching stage holds the compute data type there). (The
  probe once put an AMD Zen 4 with avx512_bf16 at 19-23 % of float32's: its first product
  paid for oneDNN's set-up and cut the side, and other work in the tuner's process slowed
  its products; measured apart, that CPU's bf16 runs at 2.2x float32's, probes/roofline.py.)
- Quantisation (fewer weight bytes per token) is expected to pay off when decoding is
  memory-bound and decoding takes at least a third of the time; else it mostly costs quality.
- Speculative decoding is expected to pay off when decoding is memory-bound and a step's cost
  grows little with the batch (spare compute for the draft tokens) at the load the SLO allows;
  under a throughput objective at high concurrency that compute is already in use.
The order of the stages never changes (batching, quantisation, speculative decoding). The verdict
says what is expected and why; how the tuner weighs its budget by that is the tuner's own
(tuner/run/stages.py ``STAGE_WEIGHTS``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

Expectation = Literal["likely", "unlikely", "unknown"]
BF16_EMULATED = 0.5  # bf16 matmul rate / float32's under this: the device emulates bf16


class StagePlan(BaseModel):
    """Whether a stage is expected to pay off on this machine, and why."""

    model_config = ConfigDict(extra="forbid")

    name: str
    expected: Expectation
    reason: str

    @model_validator(mode="before")
    @classmethod
    def _legacy_weight(cls, data: Any) -> Any:
        # Reports written before 2026-12-06 carry the tuner's budget share here, as the
        # probe decided it then; the tuner decides it now (tuner/run/stages.py).
        if isinstance(data, dict) and "weight" in data:
            data = {k: v for k, v in data.items() if k != "weight"}
        return data


class ProbeVerdict(BaseModel):
    """The probe's finding (not a load point's SLO verdict: that is probes.metrics.Verdict)."""

    model_config = ConfigDict(extra="forbid")

    bottleneck: Literal["prefill", "decode"]
    prefill_share: float
    decode_share: float
    split_source: Literal["server", "client"]
    decode_memory_bound: bool | None
    decode_floor_ms: float | None
    tpot_c1_ms: float | None
    weights_fit_in_cache: bool | None
    batching_gain: float | None  # tokens/s at the largest swept concurrency / at concurrency 1
    tpot_growth: float | None  # TPOT at the largest swept concurrency / at concurrency 1
    bf16_over_fp32: float | None = None  # bf16 matmul throughput / float32's on the device
    summary: str
    stages: list[StagePlan]


def decide(
    *,
    prefill_share: float,
    split_source: Literal["server", "client"],
    tpot_c1_ms: float | None,
    weight_bytes: int | None,
    bandwidth_gbps: float | None,
    llc_bytes: int | None,
    batching_gain: float | None,
    tpot_growth: float | None,
    bf16_over_fp32: float | None = None,
) -> ProbeVerdict:
    """Turn measured figures into the verdict and the stage plan (see the module docstring)."""
    decode_share = 1.0 - prefill_share
    floor_ms = (
        weight_bytes / (bandwidth_gbps * 1e9) * 1000.0 if weight_bytes and bandwidth_gbps else None
    )
    fits = weight_bytes <= llc_bytes if (weight_bytes and llc_bytes) else None
    memory_bound: bool | None = None
    if floor_ms is not None and tpot_c1_ms:
        memory_bound = (tpot_c1_ms <= 2.0 * floor_ms) and not fits
    bottleneck: Literal["prefill", "decode"] = "prefill" if prefill_share > 0.5 else "decode"

    plans: list[StagePlan] = []
    if batching_gain is None:
        plans.append(
            StagePlan(
                name="batching",
                expected="unknown",
                reason="no concurrency sweep to judge batching by",
            )
        )
    elif batching_gain >= 1.5:
        plans.append(
            StagePlan(
                name="batching",
                expected="likely",
                reason=f"tokens/s grows {batching_gain:.1f}x from 1 sequence to the largest batch "
                "swept: the batch limits and prefill chunking set the capacity",
            )
        )
    elif tpot_growth is not None and tpot_growth < 1.5:
        # Neither throughput nor the time per token moves with concurrency: the requests do
        # not share steps at all, they queue (a server without continuous batching).
        plans.append(
            StagePlan(
                name="batching",
                expected="likely",
                reason=f"tokens/s grows only {batching_gain:.1f}x with concurrency while the time "
                f"per token stays flat ({tpot_growth:.2f}x): requests are served one after "
                "another and queue, so batching them is the remedy",
            )
        )
    else:
        plans.append(
            StagePlan(
                name="batching",
                expected="unlikely",
                reason=f"tokens/s grows only {batching_gain:.1f}x with the batch",
            )
        )

    emulated = bf16_over_fp32 is not None and bf16_over_fp32 < BF16_EMULATED
    if emulated:
        b = plans[-1]
        b.expected = "likely"
        b.reason = (
            f"torch's bf16 matmuls run at {bf16_over_fp32:.1%} of float32's here, so serving "
            f"in float32 computes faster where the stage's dtype knob offers it (on a CPU "
            f"without bf16 instructions); " + b.reason
        )

    if memory_bound is None:
        q_exp: Expectation = "unknown"
        q_reason = "no decode floor measured (model size or bandwidth unknown)"
    elif fits:
        q_exp = "unlikely"
        q_reason = (
            "the weights fit in the last-level cache, so decoding is not bound by DRAM "
            "bandwidth: fewer weight bytes save little"
        )
    elif memory_bound and decode_share >= 1 / 3:
        q_exp = "likely"
        q_reason = (
            f"a single sequence's step ({tpot_c1_ms:.1f} ms) is within 2x of reading the weights "
            f"once ({floor_ms:.1f} ms) and decoding takes {decode_share:.0%} of the time"
        )
    elif memory_bound:
        q_exp = "unlikely"
        q_reason = f"decoding is memory-bound but takes only {decode_share:.0%} of the time"
    else:
        q_exp = "unlikely"
        q_reason = (
            f"a single sequence's step ({tpot_c1_ms:.1f} ms) is far above reading the weights "
            f"once ({floor_ms:.1f} ms): per-step overheads, not weight bytes, bound decoding"
        )
    plans.append(
        StagePlan(
            name="quantisation",
            expected=q_exp,
            reason=q_reason,
        )
    )

    if memory_bound and tpot_growth is not None and tpot_growth < 1.5:
        s_exp: Expectation = "likely"
        s_reason = (
            f"decoding is memory-bound and a step costs only {tpot_growth:.1f}x more at the "
            "largest batch: spare compute for draft tokens"
        )
    elif memory_bound is None or tpot_growth is None:
        s_exp, s_reason = "unknown", "decode scaling or floor not measured"
    elif not memory_bound:
        s_exp = "unlikely"
        s_reason = "decoding is not memory-bound: verifying draft tokens costs real compute"
    else:
        s_exp = "unlikely"
        s_reason = (
            f"a step costs {tpot_growth:.1f}x more at the largest batch: the compute a draft "
            "needs is already in use at the loads the SLO allows"
        )
    plans.append(
        StagePlan(
            name="speculative",
            expected=s_exp,
            reason=s_reason,
        )
    )
    where = (
        "before the first token (prefill and queueing)" if bottleneck == "prefill" else ("decoding")
    )
    mem = {True: "memory-bound", False: "not memory-bound", None: "of unknown bound"}[memory_bound]
    summary = (
        f"{max(prefill_share, decode_share):.0%} of request time is spent {where} "
        f"({split_source} figures); decoding is {mem}"
        + (" (the weights fit in the last-level cache)" if fits else "")
        + (
            f"; bf16 matmuls are slow here ({bf16_over_fp32:.1%} of float32's rate)"
            if emulated
            else ""
        )
        + ". Expected to pay off: "
        + (", ".join(p.name for p in plans if p.expected == "likely") or "none")
        + "."
    )
    return ProbeVerdict(
        bottleneck=bottleneck,
        prefill_share=prefill_share,
        decode_share=decode_share,
        split_source=split_source,
        decode_memory_bound=memory_bound,
        decode_floor_ms=floor_ms,
        tpot_c1_ms=tpot_c1_ms,
        weights_fit_in_cache=fits,
        batching_gain=batching_gain,
        tpot_growth=tpot_growth,
        bf16_over_fp32=bf16_over_fp32,
        summary=summary,
        stages=plans,
    )
