"""Renderers: report.md and the end-of-run terminal summary. They format; they never compute
anything that is not already in the report."""

from __future__ import annotations

import shlex
from typing import Any

from probes.drift import HORIZON_S
from probes.exactness import describe
from probes.metrics import Dist, LoadMetrics
from probes.quality import QualityCheck
from tuner.render_rescore import rescored_section
from tuner.report import Report, StageReport, TrialReport
from tuner.text import load_text, ms_text, slo_text


def _lat(d: Dist) -> str:
    return f"{ms_text(d.p50)} / {ms_text(d.p99)}"


def _params(p: dict[str, Any], defaults: dict[str, Any] | None = None) -> str:
    """Settings as text; with ``defaults``, only those that differ from the engine's own."""
    if defaults is not None:
        changed = {k: v for k, v in p.items() if k not in defaults or defaults[k] != v}
        if not changed:
            return "the engine's defaults"
        rest = " (the rest at the engine's defaults)" if len(changed) < len(p) else ""
        return ", ".join(f"{k}={v}" for k, v in changed.items()) + rest
    return ", ".join(f"{k}={v}" for k, v in p.items()) or "defaults"


def shell_command(argv: list[str], env: dict[str, str]) -> str:
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *map(shlex.quote, argv)])


def _interval(e: Any) -> str:
    """An estimate's 90 % interval of tokens/s, ``287-315`` or ``287-open``."""
    if e is None:
        return ""
    hi = "open" if e.high is None else f"{e.high:.0f}"
    return f" (90 % {e.low:.0f}-{hi})"


def _bar(value: float, top: float, width: int = 24) -> str:
    n = round(width * value / top) if top > 0 else 0
    return "█" * n + "·" * (width - n)


def _quality(q: QualityCheck | None) -> str:
    if q is None:
        return "-"
    what = "perplexity" if q.metric == "perplexity" else "agreement"
    mark = "" if q.holds else " ✗"
    return f"{what} {q.value:.4g} ({q.degradation_pct:+.2f} %){mark}"


def _spec(t: TrialReport) -> str:
    parts = []
    m = t.metrics or (t.points[-1].metrics if t.points else None)
    if m is not None and m.acceptance_rate is not None:
        length = f", length {m.mean_acceptance_length:.2f}" if m.mean_acceptance_length else ""
        parts.append(f"accepted {m.acceptance_rate:.0%}{length}")
    e = t.exactness
    if e is not None:
        if not e.checked:
            parts.append("exactness not checked")
        elif e.identical:
            parts.append("outputs identical")
        elif e.first_divergence is not None:
            d = e.first_divergence
            parts.append(f"outputs diverged (prompt {d.prompt_index}, token {d.position})")
    return "; ".join(parts) or "-"


def _trial_row(t: TrialReport, top: float, defaults: dict[str, Any]) -> str:
    m = t.metrics
    score = t.score_tokens_per_s or 0.0
    load = load_text(t.load)
    ttft = _lat(m.ttft_ms) if m else "-"
    tpot = _lat(m.tpot_ms) if m else "-"
    why = f" {t.error}" if t.error else ""
    if t.rejected:
        why += f"; not recommendable: {t.rejected}"
    start = f"{t.startup_s:.0f} s" if t.startup_s is not None else "-"
    settings = _params(t.params, defaults) if t.params else "baseline"
    return (
        f"| {t.number} | {t.stage} | {settings} | {t.status}{why} | {load} | "
        f"{score:.0f}{_interval(t.estimate)} `{_bar(score, top)}` | {ttft} | {tpot} | "
        f"{_quality(t.quality)} | "
        f"{_spec(t)} | {start} |"
    )


def _contrast(c: Any) -> str:
    if c.factor is None:
        return f"{c.label}: not measured (one side has no configuration that met the SLOs)"
    return (
        f"**{c.label}: {c.factor:.2f}x** under the SLOs ({c.on_score:.0f} tokens/s with "
        f"{c.knob} on, trial {c.on_trial}; {c.off_score:.0f} with it off, trial {c.off_trial})"
    )


