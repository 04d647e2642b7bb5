"""report.html: one self-contained page (plotly.js inlined, no network request) that draws the
figures of tuner/report/views.py and computes none.

What a person sees first is the answer: the recommended configuration's confirmed throughput
with TTFT and time per token apart, whether it met the SLOs, the gain over the baseline and the
files that launch it. Then why: throughput against latency over every measured point (the
Pareto front, SLO lines drawn), tokens/s per user, each configuration's load curve, the stages,
the probe and the trials.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

from tuner.report.html_held_out import INTRO as HELD_OUT_INTRO
from tuner.report.html_held_out import held_out_html
from tuner.report.html_model import INTRO as MODEL_INTRO
from tuner.report.html_model import model_figure, model_table
from tuner.report.html_objective import INTRO as ROBUST_INTRO
from tuner.report.html_objective import robust_html
from tuner.report.html_probe import probe_figure
from tuner.report.text import esc, ms_text
from tuner.report.views import Point, ReportView

COLORS = [
    "#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d",
    "#bab0ac", "#eeca3b",
]  # fmt: skip
CONFIG = {"displaylogo": False, "responsive": True}
CSS = """
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 1200px; padding: 1.5rem;
       color: #1f2328; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { margin-top: 2.2rem; font-size: 1.2rem; }
