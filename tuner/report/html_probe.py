"""report.html's figure of the probe: prefill (TTFT against prompt tokens, one request at a
time, with the fitted line) beside decoding (time per token and output tokens/s by
concurrency), from tuner/report/views.py's ``ProbeView``."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tuner.report.views import ReportView


def probe_figure(v: ReportView) -> go.Figure | None:
    p = v.probe
    if p is None:
        return None
    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("prefill: TTFT against prompt tokens (c=1)", "decoding by concurrency"),
        specs=[[{}, {"secondary_y": True}]],
    )
    fig.add_trace(
        go.Scatter(x=p.prompt_tokens, y=p.ttft_p50, mode="markers", name="TTFT p50"),
        row=1,
        col=1,
    )
    if p.fit_ttft is not None:
        rate = f"{p.prefill_tokens_per_s:.0f} tok/s" if p.prefill_tokens_per_s else "fit"
        fig.add_trace(
            go.Scatter(x=p.prompt_tokens, y=p.fit_ttft, mode="lines", name=f"fit: {rate}"),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Scatter(x=p.concurrency, y=p.tpot_p50, mode="lines+markers", name="TPOT p50 (ms)"),
        row=1,
        col=2,
    )
    fig.add_trace(
        go.Scatter(
            x=p.concurrency,
            y=p.decode_tokens_per_s,
            mode="lines+markers",
            name="output tokens/s",
        ),
        row=1,
        col=2,
        secondary_y=True,
    )
    fig.update_xaxes(title_text="prompt tokens", row=1, col=1)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_xaxes(title_text="concurrency", row=1, col=2)
    fig.update_yaxes(title_text="ms per token", row=1, col=2)
    fig.update_yaxes(title_text="tokens/s", row=1, col=2, secondary_y=True)
    fig.update_layout(height=420)
    return fig
