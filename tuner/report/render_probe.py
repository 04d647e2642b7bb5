"""The probe's result for the terminal (``autotune probe``): TTFT and time per token apart,
with percentiles, the SLO verdict of its point and, with --diagnose, where the time goes."""

from __future__ import annotations

from typing import Any

from probes.metrics import LoadMetrics, Verdict
from tuner.report.render_cells import lat, workload_sent_text
from tuner.report.schema import Report
from tuner.report.text import ms_text


def render_probe(p: Any) -> str:
    """The probe's result for the terminal: TTFT and time per token apart, with percentiles."""
    m: LoadMetrics = p.metrics
    load = ", ".join(f"{k}={v:g}" for k, v in p.load.items())
    lines = [
        f"probe: {p.target.get('served_model')} at {p.target.get('endpoint')}, {p.workload}, "
        f"{load}",
        f"  output {m.output_tokens_per_s:.1f} tokens/s, {m.requests_per_s:.2f} requests/s, "
        f"{m.n_completed}/{m.n_requests} completed, client CPU {m.client_cpu_pct or 0:.0f} %",
        "  " + "".ljust(22) + "".join(h.rjust(10) for h in ("mean", "p50", "p90", "p95", "p99")),
    ]
    for name, d in (
        ("TTFT", m.ttft_ms),
        ("time per output token", m.tpot_ms),
        ("ITL", m.itl_ms),
        ("E2E", m.e2e_ms),
    ):
        cells = (d.mean, d.p50, d.p90, d.p95, d.p99)
        lines.append("  " + name.ljust(22) + "".join(ms_text(c).rjust(10) for c in cells))
    if p.verdict is not None:
        lines.append(f"  SLOs ({'; '.join(p.slo)}): {_slo_verdict(p.verdict, m)}")
    if sent := workload_sent_text(getattr(p, "workload_sent", None) or {}):
        lines.append(f"  sent: {sent}")
    d = p.diagnosis
    if d is not None:
        v = d.verdict
        lines.append(f"  verdict: {v.summary}")
        if d.prefill_rate_tokens_per_s:
            lines.append(f"  prefill rate: {d.prefill_rate_tokens_per_s:.0f} prompt tokens/s")
        for s in d.decode_sweep:
            lines.append(
                f"  decode at concurrency {s.concurrency}: TPOT p50 {ms_text(s.tpot_ms_p50)}, "
                f"{s.output_tokens_per_s:.0f} tokens/s"
            )
        if (x := d.mixed_point) is not None:
            lines.append(
                f"  mixed at concurrency {x.concurrency} ({x.output_tokens} output tokens on "
                "average): "
                f"TTFT p50 {ms_text(x.ttft_ms_p50)}, TPOT p50 {ms_text(x.tpot_ms_p50)}"
            )
        if d.device and d.model:
            lines.append(
                f"  roofline: {d.model.weight_bytes / 1e6:.0f} MB of weights per decoded token; "
                f"copy {d.device.memory_bandwidth_gbps:.1f} GB/s -> floor "
                f"{ms_text(v.decode_floor_ms)}/token; {matmul_text(d.device)}"
            )
        for s in v.stages:
            lines.append(f"  stage {s.name}: {s.expected} ({s.reason})")
    return "\n".join(lines)


def _slo_verdict(v: Verdict, m: LoadMetrics) -> str:
    """One point's verdict in words: each SLO's measured figure against its limit."""
    checks = ", ".join(
        f"{c.metric} p{c.percentile} {ms_text(c.measured_ms)} of {ms_text(c.limit_ms)}"
        for c in v.checks
        if c.percentile is not None
    )
    if not v.holds:
        return f"BREAKS ({checks}; errors {m.error_rate:.1%})"
    if v.provisional:
        return f"holds, provisionally: too few requests for the percentile ({checks})"
    return f"holds ({checks}; errors {m.error_rate:.1%})"


def probe_section(r: Report) -> list[str]:
    d = r.probe
    if d is None:
        return []
    v = d.verdict
    out = ["## Where the time goes (probe, on the baseline server)", "", f"**{v.summary}**", ""]
    if d.load_metrics:
        m = d.load_metrics
        out.append(
            f"At concurrency {d.load_concurrency}: TTFT p50 / p99 {lat(m.ttft_ms)}, "
            f"time per output token p50 / p99 {lat(m.tpot_ms)}; prefill {v.prefill_share:.0%} "
            f"/ decode {v.decode_share:.0%} of request time ({v.split_source} figures)."
        )
    if d.prefill_rate_tokens_per_s:
        pts = ", ".join(f"{p.prompt_tokens} tok: {ms_text(p.ttft_ms_p50)}" for p in d.prefill_sweep)
        out.append(
            f"Prefill: {d.prefill_rate_tokens_per_s:.0f} prompt tokens/s (TTFT at concurrency 1: "
            f"{pts})."
        )
    if d.decode_sweep:
        pts = ", ".join(
            f"c={p.concurrency}: {ms_text(p.tpot_ms_p50)}, {p.output_tokens_per_s:.0f} tok/s"
            for p in d.decode_sweep
        )
        out.append(f"Decoding (TPOT p50, output tokens/s): {pts}.")
    if (x := d.mixed_point) is not None:
        out.append(
            f"Prompts joining decoding sequences (c={x.concurrency}, {x.output_tokens} output "
            f"tokens on average, for the serving model's calibration): TTFT p50 "
            f"{ms_text(x.ttft_ms_p50)}, TPOT p50 {ms_text(x.tpot_ms_p50)}."
        )
    if d.device and d.model:
        fit = ""
        if d.llc_bytes:
            fit = f" against a {d.llc_bytes / 2**20:.0f} MiB last-level cache"
        out.append(
            f"Roofline: {d.model.parameters / 1e6:.0f} M parameters, "
            f"{d.model.weight_bytes / 1e6:.0f} MB of weights read per decoding step{fit}; "
            f"measured copy bandwidth {d.device.memory_bandwidth_gbps:.1f} GB/s, so at least "
            f"{ms_text(v.decode_floor_ms)} per step; measured {matmul_text(d.device)}."
        )
    out += ["", "| stage | expected to pay off | why |", "| --- | --- | --- |"]
    out += [f"| {s.name} | {s.expected} | {s.reason} |" for s in v.stages]
    out.append("")
    return out


def matmul_text(device: Any) -> str:
    """``bf16 matmul 1 GFLOP/s, float32 74 GFLOP/s`` (float32 where it was measured)."""
    out = f"bf16 matmul {device.matmul_tflops * 1000:.0f} GFLOP/s"
    if device.fp32_matmul_tflops is not None:
        out += f", float32 {device.fp32_matmul_tflops * 1000:.0f} GFLOP/s"
    return out
