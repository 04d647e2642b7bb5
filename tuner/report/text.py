"""The few ways figures are written as text, shared by every renderer (report.md, the
terminal, report.html, the comparison, the exports): a latency, a load, a set of SLOs, and any
value made safe inside report.html's markup."""

from __future__ import annotations

import html
from typing import Any


def ms_text(x: float | None) -> str:
    """``850.0 ms`` or ``1.25 s``; ``-`` for none."""
    if x is None:
        return "-"
    return f"{x / 1000:.2f} s" if x >= 1000 else f"{x:.1f} ms"


def load_text(load: dict[str, float] | None) -> str:
    """``c=24`` (closed loop) or ``2.45 req/s`` (open-loop rate); ``-`` without a load."""
    if not load:
        return "-"
    if "concurrency" in load:
        c = load["concurrency"]
        return f"c={c:.3g}" if c != int(c) else f"c={int(c)}"
    return f"{load['rate_rps']:.3g} req/s"


def slo_text(slos: list[Any]) -> str:
    """``p99 TTFT <= 2.00 s; p90 TPOT <= 50.0 ms``."""
    return "; ".join(f"p{s.percentile} {s.metric.upper()} <= {ms_text(s.limit_ms)}" for s in slos)


def esc(x: Any) -> str:
    """``x`` as text safe inside HTML markup (report.html, the comparison page)."""
    return html.escape(str(x))
