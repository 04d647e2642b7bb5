"""report.md's search sections: stage by stage (the waterfall from the baseline to the
confirmed figure), every configuration tried, and each stage's outcome."""

from __future__ import annotations

from typing import Any

from tuner.report.render_cells import (
    bar,
    interval,
    lat,
    quality_text,
    settings_text,
    speculative_text,
)
from tuner.report.schema import Report, TrialReport
from tuner.report.text import load_text, ms_text
from tuner.report.waterfall import waterfall_steps


def _trial_row(t: TrialReport, top: float, defaults: dict[str, Any]) -> str:
    m = t.metrics
    score = t.score_tokens_per_s or 0.0
    load = load_text(t.load)
    ttft = lat(m.ttft_ms) if m else "-"
    tpot = lat(m.tpot_ms) if m else "-"
    why = f" {t.error}" if t.error else ""
    if t.rejected:
        why += f"; not recommendable: {t.rejected}"
    start = f"{t.startup_s:.0f} s" if t.startup_s is not None else "-"
    settings = settings_text(t.params, defaults) if t.params else "baseline"
    return (
        f"| {t.number} | {t.stage} | {settings} | {t.status}{why} | {load} | "
        f"{score:.0f}{interval(t.estimate)} `{bar(score, top)}` | {ttft} | {tpot} | "
        f"{quality_text(t.quality)} | "
        f"{speculative_text(t)} | {start} |"
    )


def _contrast(c: Any) -> str:
    if c.factor is None:
        return f"{c.label}: not measured (one side has no configuration that met the SLOs)"
    return (
        f"**{c.label}: {c.factor:.2f}x** under the SLOs ({c.on_score:.0f} tokens/s with "
        f"{c.knob} on, trial {c.on_trial}; {c.off_score:.0f} with it off, trial {c.off_trial})"
    )


def waterfall(r: Report) -> list[str]:
    """Baseline, then the configuration carried out of each stage, with its gain (the steps
    and their gains from tuner/report/views.py ``waterfall_steps``, as report.html has them)."""
    if r.baseline is None or not r.stages:
        return []
    steps = waterfall_steps(r)
    top = max((s.tokens_per_s or 0.0 for s in steps if s.kind == "scored"), default=0.0)
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
    for s in steps:
        if s.kind == "skipped":
            out.append(f"| {s.label} | {s.note} | | | | | | | |")
        elif s.kind == "none":
            out.append(f"| {s.label} | nothing met the SLOs | | | | | | | |")
        elif s.kind == "no_load":
            out.append(
                f"| {s.label} | baseline: meets the SLOs at no load ({s.note}) | | | | | | | |"
            )
        elif s.kind == "scored":
            score = s.tokens_per_s or 0.0
            step = "-" if s.step_gain is None else f"{s.step_gain_word}{s.step_gain:.2f}x"
            total = "-" if s.vs_baseline is None else f"{s.vs_baseline_word}{s.vs_baseline:.2f}x"
            which = "baseline" if s.trial == 0 else f"trial {s.trial}"
            if s.note:
                which += f" ({s.note})"
            least = ">= " if s.lower_bound else ""
            out.append(
                f"| {s.label} | {which} | {least}{score:.0f} `{bar(score, top, 16)}` | {step} | "
                f"{total} | "
                f"{_lat(s.ttft_p50, s.ttft_p99)} | {_lat(s.tpot_p50, s.tpot_p99)} | "
                f"{s.quality} | {s.speculative} |"
            )
        else:  # the confirmed figure
            score = s.tokens_per_s or 0.0
            gain = f"{s.vs_baseline:.2f}x (confirmed)" if s.vs_baseline else "-"
            out.append(
                f"| {s.label} | trial {s.trial}, {s.note} at {s.load} | {score:.0f} "
                f"`{bar(score, top, 16)}` | | {gain} | {_lat(s.ttft_p50, s.ttft_p99)} | "
                f"{_lat(s.tpot_p50, s.tpot_p99)} | {s.quality} | {s.speculative} |"
            )
    out.append("")
    for st in r.stages:
        c = getattr(st, "contrast", None)
        if c is not None:
            out += [_contrast(c) + ".", ""]
    return out


def _lat(p50: float | None, p99: float | None) -> str:
    if p50 is None and p99 is None:
        return "-"
    return f"{ms_text(p50)} / {ms_text(p99)}"


def configurations_section(r: Report) -> list[str]:
    """Every configuration tried, baseline first: score, latencies, quality, speculation."""
    base = r.baseline
    allt = [t for t in [base, *r.trials] if t]
    top = max((t.score_tokens_per_s or 0.0 for t in allt), default=0.0)
    return [
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


def stages_section(r: Report) -> list[str]:
    """Each stage's outcome, its gain, whether the probe's prediction held, its contrast."""
    out: list[str] = []
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
    return out
