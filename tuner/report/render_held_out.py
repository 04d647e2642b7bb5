"""report.md's held-out check (``--check-workload``): per workload the run was not tuned on, the
baseline's and the recommendation's capacity there, the gain, the tuned gain beside it, and
the plain sentence when the recommendation loses to the defaults (tuner/report/held_out_view.py
computes; this only writes)."""

from __future__ import annotations

from tuner.report.held_out_view import HeldOutRow, held_out_view
from tuner.report.schema import Report


def _tok(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _gain(x: float | None, loses: bool = False) -> str:
    if x is None:
        return "-"
    return f"**{x:.2f}x**" if loses else f"{x:.2f}x"


def _row(x: HeldOutRow) -> str:
    what = f"`{x.workload}`" + (f" (derived: {x.derived})" if x.derived else "")
    if x.sent:
        what += f"; sent {x.sent}"
    tuned = _gain(x.tuned_gain) + (f" ({x.tuned_basis})" if x.tuned_gain is not None else "")
    return (
        f"| {what} | {_tok(x.baseline_tokens_per_s)} at {x.baseline_load} | "
        f"{_tok(x.recommended_tokens_per_s)} at {x.recommended_load} | "
        f"{_gain(x.gain, x.loses)} | {tuned} | {x.note or '-'} |"
    )


def held_out_section(r: Report) -> list[str]:
    """The section, or nothing where the run was asked for no check."""
    v = held_out_view(r)
    if v is None:
        return []
    return [
        "## On workloads it was not tuned for",
        "",
        f"**{v.verdict}**",
        "",
        "After the confirmation, the baseline and the recommendation were each started again "
        "and scored on each held-out workload as a trial is: output tokens/s at the capacity "
        "estimated from all its points there. The gain is search figure over search figure; the "
        "tuned gain is the recommendation's on the tuned workload (confirmed over confirmed "
        "where both were).",
        "",
        "| workload | baseline tok/s at capacity | recommendation tok/s at capacity | gain | "
        "tuned gain | note |",
        "| --- | --- | --- | --- | --- | --- |",
        *(_row(x) for x in v.rows),
        "",
    ]
