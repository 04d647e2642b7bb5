"""report.html's held-out check (``--check-workload``): the verdict in a plain sentence, then per
workload the run was not tuned on the baseline's and the recommendation's capacity there, the
gain and the tuned gain beside it (tuner/report/held_out_view.py computes; this only draws)."""

from __future__ import annotations

from tuner.report.held_out_view import HeldOutView
from tuner.report.text import esc

INTRO = (
    "After the confirmation, the baseline and the recommendation were each started again and "
    "scored on each workload the run was not tuned on, as a trial is: output tokens/s at the "
    "capacity estimated from all its points there. The gain is search figure over search "
    "figure; the tuned gain is the recommendation's on the tuned workload."
)


def _num(x: float | None, spec: str = ".0f", suffix: str = "") -> str:
    return '<td class="num">' + ("-" if x is None else format(x, spec) + suffix) + "</td>"


def held_out_html(v: HeldOutView) -> str:
    """The verdict and the table (rows where the recommendation loses are marked)."""
    rows = []
    for r in v.rows:
        what = f"<code>{esc(r.workload)}</code>"
        if r.derived:
            what += f"<br>derived: {esc(r.derived)}"
        if r.sent:
            what += f"<br>sent: {esc(r.sent)}"
        tuned = _num(r.tuned_gain, ".2f", f"x ({r.tuned_basis})" if r.tuned_basis else "x")
        rows.append(
            f'<tr class="{"lost" if r.loses else ""}"><td>{what}</td>'
            f"{_num(r.baseline_tokens_per_s)}<td>{esc(r.baseline_load)}</td>"
            f"{_num(r.recommended_tokens_per_s)}<td>{esc(r.recommended_load)}</td>"
            f"{_num(r.gain, '.2f', 'x')}{tuned}<td>{esc(r.note or '-')}</td></tr>"
        )
    head = "".join(
        f"<th>{esc(h)}</th>"
        for h in (
            "workload",
            "baseline tok/s",
            "at capacity",
            "recommendation tok/s",
            "at capacity",
            "gain",
            "tuned gain",
            "note",
        )
    )
    lost = any(r.loses for r in v.rows)
    return (
        f'<p class="held-verdict{" lost" if lost else ""}" id="held-out-verdict">'
        f"<b>{esc(v.verdict)}</b></p>"
        f'<table id="held-out"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>'
        "</table>"
    )