def _waterfall(r: Report) -> list[str]:
    """Baseline, then the configuration carried out of each stage, with its gain."""
    if r.baseline is None or not r.stages:
        return []
    by_number = {t.number: t for t in [r.baseline, *r.trials]}
    rows: list[tuple[str, TrialReport | None, StageReport | None]] = [
        ("baseline", r.baseline, None)
    ]
    for st in r.stages:
        t = by_number.get(st.best_trial) if st.best_trial is not None else None
        rows.append((f"after {st.name}", t if st.status == "run" else None, st))
    top = max((t.score_tokens_per_s or 0.0 for _, t, _ in rows if t), default=0.0)
    base = r.baseline.score_tokens_per_s
    out = [
        "## Stage by stage",
        "",
        "Each stage starts from the configuration the stage before carried out. Score = output "
        "tokens/s at the estimated capacity: where the fit of latency against load over all of "
        "a configuration's search points crosses the SLOs; TTFT and time per output token are "
        "p50 / p99 at the point measured closest under it.",
        "",
        "| step | configuration | score (tok/s) | step gain | vs baseline | TTFT | TPOT | "
        "quality | speculative |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    prev = base
    prev_number: int | None = None
    for label, t, s in rows:
        if s is not None and s.status == "skipped":
            out.append(f"| {label} | skipped: {s.reason} | | | | | | | |")
            continue
        if t is None:
            out.append(f"| {label} | nothing met the SLOs | | | | | | | |")
            continue
        score = t.score_tokens_per_s or 0.0
        step = f"{score / prev:.2f}x" if prev else "-"
        total = f"{_upto(r.baseline)}{score / base:.2f}x" if base else "-"
        which = "baseline" if t.number == 0 else f"trial {t.number}"
        if t.number == prev_number:
            which += " (unchanged: nothing better)"
        prev_number = t.number
        m = t.metrics
        out.append(
            f"| {label} | {which} | {score:.0f} `{_bar(score, top, 16)}` | {step} | {total} | "
            f"{_lat(m.ttft_ms) if m else '-'} | {_lat(m.tpot_ms) if m else '-'} | "
            f"{_quality(t.quality)} | {_spec(t)} |"
        )
        prev = score or prev
    rec = r.recommended
    if rec is not None:
        m = rec.metrics
        gain = f"{rec.gain_vs_baseline:.2f}x (confirmed)" if rec.gain_vs_baseline else "-"
        out.append(
            f"| confirmed | trial {rec.from_trial}, fresh start, {rec.n_requests} requests at "
            f"{load_text(rec.load)} | {m.output_tokens_per_s:.0f} "
            f"`{_bar(m.output_tokens_per_s, top, 16)}` | | {gain} | {_lat(m.ttft_ms)} | "
            f"{_lat(m.tpot_ms)} | {_quality(m.quality)} | "
            f"{'-' if m.acceptance_rate is None else f'accepted {m.acceptance_rate:.0%}'} |"
        )
    out.append("")
    for st in r.stages:
        c = getattr(st, "contrast", None)
        if c is not None:
            out += [_contrast(c) + ".", ""]
    return out


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


def render_markdown(r: Report) -> str:
    out: list[str] = [f"# autotune report: {r.model} on {r.engine}", ""]
    out.append(
        f"Run `{r.run_id}` ({r.status}), {r.created_at}. {r.engine_version} on "
        f"{r.hardware.label}. Workload `{r.workload.get('spec') or r.workload.get('path')}`."
    )
    slos = slo_text(r.slo)
    q = r.quality_slo or {}
    quality = ""
    if "max_degradation_pct" in q:
        dflt = " (the default)" if q.get("default") else ""
        quality = f"; quality degradation <= {q['max_degradation_pct']:g} %{dflt}"
    out += ["", f"**SLOs**: {slos}{quality}; error rate <= {r.max_error_rate:.1%}.", ""]
    if r.load:
        model = (
            "open-loop Poisson arrivals at a request rate (what a service sees)"
            if r.load.get("model") == "rate"
            else "a closed loop of concurrent clients"
        )
        beside = r.options.get("neighbour_cpu_pct") if isinstance(r.options, dict) else None
        nb = f" Measured beside a CPU neighbour burning {beside:g} % of one core." if beside else ""
        out += [
            f"**Load**: {model}; capacity in {r.load.get('unit')}. Salt `{r.salt}`.{nb}",
            "",
        ]
    out += rescored_section(r)
    rec = r.recommended
    base = r.baseline
    if rec:
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
        out += [
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
                    f"{rec.capacity.tokens_per_s:.0f} tokens/s{_interval(rec.capacity)}"
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
            f"- TTFT p50 / p99: **{_lat(m.ttft_ms)}**",
            f"- Time per output token p50 / p99: **{_lat(m.tpot_ms)}**",
            f"- Errors: {m.n_failed} of {m.n_requests}; client CPU {m.client_cpu_pct or 0:.0f} %"
            + (
                f"; peak KV cache use {m.kv_cache_peak_pct:.0f} %"
                if m.kv_cache_peak_pct is not None
                else ""
            ),
            *([f"- Quality against the baseline: {_quality(m.quality)}"] if m.quality else []),
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
                    f"{_params(rec.params, r.knob_defaults)}.",
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
    else:
        out += ["## Recommendation", "", "None: no configuration met the SLOs.", ""]
    if r.exactness is not None:
        out += [f"**Exactness of speculative decoding**: {describe(r.exactness)}.", ""]
        if r.exactness.reason:
            out += [r.exactness.reason + ".", ""]
    out += _waterfall(r)
    out += _probe_section(r)
    if base:
        out += [
            "## Baseline",
            "",
            f"{r.baseline_note.rstrip('.')}. Score {base.score_tokens_per_s or 0:.0f} "
            f"output tokens/s{_interval(base.estimate)}"
            + (f" at {load_text(base.load)}" if base.load else "")
            + f" ({base.status}).",
            "",
        ]
    allt = [t for t in [base, *r.trials] if t]
    top = max((t.score_tokens_per_s or 0.0 for t in allt), default=0.0)
    out += [
        "## Configurations tried",
        "",
        "Score = output tokens/s at the estimated capacity (its 90 % interval from a bootstrap "
        "over requests); load = that capacity. TTFT and TPOT are p50 / p99 at the point "
        "measured closest under it.",
        "",
        "| # | stage | settings | status | load | score (tok/s) | TTFT | TPOT | quality | "
        "speculative | start-up |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *(_trial_row(t, top, r.knob_defaults) for t in allt),
        "",
    ]
    if r.stages:
        out += ["## Stages", ""]
        for s in r.stages:
            g = f", gain {s.gain:.2f}x" if s.gain else ""
            held = {
                True: "; the prediction held",
                False: "; the prediction did NOT hold",
                None: "",
            }[s.prediction_held]
            out.append(f"- **{s.name}** ({s.status}{g}{held}): {s.reason}")
            c = getattr(s, "contrast", None)
            if c is not None:
                out.append(f"  - {_contrast(c)}")
        out.append("")
    if r.comparisons:
        out += ["## Side by side", ""]
        out += [
            f"- trials {c.trials[0]} and {c.trials[1]}: trial {c.winner} goes on; {c.note}"
            for c in r.comparisons
        ]
        out.append("")
    out += _hygiene(r)
    if r.timing:
        t = r.timing
        out += [
            "## Where the time went",
            "",
            f"{t.wall_s:.0f} s in all: {t.engine_starts} engine starts took {t.startup_s:.0f} s, "
            f"warm-up {t.warmup_s:.0f} s, measuring {t.measure_s:.0f} s, the rest "
            f"{t.other_s:.0f} s.",
            "",
        ]
    if r.notes or r.error:
        out += ["## Notes", ""]
        out += [f"- {n}" for n in r.notes]
        if r.error:
            out.append(f"- error: {r.error}")
        out.append("")
    return "\n".join(out)


def _probe_section(r: Report) -> list[str]:
    d = r.probe
    if d is None:
        return []
    v = d.verdict
    out = ["## Where the time goes (probe, on the baseline server)", "", f"**{v.summary}**", ""]
    if d.load_metrics:
        m = d.load_metrics
        out.append(
            f"At concurrency {d.load_concurrency}: TTFT p50 / p99 {_lat(m.ttft_ms)}, "
            f"time per output token p50 / p99 {_lat(m.tpot_ms)}; prefill {v.prefill_share:.0%} "
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
    if d.device and d.model:
        fit = ""
        if d.llc_bytes:
            fit = f" against a {d.llc_bytes / 2**20:.0f} MiB last-level cache"
        out.append(
            f"Roofline: {d.model.parameters / 1e6:.0f} M parameters, "
            f"{d.model.weight_bytes / 1e6:.0f} MB of weights read per decoding step{fit}; "
            f"measured copy bandwidth {d.device.memory_bandwidth_gbps:.1f} GB/s, so at least "
            f"{ms_text(v.decode_floor_ms)} per step; measured bf16 matmul "
            f"{d.device.matmul_tflops * 1000:.0f} GFLOP/s."
        )
    out += ["", "| stage | expected to pay off | why | budget share |", "| --- | --- | --- | --- |"]
    out += [f"| {s.name} | {s.expected} | {s.reason} | {s.weight:.0%} |" for s in v.stages]
    out.append("")
    return out


def render_summary(r: Report, report_dir: str) -> str:
    lines = [f"autotune: run {r.run_id} {r.status}"]
    rec = r.recommended
    if rec:
        m = rec.metrics
        gain = (
            f" ({rec.gain_vs_baseline:.2f}x the confirmed baseline)" if rec.gain_vs_baseline else ""
        )
        lines += [
            f"  recommended: {_params(rec.params, r.knob_defaults)}",
            f"  at {load_text(rec.load)}: {m.output_tokens_per_s:.0f} output tokens/s{gain}",
            f"  TTFT p50/p99 {_lat(m.ttft_ms)} | TPOT p50/p99 {_lat(m.tpot_ms)} | "
            f"meets SLO: {'yes' if rec.meets_slo else 'no'}",
            f"  launch: {shell_command(rec.launch_command, rec.env)}"
            if rec.launch_command
            else f"  endpoint {r.endpoint}: server settings not tuned; this is its load",
        ]
        if m.quality:
            lines.insert(-1, f"  quality: {_quality(m.quality)}")
    elif r.status != "complete":
        lines.append(f"  no recommendation: the run {r.status} before one was confirmed")
    else:
        lines.append("  no configuration met the SLOs")
    for st in r.stages:
        c = getattr(st, "contrast", None)
        if c is not None and c.factor is not None:
            lines.append(
                f"  {c.label}: {c.factor:.2f}x ({c.on_score:.0f} / {c.off_score:.0f} tok/s)"
            )
    if r.exactness is not None:
        lines.append(f"  speculative decoding exactness: {describe(r.exactness)}")
    lines.append(f"  report: {report_dir}/report.md (and report.json)")
    return "\n".join(lines)


def _cap_load(cap: Any, like: dict[str, float]) -> dict[str, float]:
    """The capacity's load under the recommendation's load key."""
    return {next(iter(like)): cap.load}


def _hygiene(r: Report) -> list[str]:
    """Prompt-token mismatches, output counts not taken from the server's usage, and open-loop
    points whose queue was still growing: shown only where they occurred."""
    seen: list[str] = []
    for t in [r.baseline, *r.trials]:
        if t is None:
            continue
        for p in t.points:
            m = p.metrics
            where = f"trial {t.number} at {load_text(p.load)}"
            if m.prompt_token_mismatches:
                seen.append(
                    f"{where}: {m.prompt_token_mismatches} requests whose prompt-token count "
                    "differed from what was asked"
                )
            if m.n_out_source not in ("usage", "none"):
                seen.append(f"{where}: output tokens counted from {m.n_out_source} (no usage)")
            if m.projected_wait_ms:
                seen.append(
                    f"{where}: the queue was still growing (TTFT +{m.ttft_drift_ms_per_s:.0f} ms "
                    f"per second of arrivals); judged as if the rate had been held "
                    f"{HORIZON_S:.0f} s (+{ms_text(m.projected_wait_ms)} of waiting)"
                )
    if not seen:
        return []
    return ["## Measurement notes", "", *(f"- {x}" for x in seen[:20]), ""]


def _unconfirmed_baseline(r: Report) -> list[str]:
    """Where the budget left the baseline unconfirmed: which of its figures is which."""
    b, rec = r.baseline, r.recommended
    if b is None or rec is None or rec.from_trial == 0 or b.score_tokens_per_s is None:
        return []
    searched, base = rec.search_score_tokens_per_s, b.score_tokens_per_s
    upto = _upto(b)
    which = (
        "a lower bound of its search (every load it was tried at held: the budget kept its "
        "time for the trials)"
        if upto
        else "its search estimate, from short points, which run optimistic under open-loop arrivals"
    )
    return [
        f"- Baseline not confirmed (time budget): {base:.0f} tokens/s is {which}; "
        "compare it with the recommended configuration's search estimate"
        + (f", {searched:.0f} tokens/s ({upto}{searched / base:.2f}x)" if searched else "")
        + ", not with the confirmed figure above"
    ]


def _upto(reference: TrialReport) -> str:
    """``at most `` before a ratio over ``reference``'s score where that score is a lower
    bound (every load it was tried at held), else nothing."""
    est = reference.estimate
    return "at most " if est is not None and est.censored == "above" else ""
