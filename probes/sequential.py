"""How many more requests a load point needs, from the requests sent so far.

MLPerf's early-stopping rule (probes.slo.requests_needed) asks for more samples the more of
them went over the limit: p99 needs 459 with none over, 662 with one, 838 with two. A
full-size point sized for none over is left provisional by a single slow request (the README
command's confirmation on a slow AMD EPYC: 505 requests at 4.21 req/s, p99 TTFT 1.37 s against
2 s, one request over, so 662 needed: "holds, but provisionally", with two minutes of its budget
unused). MLPerf runs until the rule is met; so does a point given room to grow: when its
arrivals (or, closed loop, its requests) run out, ``shortfall`` counts the samples known to be
over each latency SLO's limit so far and says how many more requests the rule asks for; the
client sends that many more at the same load, continuing the same process (tuner/run/measure.py,
probes/client.py), and the point is judged on all of them as usual. Only a point sized for a
verdict with none over grows: one shorter than that on purpose stays as it was.

What is known when the arrivals run out, per latency metric (limits in ms, times in s):

- TTFT, E2E: over, where the first (last) content chunk came after the limit, or has not come
  yet and the limit has already passed since the request was due; a request still inside its
  limit counts as not over (it may still go over: then the verdict on all of them says
  provisional, as before);
- TPOT, ITL: over, among the requests that have finished (their value is not known before).
  ITL's samples are the pooled gaps between chunks (as in probes.metrics.judge): its count and
  its over-limit count are gaps, and a request is worth the mean gaps of those finished.

The decision to send more depends on what was seen, which a fixed-size test does not do; the
extra requests only ever add evidence, and the verdict is the usual rule on every request
sent, so a point that goes on collecting slow requests stays provisional or breaks.

Pure logic over records and a clock reading: tested with made-up records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from probes.metrics import MS, meets
from probes.records import RequestRecord
from probes.slo import LatencySLO, SLOSet, requests_needed


def known_over(rec: RequestRecord, slo: LatencySLO, now: float) -> int:
    """How many of ``rec``'s samples of ``slo``'s metric are already known to be over its
    limit at clock reading ``now`` (0 or 1; ITL: its gaps over the limit)."""
    if rec.error is not None:
        return 0  # a failed request is an error, counted against the error rate
    known = not math.isnan(rec.t_first if slo.metric == "ttft" else rec.t_end)
    if not known:
        # TTFT and E2E are over once the limit has passed without them; TPOT and ITL are
        # not known before the request has finished.
        waiting = slo.metric in ("ttft", "e2e") and now - rec.t_sched > slo.limit_ms / MS
        return int(waiting)
    if slo.metric == "itl":  # pooled gaps, as summarize counts over_limit
        return sum(1 for g in rec.itl_s() if g > slo.limit_ms / MS)
    return int(not meets(rec, slo))


def _samples(records: Sequence[RequestRecord], slo: LatencySLO) -> tuple[float, float]:
    """The samples of ``slo``'s metric the records will give as probes.metrics.judge counts
    them (failed requests give none; TPOT none from a finished one-token answer), counting the
    requests still running as giving what the finished ones gave; and the samples one more
    request gives: 1, or for ITL the mean gaps of the finished requests (1 where none has)."""
    live = [r for r in records if r.error is None]
    done = [r for r in live if r.ok and not math.isnan(r.t_end)]
    if slo.metric == "tpot":
        live = [r for r in live if not (r.ok and not math.isnan(r.t_end)) or r.n_out > 1]
    if slo.metric != "itl":
        return float(len(live)), 1.0
    per = max(1.0, sum(len(r.itl_s()) for r in done) / len(done)) if done else 1.0
    return per * len(live), per


def shortfall(records: Sequence[RequestRecord], slos: SLOSet, now: float) -> int:
    """More requests the early-stopping rule asks for on every latency SLO, given the
    ``records`` sent so far and what is known of them at ``now`` (0: enough).

    Only over the limit: a point with fewer samples than the rule asks with none over (16
    requests for a p99, a search point, a budget's cut) was sized short on purpose, and
    growing it would not make its verdict more than provisional; it is not grown."""
    need = 0
    for slo in slos.latency:
        have, per = _samples(records, slo)
        if have < requests_needed(slo.percentile, 0):
            continue
        over = sum(known_over(r, slo, now) for r in records)
        need = max(need, math.ceil((requests_needed(slo.percentile, over) - have) / per))
    return need


def over_needed(percentile: int, n: int) -> int:
    """Samples over a limit that put the ``percentile``-th of ``n`` samples over it whatever
    the others are: the percentile's interpolation (numpy's linear, as probes.metrics takes
    it) then lies between two samples over the limit."""
    return n - math.floor(percentile / 100.0 * (n - 1))


def decided(
    slos: SLOSet,
    planned: int,
    records: Sequence[RequestRecord],
    now: float,
    skip_first: int = 0,
) -> bool:
    """Whether a point of ``planned`` requests already breaks a latency SLO, given the
    ``records`` sent so far and what is known of them at ``now``: its samples known to be over
    the limit are enough to put the percentile over it even if every request still to come met
    it (``over_needed``). The point can then stop sending: more requests cannot change its
    verdict, and its requests so far make a shorter point with the same verdict (over a
    share of fewer samples). TTFT, E2E and TPOT only: ITL's samples are gaps, not requests.

    ``skip_first``: the requests with a lower index do not count towards the decision (they
    still count in the verdict). A confirmation try skips its first ones, so that a stall at its
    start (probes/transient.py) lets it run whole and be set aside rather than cut."""
    late = [r for r in records if r.index >= skip_first] if skip_first else records
    for slo in slos.latency:
        if slo.metric == "itl":
            continue
        over = sum(known_over(r, slo, now) for r in late)
        if over and over >= over_needed(slo.percentile, max(planned, len(records))):
            return True
    return False
