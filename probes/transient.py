"""A point disturbed at its start: a stall the load did not cause.

A load point that breaks an SLO because the server is over its capacity breaks it late: the
queue grows with the arrivals, so the requests over the limit are the later ones
(probes/drift.py). A point whose requests over a limit all arrived in its first seconds, with
every later request within every limit, broke for another reason: the server stalled as the
point began (a first batch of a new size, memory first touched, the machine's other tenants),
and drained the backlog once it went on. On a 2-core Xeon (2026-12-05) the first point of a
configuration, right after its warm-up, had its first 14 requests of 122 at TTFT 1.5-2.7 s
and the other 108 at 0.1-1.0 s: p99 2.48 s against a 2 s limit, so the point "broke", the
search stepped down to half the load and, within the time budget, the configuration that
other runs measured 1.2x the defaults scored 3 % under them and lost.

Such a point is measured again once (tuner/run/trial.py), its first try counted as warm-up: only
at the start, only where nothing later went over, and only once, so an overloaded point,
a configuration that stalls again, or one whose stalls come at random all still break. A
confirmation try is judged the same way against its limits less the headroom
(tuner/run/recommend.py): a stall would otherwise step the claim down to a load the
configuration did not need.

Pure logic over records: tested with made-up ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from probes.metrics import meets
from probes.records import RequestRecord
from probes.slo import SLOSet

START_SHARE = 0.2  # "its first seconds": the first fifth of the point's arrival span
MIN_AFTER = 20  # requests after the stall, every one within every limit, to call it one


def disturbed_at_start(
    records: Sequence[RequestRecord],
    slos: SLOSet,
    share: float = START_SHARE,
    headroom: float = 0.0,
    planned: int | None = None,
) -> bool:
    """Whether every request over a latency limit (less the ``headroom``: over ``(1 -
    headroom)`` x the limit) was scheduled in the first ``share`` of the point's arrival span,
    at least one was, none failed, and at least ``MIN_AFTER`` requests came after the last of
    them. ``planned``: the requests the point was planned with, where it grew past them for
    requests over a limit (probes/sequential.py); the span is theirs, so that the growth a
    stall causes does not widen what counts as its start."""
    if not records or any(not r.ok for r in records) or not slos.latency:
        return False
    if headroom:
        slos = within(slos, headroom)
    ordered = sorted(records, key=lambda r: r.t_sched)
    last_planned = ordered[min(planned, len(ordered)) - 1] if planned else ordered[-1]
    t0, t1 = ordered[0].t_sched, last_planned.t_sched
    if t1 <= t0:
        return False
    over = [i for i, r in enumerate(ordered) if not all(meets(r, s) for s in slos.latency)]
    if not over:
        return False
    last = ordered[over[-1]]
    return last.t_sched - t0 <= share * (t1 - t0) and len(ordered) - 1 - over[-1] >= MIN_AFTER


def within(slos: SLOSet, headroom: float) -> SLOSet:
    """The same SLOs with every latency limit at ``(1 - headroom)`` x its own."""
    tight = (s.model_copy(update={"limit_ms": s.limit_ms * (1.0 - headroom)}) for s in slos.latency)
    return slos.model_copy(update={"latency": tuple(tight)})
