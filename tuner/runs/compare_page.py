"""``autotune compare``'s Markdown and HTML (plotly inlined, offline) from a Comparison
(tuner/runs/compare_runs.py): the table first, then the throughput, the cost and the latencies of
each run side by side. Computes nothing."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from tuner.report.html import CONFIG, CSS
from tuner.report.text import esc, ms_text, slo_text
from tuner.runs.compare_runs import Comparison, RunRow


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


HEAD = [
    "run", "machine", "engine", "output tok/s", "at", "TTFT", "TPOT", "figure", "config",
    "USD/h", "USD per 1M output tokens", "output tokens per USD",
]  # fmt: skip


def _cells(c: Comparison, r: RunRow) -> list[str]:
    figure = "confirmed" if r.confirmed else "re-scored, unconfirmed"
    if r.figure == "predicted":
        lo, hi = r.interval or (None, None)
        figure = (
            f"PREDICTED from its probe alone, at the load a run would claim (90 % "
            f"{_num(lo, '.0f')}-{_num(hi, '.0f')} tok/s; capacity "
            f"{_num(r.predicted_capacity, '.0f')}), not measured"
        )
    elif r.confirmed and r.provisional:
        figure = "confirmed, provisionally (too few requests for the percentile)"
    elif r.confirmed and not r.meets_slo:
        figure = "confirmed, SLO not met with the headroom"
    return [
        r.name, r.machine, r.engine, _num(r.tokens_per_s, ".0f"), r.load,
        f"{ms_text(r.ttft_ms)} (p{c.ttft_percentile})",
        f"{ms_text(r.tpot_ms)} (p{c.tpot_percentile})",
        figure, r.config, _num(r.price_per_hour, ".2f"),
        _num(r.usd_per_million_tokens, ".3f"), _num(r.tokens_per_usd, ",.0f"),
    ]  # fmt: skip


def render_markdown(c: Comparison) -> str:
    out = ["# autotune: runs compared", ""]
    out += [f"**{w}**" for w in c.warnings] + ([""] if c.warnings else [])
    out += [f"Common SLO: {slo_text(c.slo)}.", ""]
    if any(r.figure == "predicted" for r in c.rows):
        out += [
            "A PREDICTED row is the serving model calibrated on that machine's probe alone "
            "(autotune probe --diagnose), simulated under the common SLO: not a measurement.",
            "",
        ]
    out.append("| " + " | ".join(HEAD) + " |")
    out.append("|" + " --- |" * len(HEAD))
    out += ["| " + " | ".join(_cells(c, r)) + " |" for r in c.rows]
    priced = [r for r in c.rows if r.usd_per_million_tokens is not None]
    if priced:
        best = min(priced, key=lambda r: r.usd_per_million_tokens or float("inf"))
        out += [
            "",
            f"Cheapest per output token: **{best.name}** at "
            f"{best.usd_per_million_tokens:.3f} USD per million (price / 3600 / tokens per s "
            "x 1e6).",
        ]
    return "\n".join(out) + "\n"


def _up(r: RunRow) -> float:
    if r.interval is None or r.tokens_per_s is None or r.interval[1] is None:
        return 0.0
    return max(r.interval[1] - r.tokens_per_s, 0.0)


def _down(r: RunRow) -> float:
    if r.interval is None or r.tokens_per_s is None:
        return 0.0
    return max(r.tokens_per_s - r.interval[0], 0.0)


def figure(c: Comparison) -> go.Figure:
    names = [r.name for r in c.rows]
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=(
            "output tokens/s under the common SLO",
            "USD per million output tokens",
            "TTFT and time per output token (ms)",
        ),
    )
    fig.add_trace(
        go.Bar(
            x=names,
            y=[r.tokens_per_s for r in c.rows],
            name="tokens/s",
            showlegend=False,
            # a predicted row is hatched, with its interval
            marker={"pattern": {"shape": ["/" if r.figure == "predicted" else "" for r in c.rows]}},
            error_y={
                "type": "data",
                "symmetric": False,
                "array": [_up(r) for r in c.rows],
                "arrayminus": [_down(r) for r in c.rows],
            },
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=names,
            y=[r.usd_per_million_tokens for r in c.rows],
            name="USD / 1M tokens",
            showlegend=False,
            marker={"color": "#f58518"},
        ),
        row=1,
        col=2,
    )
    for key, label in (("ttft_ms", f"TTFT p{c.ttft_percentile}"),
                       ("tpot_ms", f"TPOT p{c.tpot_percentile}")):  # fmt: skip
        fig.add_trace(
            go.Bar(x=names, y=[getattr(r, key) for r in c.rows], name=label), row=1, col=3
        )
    fig.update_layout(barmode="group", height=420, template="plotly_white")
    return fig


def render_html(c: Comparison) -> str:
    warn = "".join(f'<p class="answer miss">{esc(w)}</p>' for w in c.warnings)
    head = "".join(f"<th>{esc(h)}</th>" for h in HEAD)
    rows = "".join(
        "<tr>" + "".join(f"<td>{esc(x)}</td>" for x in _cells(c, r)) + "</tr>" for r in c.rows
    )
    plot = figure(c).to_html(
        full_html=False, include_plotlyjs=False, div_id="fig-compare", config=CONFIG
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>autotune: runs compared</title><style>{CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f"<h1>autotune: runs compared</h1>{warn}"
        f'<p class="sub">Common SLO: {esc(slo_text(c.slo))}</p>'
        f'<table id="answer"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        f'<div class="plot" data-figure="compare">{plot}</div></body></html>\n'
    )
