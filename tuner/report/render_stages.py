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
    upto,
)
from tuner.report.schema import Report, StageReport, TrialReport
from tuner.report.text import load_text


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
        if t.number == 0 and t.score_tokens_per_s is None:
            out.append(
                f"| {label} | baseline: meets the SLOs at no load ({t.status}) | | | | | | | |"
            )
            prev_number = 0
            continue
        score = t.score_tokens_per_s or 0.0
        step = f"{score / prev:.2f}x" if prev else "-"
        total = f"{upto(r.baseline)}{score / base:.2f}x" if base else "-"
        which = "baseline" if t.number == 0 else f"trial {t.number}"
        if t.number == prev_number:
            which += " (unchanged: nothing better)"
        prev_number = t.number
        m = t.metrics
        out.append(
            f"| {label} | {which} | {score:.0f} `{bar(score, top, 16)}` | {step} | {total} | "
            f"{lat(m.ttft_ms) if m else '-'} | {lat(m.tpot_ms) if m else '-'} | "
            f"{quality_text(t.quality)} | {speculative_text(t)} |"
        )
        prev = score or prev
    rec = r.recommended
    if rec is not None:
        m = rec.metrics
        gain = f"{rec.gain_vs_baseline:.2f}x (confirmed)" if rec.gain_vs_baseline else "-"
        out.append(
            f"| confirmed | trial {rec.from_trial}, fresh start, {rec.n_requests} requests at "
            f"{load_text(rec.load)} | {m.output_tokens_per_s:.0f} "
            f"`{bar(m.output_tokens_per_s, top, 16)}` | | {gain} | {lat(m.ttft_ms)} | "
            f"{lat(m.tpot_ms)} | {quality_text(m.quality)} | "
            f"{'-' if m.acceptance_rate is None else f'accepted {m.acceptance_rate:.0%}'} |"
        )
    out.append("")
    for st in r.stages:
        c = getattr(st, "contrast", None)
        if c is not None:
            out += [_contrast(c) + ".", ""]
    return out


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
