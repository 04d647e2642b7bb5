"""A re-scored run (tuner/runs/rescore.py) in sentences: for report.md and the terminal."""

from __future__ import annotations

import shlex

from tuner.report.schema import Report
from tuner.report.text import load_text, slo_text


def rescore_lines(r: Report) -> list[str]:
    """What a re-score found, in sentences: the new best (unconfirmed), what the recorded
    loads cannot say, and the command that confirms the best."""
    x = r.rescored
    if x is None:
        return []
    was = f"trial {x.from_recommended}" if x.from_recommended is not None else "nothing"
    lines = [
        f"Re-scored from the recorded requests under {slo_text(r.slo)} (measured under "
        f"{slo_text(x.from_slo)}, where the run recommended {was}); nothing was measured again.",
    ]
    if x.best_trial is None:
        lines.append("No recorded configuration meets these SLOs at any load measured.")
    else:
        name = "the baseline" if x.best_trial == 0 else f"trial {x.best_trial}"
        gain = f", {x.gain_vs_baseline:.2f}x the baseline's" if x.gain_vs_baseline else ""
        lines.append(
            f"New best, UNCONFIRMED (a search figure): {name}, "
            f"{x.best_tokens_per_s or 0:.0f} output tokens/s at {load_text(x.best_load)}{gain}."
        )
    lines += [f"Cannot say: {u}." for u in x.unanswerable]
    if x.confirm_command:
        lines.append(
            f"Confirm it (a fresh start, the full sample): {shlex.join(x.confirm_command)}"
        )
    return lines


def rescored_section(r: Report) -> list[str]:
    if r.rescored is None:
        return []
    return ["## Re-scored", "", *(f"- {line}" for line in rescore_lines(r)), ""]


def render_rescore_summary(r: Report) -> str:
    return "\n".join([f"autotune: run {r.run_id} re-scored", *rescore_lines(r)])