.sub { color: #59636e; margin-top: 0; }
.answer { border: 1px solid #d1d9e0; border-left: 6px solid #1a7f37; border-radius: 6px;
          padding: 1rem 1.2rem; background: #f6f8fa; }
.answer.miss { border-left-color: #cf222e; }
.answer .big { font-size: 1.35rem; font-weight: 600; }
.answer .verdict { margin: .4rem 0; }
table { border-collapse: collapse; font-size: .88rem; margin-top: .6rem; }
th, td { border-bottom: 1px solid #d1d9e0; padding: .3rem .6rem; text-align: left;
         vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.rec td { background: #dafbe1; }
tr.lost td, .held-verdict.lost { background: #ffebe9; }
.plot { min-height: 380px; }
code { background: #eff1f3; padding: .1rem .3rem; border-radius: 4px; }
"""


INTRO = {
    "pareto": "Every load point measured, of every configuration: output tokens/s against "
    "TTFT and against time per output token, at the SLOs' percentiles (open circles broke an "
    "SLO or the error limit). The dotted line is the Pareto front; the dashed red line the "
    "SLO; the star the recommendation's confirmation, the diamond the baseline's.",
    "interactivity": "How fast each user's text streams (1000 / TPOT p50) against what the "
    "server delivers in all: a bigger batch moves right and down.",
    "curves": "Latency as the load grows, per configuration: p99 solid, p50 dashed; the "
    "dotted vertical line is where the fit over all its points crosses the SLOs.",
    "stages": "The score carried out of each stage (output tokens/s at the estimated "
    "capacity), then the confirmation on a fresh start; TTFT and time per token apart.",
    "probe": "Measured on the baseline server before the search: prefill against prompt "
    "length, decoding against concurrency, the roofline figures and which stages can pay off.",
    "trials": "Every configuration measured, with its status and why (the recommended one "
    "highlighted).",
}


def _color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def _div(fig: go.Figure, div_id: str) -> str:
    fig.update_layout(margin={"l": 60, "r": 20, "t": 50, "b": 50}, template="plotly_white")
    body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=CONFIG)
    return f'<div class="plot" data-figure="{div_id.removeprefix("fig-")}">{body}</div>'


def _hover(p: Point, unit: str) -> str:
    lat = f"TTFT {ms_text(p.ttft_ms)}, TPOT {ms_text(p.tpot_ms)}"
    return f"{p.label}<br>{p.load:.3g} {unit}: {p.tokens_per_s:.0f} tok/s<br>{lat}"


def _trial_colors(v: ReportView) -> dict[int, str]:
    numbers = sorted({p.trial for p in v.points} | {c.trial for c in v.curves})
    return {n: _color(i) for i, n in enumerate(numbers)}


def pareto_figure(v: ReportView) -> go.Figure:
    """Output tokens/s against TTFT and against TPOT at the SLOs' percentiles, every point."""
    unit = "req/s" if v.load_axis == "rate_rps" else "concurrent"
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=(
            f"against TTFT p{v.ttft_percentile}",
            f"against time per output token p{v.tpot_percentile}",
        ),
    )
    colors = _trial_colors(v)
    for col, key, front, limit in (
        (1, "ttft_ms", "front_ttft", v.ttft_limit_ms),
        (2, "tpot_ms", "front_tpot", v.tpot_limit_ms),
    ):
        by_trial: dict[int, list[Point]] = {}
        for p in v.points:
            by_trial.setdefault(p.trial, []).append(p)
        for n, pts in by_trial.items():
            fig.add_trace(
                go.Scatter(
                    x=[getattr(p, key) for p in pts],
                    y=[p.tokens_per_s for p in pts],
                    mode="markers",
                    name=pts[0].label,
                    legendgroup=pts[0].label,
                    showlegend=col == 1,
                    marker={
                        "color": colors[n],
                        "size": 8,
                        "symbol": ["circle" if p.held else "circle-open" for p in pts],
                    },
                    text=[_hover(p, unit) for p in pts],
                    hoverinfo="text",
                ),
                row=1,
                col=col,
            )
        marks = [p for p in (v.recommended, v.baseline) if p is not None]
        on = sorted(
            (p for p in [*v.points, *marks] if getattr(p, front)),
            key=lambda p: getattr(p, key) or 0.0,
        )
        fig.add_trace(
            go.Scatter(
                x=[getattr(p, key) for p in on],
                y=[p.tokens_per_s for p in on],
                mode="lines",
                line={"color": "#888", "dash": "dot", "shape": "hv"},
                name="Pareto front",
                legendgroup="front",
                showlegend=col == 1,
                hoverinfo="skip",
            ),
            row=1,
            col=col,
        )
        for mark, symbol, size, name in (
            (v.recommended, "star", 18, "recommended (confirmed)"),
            (v.baseline, "diamond", 13, "baseline (confirmed)"),
        ):
            if mark is None:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[getattr(mark, key)],
                    y=[mark.tokens_per_s],
                    mode="markers",
                    name=name,
                    legendgroup=name,
                    showlegend=col == 1,
                    marker={"symbol": symbol, "size": size, "color": "#111"},
                    text=[_hover(mark, unit)],
                    hoverinfo="text",
                ),
                row=1,
                col=col,
            )
        if limit is not None:
            fig.add_vline(
                x=limit, line={"color": "#cf222e", "dash": "dash"}, row=1, col=col,
                annotation_text="SLO", annotation_position="top left",
            )  # fmt: skip
        fig.update_xaxes(title_text="ms", row=1, col=col)
    fig.update_yaxes(title_text="output tokens/s", row=1, col=1)
    fig.update_layout(height=460)
    return fig


def interactivity_figure(v: ReportView) -> go.Figure:
    """Tokens/s per user (1000 / TPOT p50) against the server's output tokens/s."""
    colors = _trial_colors(v)
    fig = go.Figure()
    by_trial: dict[int, list[Point]] = {}
    for p in v.points:
        if p.per_user_tokens_per_s is not None:
            by_trial.setdefault(p.trial, []).append(p)
    for n, pts in by_trial.items():
        pts = sorted(pts, key=lambda p: p.tokens_per_s)
        fig.add_trace(
            go.Scatter(
                x=[p.tokens_per_s for p in pts],
                y=[p.per_user_tokens_per_s for p in pts],
                mode="lines+markers",
                name=pts[0].label,
                marker={"color": colors[n]},
                line={"color": colors[n]},
            )
        )
    if v.recommended and v.recommended.per_user_tokens_per_s:
        fig.add_trace(
            go.Scatter(
                x=[v.recommended.tokens_per_s],
                y=[v.recommended.per_user_tokens_per_s],
                mode="markers",
                name="recommended (confirmed)",
                marker={"symbol": "star", "size": 18, "color": "#111"},
            )
        )
    fig.update_layout(
        xaxis_title="server output tokens/s",
        yaxis_title="tokens/s per user (1000 / TPOT p50)",
        height=420,
    )
    return fig


def curves_figure(v: ReportView) -> go.Figure:
    """Load against TTFT and TPOT per configuration (p50 dashed, p99 solid), with the fitted
    capacity of each as a vertical mark."""
    colors = _trial_colors(v)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT", "time per output token"))
    for c in v.curves:
        color = colors[c.trial]
        for col, p50, p99 in ((1, c.ttft_p50, c.ttft_p99), (2, c.tpot_p50, c.tpot_p99)):
            for ys, dash, pct in ((p99, "solid", "p99"), (p50, "dash", "p50")):
                fig.add_trace(
                    go.Scatter(
                        x=c.loads,
                        y=ys,
                        mode="lines+markers",
                        name=f"{c.label} {pct}",
                        legendgroup=c.label,
                        showlegend=col == 1,
                        line={"color": color, "dash": dash},
                        marker={"color": color, "size": 6},
                    ),
                    row=1,
                    col=col,
                )
            if c.capacity is not None and c.capacity_censored == "none":
                fig.add_vline(
                    x=c.capacity, line={"color": color, "width": 1, "dash": "dot"}, row=1,
                    col=col,
                )  # fmt: skip
        fig.update_xaxes(title_text=v.load_label, row=1, col=1)
        fig.update_xaxes(title_text=v.load_label, row=1, col=2)
    for col, limit in ((1, v.ttft_limit_ms), (2, v.tpot_limit_ms)):
        if limit is not None:
            fig.add_hline(y=limit, line={"color": "#cf222e", "dash": "dash"}, row=1, col=col)
        fig.update_yaxes(title_text="ms", row=1, col=col)
    fig.update_layout(height=460)
    return fig


def waterfall_figure(v: ReportView) -> go.Figure:
    """The score after each stage, then the confirmation; TTFT and TPOT p99 beside."""
    steps = [s for s in v.waterfall if s.tokens_per_s is not None]
    labels = [s.label for s in steps]
    fig = make_subplots(
        rows=1,
        cols=3,
        column_widths=[0.5, 0.25, 0.25],
        subplot_titles=("output tokens/s", "TTFT p50 / p99 (ms)", "TPOT p50 / p99 (ms)"),
    )
    fig.add_trace(
        go.Bar(
            x=labels,
            y=[s.tokens_per_s for s in steps],
            marker={"color": ["#1a7f37" if s.label == "confirmed" else "#4c78a8" for s in steps]},
            text=[
                f"{'≥' if s.lower_bound else ''}{s.tokens_per_s:.0f}"
                for s in steps
                if s.tokens_per_s is not None
            ],
            textposition="outside",
            name="tokens/s",
            showlegend=False,
        ),
        row=1,
        col=1,
    )
    for col, p50, p99 in ((2, "ttft_p50", "ttft_p99"), (3, "tpot_p50", "tpot_p99")):
        for key, name, color in ((p50, "p50", "#9ecae9"), (p99, "p99", "#4c78a8")):
            fig.add_trace(
                go.Bar(
                    x=labels,
                    y=[getattr(s, key) for s in steps],
                    name=name,
                    marker={"color": color},
                    showlegend=col == 2,
                ),
                row=1,
                col=col,
            )
    fig.update_layout(barmode="group", height=420)
    return fig


def _answer(v: ReportView) -> str:
    ok = v.recommended is not None and v.verdict.startswith("meets")
    slos = ", ".join(f"{m} p{p} &le; {ms_text(limit)}" for m, p, limit in v.slos)
    files = " ".join(f'<a href="{esc(f)}"><code>{esc(f)}</code></a>' for f in v.files)
    return (
        f'<div class="answer{"" if ok else " miss"}" id="answer">'
        f'<div class="big">{esc(v.headline)}</div>'
        f'<div class="verdict">{esc(v.verdict)}; SLOs: {slos}</div>'
        + (f"<div>Launch it: {files}</div>" if files else "")
        + "</div>"
    )


def _table(head: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    th = "".join(f"<th>{esc(h)}</th>" for h in head)
    body = "".join(
        f'<tr class="{(classes or [""] * len(rows))[i]}">' + "".join(cells) + "</tr>"
        for i, cells in enumerate(rows)
    )
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _num(x: float | None, fmt: str = ".0f") -> str:
    return '<td class="num">' + ("-" if x is None else format(x, fmt)) + "</td>"


def _td(x: Any) -> str:
    return f"<td>{esc(x)}</td>"


def _trials_table(v: ReportView) -> str:
    rows = [
        [
            _td(r.number),
            _td(r.stage),
            _td(r.params),
            _td(r.status),
            _num(r.score),
            _num(r.load, ".3g"),
            _td(r.quality),
            _td(r.speculative),
            _td(r.reason),
        ]
        for r in v.rows
    ]
    unit = "req/s" if v.load_axis == "rate_rps" else "concurrency"
    head = ["#", "stage", "configuration", "status", "tok/s", f"capacity ({unit})", "quality",
            "speculative", "reason"]  # fmt: skip
    return _table(head, rows, ["rec" if r.recommended else "" for r in v.rows])


def _probe_tables(v: ReportView) -> str:
    p = v.probe
    if p is None:
        return ""
    figures = _table(["figure", "value"], [[_td(k), _td(x)] for k, x in p.figures])
    stages = _table(
        ["stage", "expected to pay off", "why"], [[_td(a), _td(b), _td(c)] for a, b, c in p.stages]
    )
    return f"<p><b>{esc(p.summary)}</b></p>{figures}{stages}"


def render_html(v: ReportView) -> str:
    """The page: the answer, then the figures, then the tables."""
    figures = [
        ("pareto", pareto_figure(v)),
        ("interactivity", interactivity_figure(v)),
        ("curves", curves_figure(v)),
        ("stages", waterfall_figure(v)),
        ("probe", probe_figure(v)),
        ("model", model_figure(v.predictions) if v.predictions else None),
    ]
    plots = {name: _div(fig, f"fig-{name}") for name, fig in figures if fig is not None}
    sections = [
        ("Throughput against latency", INTRO["pareto"], plots["pareto"]),
        ("Tokens per user", INTRO["interactivity"], plots["interactivity"]),
        ("Each configuration under load", INTRO["curves"], plots["curves"]),
        ("Stage by stage", INTRO["stages"], plots["stages"]),
    ]
    if v.held_out is not None:  # the answer's check on other traffic, first after it
        held = ("On workloads it was not tuned for", HELD_OUT_INTRO, held_out_html(v.held_out))
        sections.insert(0, held)
    if v.robust is not None:  # what ranked the answer, before all else
        sections.insert(0, ("Ranked by the worst gain", ROBUST_INTRO, robust_html(v.robust)))
    if "probe" in plots:
        sections.append(("Where the time goes", INTRO["probe"], plots["probe"] + _probe_tables(v)))
    if v.predictions is not None:
        content = plots.get("model", "") + model_table(v.predictions)
        sections.append(("Predicted before measured", MODEL_INTRO, content))
    sections.append(("Trials", INTRO["trials"], _trials_table(v)))
    body = "".join(
        f'<section><h2>{esc(t)}</h2><p class="sub">{esc(intro)}</p>{content}</section>'
        for t, intro, content in sections
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(v.title)}</title><style>{CSS}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>"
        f'<h1>{esc(v.title)}</h1><p class="sub">{esc(v.machine)}</p>'
        f"{_answer(v)}{body}</body></html>\n"
    )
