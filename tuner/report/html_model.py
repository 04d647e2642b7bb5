"""report.html's serving-model section: predicted against measured capacity per trial (the
diagonal is a perfect prediction; the bars the prediction's interval) and its table."""

from __future__ import annotations

import plotly.graph_objects as go

from tuner.report.prediction_view import PredictionRow, PredictionView

INTRO = (
    "Before each trial started, the serving model (calibrated on the builds measured so far) "
    "predicted its capacity; the dots are that prediction against what was then measured, "
    "the bars the two intervals (each with a fresh start's spread), the diagonal a perfect "
    "prediction."
)


def model_figure(v: PredictionView) -> go.Figure | None:
    rows = [p for p in v.rows if p.measured is not None]
    if not rows:
        return None
    fig = go.Figure()
    shapes = (
        ("calibrated", "circle"),
        ("probe", "square-open"),
        ("transferred", "diamond-open"),
        ("roofline", "triangle-up-open"),
    )
    for basis, symbol in shapes:
        sel = [p for p in rows if p.basis == basis]
        if not sel:
            continue
        fig.add_trace(
            go.Scatter(
                x=[p.predicted for p in sel],
                y=[p.measured for p in sel],
                mode="markers+text",
                text=[f"#{p.trial}" for p in sel],
                textposition="top center",
                marker={"symbol": symbol, "size": 11},
                name=f"{basis} prediction",
                error_x={
                    "type": "data",
                    "symmetric": False,
                    "array": [(p.high or p.predicted) - p.predicted for p in sel],
                    "arrayminus": [p.predicted - p.low for p in sel],
                },
                error_y={
                    "type": "data",
                    "symmetric": False,
                    "array": [(p.measured_high or m) - m for p, m in _measured(sel)],
                    "arrayminus": [m - (p.measured_low or m) for p, m in _measured(sel)],
                },
            )
        )
    top = max(max(p.predicted, p.measured or 0.0, p.high or 0.0) for p in rows) * 1.1
    fig.add_trace(
        go.Scatter(
            x=[0, top],
            y=[0, top],
            mode="lines",
            name="predicted = measured",
            line={"dash": "dot", "color": "#888"},
        )
    )
    fig.update_layout(
        height=420,
        xaxis_title="predicted output tokens/s at capacity",
        yaxis_title="measured output tokens/s at capacity",
    )
    return fig


def _measured(rows: list[PredictionRow]) -> list[tuple[PredictionRow, float]]:
    return [(p, p.measured) for p in rows if p.measured is not None]


def _cell(x: float | None, spec: str = ".0f") -> str:
    return "-" if x is None else format(x, spec)


def model_table(v: PredictionView) -> str:
    head = [
        "#",
        "basis",
        "predicted tok/s",
        "interval",
        "measured tok/s",
        "interval",
        "error",
        "TTFT p99 ms pred / meas",
        "TPOT p50 ms pred / meas",
    ]
    body = []
    for p in v.rows:
        cells = [
            str(p.trial),
            p.basis,
            _cell(p.predicted),
            f"{p.low:.0f}-{_cell(p.high)}",
            _cell(p.measured),
            f"{_cell(p.measured_low)}-{_cell(p.measured_high)}",
            "-" if p.error is None else f"{p.error:+.0%}",
            f"{_cell(p.ttft_p99_predicted)} / {_cell(p.ttft_p99_measured)}",
            f"{_cell(p.tpot_p50_predicted, '.1f')} / {_cell(p.tpot_p50_measured, '.1f')}",
        ]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    th = "".join(f"<th>{h}</th>" for h in head)
    return f"<p>{v.summary}</p><table><tr>{th}</tr>{''.join(body)}</table>"
