"""MLPerf's sample-size rule on a point measured by vLLM's own client (benchmarks' side).

autotune's verdicts (probes.metrics.judge) call a percentile verdict provisional where it has
fewer samples than MLPerf's early-stopping rule asks for with the samples over the limit
counted (probes.slo.requests_needed: p99 needs 459 with none over, 662 with one, 838 with two).
vLLM's client reports the percentile alone, so a capacity search that only reads it keeps a
load whose p99 held with 460 prompts and four of them over the limit: on a 2-core AMD EPYC
(2026-12-04) 4.86 req/s held so with 460 prompts and broke with 1,000 (p99 TTFT 3.40 s). The
capacity the tuner's claim is compared with would then be one the tuner itself may not call.

This module reads vLLM's per-request lists (``--save-detailed``: ttfts, itls, latencies,
output_lens, errors) and counts, per SLO, the samples and those over the limit as
probes.metrics.summarize does (successful requests only; TPOT from requests of two tokens or
more, ``(latency - ttft) / (output_len - 1)`` as vLLM computes it; ITL the pooled gaps), and
says how many prompts a fresh call at the same load needs for a verdict that is not
provisional. A fresh whole call, not a top-up: vLLM's client cannot continue an open-loop run,
and a second short run would start from an empty server again. Pure logic: unit-tested.
"""

from __future__ import annotations

import math
from typing import Any

from probes.slo import requests_needed

Result = dict[str, Any]


def slo_name(slo: Result) -> str:
    """``ttft@p99`` for a report's SLO dict."""
    return f"{slo['metric']}@p{int(slo['percentile'])}"


def _samples_s(raw: Result, metric: str) -> tuple[list[float], int]:
    """The samples (s) of ``metric`` in vLLM's detailed result, and the requests they came
    from: successful ones (no error text and a first token: vLLM's success flag is not saved,
    and a failed request keeps its place in the lists with TTFT 0 and no tokens); for TPOT
    those with two tokens or more."""
    ttfts, lat = raw.get("ttfts") or [], raw.get("latencies") or []
    errors = raw.get("errors") or [""] * len(ttfts)
    ok = [i for i, (e, t) in enumerate(zip(errors, ttfts, strict=False)) if not e and t > 0]
    if metric == "ttft":
        return [float(ttfts[i]) for i in ok], len(ok)
    if metric == "e2e":
        return [float(lat[i]) for i in ok], len(ok)
    if metric == "tpot":
        outs = raw.get("output_lens") or []
        two = [i for i in ok if outs[i] > 1]
        return [(lat[i] - ttfts[i]) / (outs[i] - 1) for i in two], len(two)
    itls = raw.get("itls") or []
    return [float(g) for i in ok for g in itls[i]], len(ok)


def _needed(key: str, over: int) -> int:
    return requests_needed(int(key.rsplit("@p", 1)[1]), over)


def count(raw: Result, slos: list[Result]) -> dict[str, Result]:
    """Per SLO (``ttft@p99``): ``n`` samples, ``over`` the limit, ``requests`` they came from,
    and ``needed``, the samples the rule asks for with that many over. Empty where vLLM's
    result has no per-request lists (called without ``--save-detailed``)."""
    if "ttfts" not in raw:
        return {}
    out: Result = {}
    for s in slos:
        samples, requests = _samples_s(raw, s["metric"])
        over = sum(1 for x in samples if x > float(s["limit_ms"]) / 1000.0)
        key = slo_name(s)
        out[key] = {"n": len(samples), "over": over, "requests": requests}
        out[key]["needed"] = _needed(key, over)
    return out


def pool(calls: list[dict[str, Result]]) -> dict[str, Result]:
    """The counts of several calls at one load taken together (the rule on all their samples:
    a point measured again keeps the requests that went over the limit before)."""
    out: dict[str, Result] = {}
    for counts in calls:
        for k, c in counts.items():
            acc = out.setdefault(k, {"n": 0, "over": 0, "requests": 0})
            for f in ("n", "over", "requests"):
                acc[f] += c[f]
    for k, c in out.items():
        c["needed"] = _needed(k, c["over"])
    return out


def provisional(counts: dict[str, Result]) -> list[str]:
    """Why a point's verdict is provisional under the rule (empty: it is not)."""
    return [
        f"{k} provisional: {c['over']} of {c['n']} over the limit, the rule asks for {c['needed']}"
        for k, c in counts.items()
        if c["n"] < c["needed"]
    ]


def prompts_for(counts: dict[str, Result], sent: int, least: int, max_prompts: int) -> int | None:
    """Prompts of a fresh call at the same load that would, with the ``sent`` prompts whose
    samples ``counts`` pools, give a verdict that is not provisional, if its requests go over
    the limit as often as these did: at least ``least`` (a point's own size: a short call
    would start from an empty server again), at most ``max_prompts`` (0: these suffice; None:
    even the rule's count for the samples over the limit seen so far lies beyond
    ``max_prompts`` more, or there are no samples to size it from).

    With ``k`` of ``n`` samples over, m samples in all expect ``k m / n`` over, so m must be at
    least ``requests_needed(p, ceil(k m / n))``: the smallest such m is found by iterating
    from ``requests_needed(p, k)``. Near a 1 % share over for a p99 none exists (the rule
    cannot be met at that share): the call is then ``max_prompts``, which holds if its own
    share over turns out lower. Sizes are in prompts sent: samples per prompt (ITL gaps, or
    fewer than one where requests failed) as in these calls."""
    most = 0
    for k, c in counts.items():
        if c["n"] >= c["needed"]:
            continue
        if c["n"] == 0 or sent == 0:
            return None
        share, per = c["over"] / c["n"], c["n"] / sent  # per: samples per prompt sent

        def more(samples: int, c: Result = c, per: float = per) -> int:
            return max(0, math.ceil((samples - c["n"]) / per))

        if more(c["needed"]) > max_prompts:
            return None
        m = c["needed"]
        while more(m) < max_prompts:
            nxt = _needed(k, math.ceil(share * m))
            if nxt <= m:
                break
            m = nxt
        most = max(most, least, min(max_prompts, more(m)))
    return most


def describe(counts: dict[str, Result]) -> str:
    """``ttft@p99 2 over of 700, 662 needed`` for every SLO counted."""
    return "; ".join(
        f"{k} {c['over']} over of {c['n']}, {c['needed']} needed" for k, c in counts.items()
    )
