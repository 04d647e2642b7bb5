"""report.html's section of an ``--objective robust`` run: the sentence, then each
configuration's capacity and gain on every workload it was ranked on and its worst gain
(tuner/report/objective_view.py computes; this only draws)."""

from __future__ import annotations

from tuner.report.objective_view import INTRO as RANKED
from tuner.report.objective_view import Cell, RobustView
from tuner.report.text import esc

INTRO = RANKED.format(gain="the gain over the baseline beneath")


def _cell(c: Cell) -> str:
    if c.tokens_per_s is None:
        return f"<td>{esc(c.status)}</td>"
    gain = f"<br>{c.gain:.2f}x" if c.gain is not None else ""
    return f'<td class="num">{c.tokens_per_s:.0f}{gain}</td>'


def robust_html(v: RobustView) -> str:
    """The sentence and the table (the recommended row marked)."""
    head = "".join(
        f"<th><code>{esc(w)}</code>{' (tuned)' if i == 0 else ''}</th>"
        for i, w in enumerate(v.workloads)
    )
    rows = "".join(
        f'<tr class="{"rec" if x.recommended else ""}"><td>{esc(x.label)}</td>'
        + "".join(_cell(c) for c in x.cells)
        + '<td class="num">'
        + ("-" if x.worst_gain is None else f"{x.worst_gain:.2f}x")
        + "</td></tr>"
        for x in v.rows
    )
    return (
        f'<p id="robust-verdict"><b>{esc(v.sentence)}</b></p>'
        f'<table id="robust"><thead><tr><th>configuration</th>{head}<th>worst gain</th></tr>'
        f"</thead><tbody>{rows}</tbody></table>"
    )
