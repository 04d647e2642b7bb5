"""report.md's recommendation: the confirmed figure, its capacity, the baseline beside it (confirmed
or saying which of its figures is which), latencies, the launch command and the metrics table."""

from __future__ import annotations

from typing import Any

from probes.metrics import LoadMetrics
from tuner.report.render_cells import (
    interval,
    lat,
    quality_text,
    ratio_word,
    settings_text,
    shell_command,
    upto,
)
from tuner.report.schema import Report
from tuner.report.text import load_text, ms_text


def recommendation_section(r: Report) -> list[str]:
    """The "## Recommendation" section (or the line saying there is none)."""
    rec = r.recommended
    if rec is None:
        return ["## Recommendation", "", "None: no configuration met the SLOs.", ""]
    m = rec.metrics
    gain = (
        f"**{rec.gain_vs_baseline:.2f}x** the baseline, {rec.gain_basis}"
        if rec.gain_vs_baseline
        else f"gain {rec.gain_basis or 'not computed'}"
    )
    if rec.meets_slo:
        verdict = "meets every SLO"
    elif rec.provisional and rec.verdict.holds:
        verdict = "holds, but provisionally: too few requests for the percentile"
    elif rec.verdict.holds:
        verdict = "holds the SLOs, but without the headroom asked for"
    else:
        verdict = "does NOT meet the SLOs"
    base_c = r.baseline_confirmation
    return [
        "## Recommendation",
        "",
        f"**{m.output_tokens_per_s:.0f} output tokens/s** at {load_text(rec.load)} "
        f"({gain}): {verdict}, measured with {rec.n_requests} requests "
        + (
            "after a fresh start from the launch command below."
            if rec.fresh_start
            else f"({rec.confirmation})."
            if rec.confirmation
            else "."
        ),
        "",
        *(
            [
                f"- Capacity from every point (search and confirmation): "
                f"{load_text(_cap_load(rec.capacity, rec.load))}, "
                f"{rec.capacity.tokens_per_s:.0f} tokens/s{interval(rec.capacity)}"
            ]
            if rec.capacity is not None and rec.capacity.load is not None
            else []
        ),
        *(
            [
                f"- Sustained output at that rate: {rec.sustained_output_tokens_per_s:.0f} "
                "tokens/s (the rate x output tokens per request, what the search scores; "
                "the figure above is the window's, with the drain of the last requests "
                "inside, as vLLM's client counts it)"
            ]
            if rec.sustained_output_tokens_per_s is not None and "rate_rps" in rec.load
            else []
        ),
        *(
            [
                f"- Baseline, confirmed the same way: {base_c.metrics.output_tokens_per_s:.0f}"
                f" tokens/s at {load_text(base_c.load)} "
                f"({'meets' if base_c.meets_slo else 'does not meet'} the SLOs)"
            ]
            if base_c is not None
            else _unconfirmed_baseline(r)
        ),
        f"- TTFT p50 / p99: **{lat(m.ttft_ms)}**",
        f"- Time per output token p50 / p99: **{lat(m.tpot_ms)}**",
        f"- Errors: {m.n_failed} of {m.n_requests}; client CPU {m.client_cpu_pct or 0:.0f} %"
        + (
            f"; peak KV cache use {m.kv_cache_peak_pct:.0f} %"
            if m.kv_cache_peak_pct is not None
            else ""
        ),
        *([f"- Quality against the baseline: {quality_text(m.quality)}"] if m.quality else []),
        *(
            [
                f"- Speculative decoding: {m.acceptance_rate:.0%} of drafted tokens accepted"
                + (
                    f", {m.mean_acceptance_length:.2f} tokens per step"
                    if m.mean_acceptance_length
                    else ""
                )
            ]
            if m.acceptance_rate is not None
            else []
        ),
        "",
        *(
            [
                "Launch it:",
                "",
                "```sh",
                shell_command(rec.launch_command, rec.env),
                "```",
                "",
                "Settings changed from the engine's defaults: "
                f"{settings_text(rec.params, r.knob_defaults)}.",
            ]
            if rec.launch_command
            else [
                f"The server at {r.endpoint} was not started by autotune and its settings "
                "were not tuned: this is the load it sustains under the SLOs as it runs."
            ]
        ),
        "",
        *_metrics_table(m),
        "",
    ]


def _metrics_table(m: LoadMetrics) -> list[str]:
    rows = ["| metric | mean | p50 | p90 | p95 | p99 |", "| --- | --- | --- | --- | --- | --- |"]
    for name, d in (
        ("TTFT", m.ttft_ms),
        ("TPOT (time per output token)", m.tpot_ms),
        ("ITL", m.itl_ms),
        ("E2E", m.e2e_ms),
    ):
        rows.append(
            f"| {name} | {ms_text(d.mean)} | {ms_text(d.p50)} | {ms_text(d.p90)} | "
            f"{ms_text(d.p95)} | {ms_text(d.p99)} |"
        )
    return rows


def _cap_load(cap: Any, like: dict[str, float]) -> dict[str, float]:
    """The capacity's load under the recommendation's load key."""
    return {next(iter(like)): cap.load}


def _unconfirmed_baseline(r: Report) -> list[str]:
    """Where the budget left the baseline unconfirmed: which of its figures is which."""
    b, rec = r.baseline, r.recommended
    if b is None or rec is None or rec.from_trial == 0 or b.score_tokens_per_s is None:
        return []
    searched, base = rec.search_score_tokens_per_s, b.score_tokens_per_s
    trial = next((t for t in r.trials if t.number == rec.from_trial), None)
    word = ratio_word(trial, b)
    which = (
        "a lower bound of its search (every load it was tried at held: the budget kept its "
        "time for the trials)"
        if upto(b)
        else "its search estimate, from short points, which run optimistic under open-loop arrivals"
    )
    return [
        f"- Baseline not confirmed (time budget): {base:.0f} tokens/s is {which}; "
        "compare it with the recommended configuration's search estimate"
        + (f", {searched:.0f} tokens/s ({word}{searched / base:.2f}x)" if searched else "")
        + ", not with the confirmed figure above"
    ]
