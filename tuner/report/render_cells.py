"""Cells of report.md and the terminal summary: latencies, settings, intervals, bars, quality,
speculative decoding. Each formats one value already in the report; none computes."""

from __future__ import annotations

import shlex
from typing import Any

from probes.metrics import Dist
from probes.quality import QualityCheck
from tuner.report.schema import TrialReport
from tuner.report.text import ms_text


def lat(d: Dist) -> str:
    return f"{ms_text(d.p50)} / {ms_text(d.p99)}"


def settings_text(p: dict[str, Any], defaults: dict[str, Any] | None = None) -> str:
    """Settings as text; with ``defaults``, only those that differ from the engine's own."""
    if defaults is not None:
        changed = {k: v for k, v in p.items() if k not in defaults or defaults[k] != v}
        if not changed:
            return "the engine's defaults"
        rest = " (the rest at the engine's defaults)" if len(changed) < len(p) else ""
        return ", ".join(f"{k}={v}" for k, v in changed.items()) + rest
    return ", ".join(f"{k}={v}" for k, v in p.items()) or "defaults"


def shell_command(argv: list[str], env: dict[str, str]) -> str:
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), *map(shlex.quote, argv)])


def interval(e: Any) -> str:
    """An estimate's 90 % interval of tokens/s, ``287-315`` or ``287-open``."""
    if e is None:
        return ""
    hi = "open" if e.high is None else f"{e.high:.0f}"
    return f" (90 % {e.low:.0f}-{hi})"


def bar(value: float, top: float, width: int = 24) -> str:
    n = round(width * value / top) if top > 0 else 0
    return "█" * n + "·" * (width - n)


def quality_text(q: QualityCheck | None) -> str:
    if q is None:
        return "-"
    what = "perplexity" if q.metric == "perplexity" else "agreement"
    mark = "" if q.holds else " ✗"
    return f"{what} {q.value:.4g} ({q.degradation_pct:+.2f} %){mark}"


def speculative_text(t: TrialReport) -> str:
    parts = []
    m = t.metrics or (t.points[-1].metrics if t.points else None)
    if m is not None and m.acceptance_rate is not None:
        length = f", length {m.mean_acceptance_length:.2f}" if m.mean_acceptance_length else ""
        parts.append(f"accepted {m.acceptance_rate:.0%}{length}")
    e = t.exactness
    if e is not None:
        if not e.checked:
            parts.append("exactness not checked")
        elif e.identical:
            parts.append("outputs identical")
        elif e.first_divergence is not None:
            d = e.first_divergence
            parts.append(f"outputs diverged (prompt {d.prompt_index}, token {d.position})")
    return "; ".join(parts) or "-"


def upto(reference: TrialReport) -> str:
    """``at most `` before a ratio over ``reference``'s score where that score is a lower
    bound (every load it was tried at held), else nothing."""
    return "at most " if lower_bound(reference) else ""


def lower_bound(t: TrialReport | None) -> bool:
    """Whether ``t``'s score is a lower bound: every load it was tried at held."""
    return t is not None and t.estimate is not None and t.estimate.censored == "above"


def ratio_word(num: TrialReport | None, den: TrialReport | None) -> str:
    """What the ratio of two search scores says where either is a lower bound: ``at least ``
    (the numerator's is), ``at most `` (the denominator's), ``two lower bounds: `` (neither
    way: the README command on the Xeon, 2026-12-06 10:08, showed an fp8 KV cache at 1.27x
    the batching trial it started from, whose one point held and whose build the model put
    as high), or nothing."""
    up, down = lower_bound(num), lower_bound(den)
    return {(True, True): "two lower bounds: ", (True, False): "at least ",
            (False, True): "at most "}.get((up, down), "")  # fmt: skip


def workload_sent_text(w: dict[str, Any]) -> str | None:
    """One line of what the requests sent, from a workload's description (report.json's
    ``workload``, a probe's ``workload_sent``: probes.describe)."""
    s = w.get("sent")
    if not isinstance(s, dict) or not s.get("requests"):
        return None

    def stats(d: Any) -> str:
        if not isinstance(d, dict):
            return "not counted"
        return f"mean {d['mean']:.0f}, p50 {d['p50']:.0f}, p99 {d['p99']:.0f}"

    share = s.get("prefix_share")
    shared = "not counted" if share is None else f"{100 * share:.0f} %"
    return (
        f"{s['requests']} requests; prompt tokens {stats(s.get('input_tokens'))}; output "
        f"tokens asked {stats(s.get('output_tokens'))}; prefix share {shared}"
    )
