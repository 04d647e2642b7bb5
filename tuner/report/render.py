"""Renderers: report.md and the end-of-run terminal summary. They format; they never compute
anything that is not already in the report. report.md's sections live beside this module:
render_recommend (the recommendation), render_stages (the search), render_probe (the probe),
render_rescore (a re-score); render_cells formats their cells."""

from __future__ import annotations

from typing import Any

from probes.drift import HORIZON_S
from probes.exactness import describe
from tuner.report.held_out_view import held_out_view
from tuner.report.render_cells import (
    interval,
    lat,
    quality_text,
    settings_text,
    shell_command,
    workload_sent_text,
)
from tuner.report.render_held_out import held_out_section
from tuner.report.render_model import model_section
from tuner.report.render_objective import robust_section
from tuner.report.render_probe import probe_section
from tuner.report.render_recommend import recommendation_section
from tuner.report.render_rescore import rescored_section
from tuner.report.render_stages import configurations_section, stages_section, waterfall
from tuner.report.schema import Report
from tuner.report.text import load_text, ms_text, slo_text


def _arrivals_text(w: dict[str, Any]) -> str:
    """The open loop's arrival process at a rate, as the workload's description gives it."""
    if w.get("kind") == "trace":
        k = w.get("time_scale_per_rps")
        scale = f", time scale = rate x {k:.4g}" if isinstance(k, float) else ""
        return f"replay of the trace's own times at a request rate (its rate equivalent{scale})"
    arrivals = (w.get("parameters") or {}).get("arrivals")
    if isinstance(arrivals, dict) and arrivals.get("kind") == "gamma":
        return f"gamma arrivals (cv {arrivals.get('cv', 0):g}) at a request rate"
    return "Poisson arrivals at a request rate"


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
            f"open-loop {_arrivals_text(r.workload)} (what a service sees)"
            if r.load.get("model") == "rate"
            else "a closed loop of concurrent clients"
        )
        beside = r.options.get("neighbour_cpu_pct") if isinstance(r.options, dict) else None
        nb = f" Measured beside a CPU neighbour burning {beside:g} % of one core." if beside else ""
        out += [
            f"**Load**: {model}; capacity in {r.load.get('unit')}. Salt `{r.salt}`.{nb}",
            "",
        ]
    if sent := workload_sent_text(r.workload):
        out += [f"**Workload sent**: {sent}.", ""]
    out += rescored_section(r)
    out += recommendation_section(r)
    out += robust_section(r)
    out += held_out_section(r)
    base = r.baseline
    if r.exactness is not None:
        out += [f"**Exactness of speculative decoding**: {describe(r.exactness)}.", ""]
        if r.exactness.reason:
            out += [r.exactness.reason + ".", ""]
    out += waterfall(r)
    out += probe_section(r)
    if base:
        out += [
            "## Baseline",
            "",
            f"{r.baseline_note.rstrip('.')}. Score {base.score_tokens_per_s or 0:.0f} "
            f"output tokens/s{interval(base.estimate)}"
            + (f" at {load_text(base.load)}" if base.load else "")
            + f" ({base.status}).",
            "",
        ]
    out += configurations_section(r)
    out += model_section(r)
    out += stages_section(r)
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


def render_summary(r: Report, report_dir: str) -> str:
    lines = [f"autotune: run {r.run_id} {r.status}"]
    rec = r.recommended
    if rec:
        m = rec.metrics
        gain = (
            f" ({rec.gain_vs_baseline:.2f}x the confirmed baseline)" if rec.gain_vs_baseline else ""
        )
        lines += [
            f"  recommended: {settings_text(rec.params, r.knob_defaults)}",
            f"  at {load_text(rec.load)}: {m.output_tokens_per_s:.0f} output tokens/s{gain}",
            f"  TTFT p50/p99 {lat(m.ttft_ms)} | TPOT p50/p99 {lat(m.tpot_ms)} | "
            f"meets SLO: {'yes' if rec.meets_slo else 'no'}",
            f"  launch: {shell_command(rec.launch_command, rec.env)}"
            if rec.launch_command
            else f"  endpoint {r.endpoint}: server settings not tuned; this is its load",
        ]
        if m.quality:
            lines.insert(-1, f"  quality: {quality_text(m.quality)}")
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
    if (held := held_out_view(r)) is not None:
        lines.append(f"  held-out workloads: {held.verdict}")
    lines.append(f"  report: {report_dir}/report.md (and report.json)")
    return "\n".join(lines)


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
