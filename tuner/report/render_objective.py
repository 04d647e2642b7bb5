"""report.md's section of an ``--objective robust`` run: each configuration's capacity and gain
on every workload it was ranked on, and its worst gain (tuner/report/objective_view.py computes;
this only writes)."""

from __future__ import annotations

from tuner.report.objective_view import INTRO, Cell, RobustRow, robust_view
from tuner.report.schema import Report


def _cell(c: Cell) -> str:
    if c.tokens_per_s is None:
        return c.status
    gain = f" ({c.gain:.2f}x)" if c.gain is not None else ""
    return f"{c.tokens_per_s:.0f}{gain}"


def _row(x: RobustRow) -> str:
    worst = "-" if x.worst_gain is None else f"{x.worst_gain:.2f}x"
    if x.recommended:
        worst = f"**{worst}** (recommended)"
    return f"| {x.label} | " + " | ".join(_cell(c) for c in x.cells) + f" | {worst} |"


def robust_section(r: Report) -> list[str]:
    """The section, or nothing where the run was ranked on the tuned workload alone."""
    v = robust_view(r)
    if v is None:
        return []
    heads = [f"`{w}`" + (" (tuned)" if i == 0 else "") for i, w in enumerate(v.workloads)]
    return [
        "## Ranked by the worst gain over the workloads (--objective robust)",
        "",
        f"**{v.sentence}**",
        "",
        INTRO.format(gain="with the gain over the baseline in brackets"),
        "",
        "| configuration | " + " | ".join(heads) + " | worst gain |",
        "| --- | " + " | ".join("---" for _ in heads) + " | --- |",
        *(_row(x) for x in v.rows),
        "",
    ]
