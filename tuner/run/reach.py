"""Whether a configuration can meet the latency SLOs at any load, from one request alone.

Load only adds to latency: queueing delays the first token, and a larger batch slows every
step. So where one request at a time (the probe's decode sweep at concurrency 1, with the
workload's lengths) already takes longer than a latency limit at its median, by a clear factor,
no load meets that SLO, and a capacity search would only step down its axis measuring points
that cannot hold. On an AVX2-only AMD EPYC (2026-12-03), vLLM's bf16 defaults took p50 3.08 s to
the first token of one 128-token prompt against p99 TTFT <= 2 s; the open-loop search would
have stepped down to 0.2 requests/s and less, where its 40-request points take 200 s each.

Pure logic over the probe's figures.
"""

from __future__ import annotations

from collections.abc import Sequence

from probes.diagnose import Diagnosis, SweepPoint
from tuner.report.text import ms_text
from tuner.scoring.estimate import Constraint

# The concurrency-1 median must exceed the limit by this factor: a few requests' median, so
# only a clear miss counts, never one at the edge of the noise.
UNREACHABLE = 1.25


def unreachable(diagnosis: Diagnosis | None, cons: Sequence[Constraint]) -> str | None:
    """Why no load can meet a latency SLO (the first such), or None where one might."""
    if diagnosis is None:
        return None
    one = next((p for p in diagnosis.decode_sweep if p.concurrency == 1), None)
    return unreachable_alone(one, cons) if one is not None else None


def unreachable_alone(one: SweepPoint, cons: Sequence[Constraint]) -> str | None:
    """``unreachable`` from the concurrency-1 point itself."""
    alone = {"ttft": one.ttft_ms_p50, "tpot": one.tpot_ms_p50, "e2e": one.e2e_ms_p50}
    for c in cons:
        v = alone.get(c.metric)
        if c.percentile is None or v is None or v <= UNREACHABLE * c.limit:
            continue
        return (
            f"no load can meet p{c.percentile} {c.metric.upper()} <= {ms_text(c.limit)}: one "
            f"request alone took {ms_text(v)} (p50 of {one.n_requests} at concurrency 1, "
            f"{one.prompt_tokens}-token prompts, the probe), and load only adds to it"
        )
    return None
