"""Queue growth under open-loop arrivals: whether a request rate is sustainable.

Above its capacity, an open-loop server's queue grows for as long as the arrivals last: every
request waits a little longer than the one before, and its TTFT rises in a straight line with
its arrival time. A point measured for 15 s at such a rate can still show a p99 under the limit,
only because the queue had 15 s to grow; held for a minute (a confirmation, vLLM's benchmark
client with 400+ requests, a service), the same rate breaks. On this project's machines, points
that held in 12-15 s with TTFT rising 0.01-0.09 s per second of arrivals failed when measured
again at 500 requests.

So an open-loop point is judged as if it had lasted ``horizon_s``: where TTFT rises
significantly (the lower end of the Theil-Sen slope's 90 % interval is above zero), every
request's wait is lengthened by ``slope x (horizon_s - span)``: its first token, its last, its
chunks and its end move by that much, so TTFT and E2E grow by it, TPOT and ITL do not. A rate
at which the queue is stable shows no significant slope and is judged as measured. A closed
loop cannot grow a queue past its N clients; it is never projected.

Pure logic over records: tested with made-up ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from scipy.stats import theilslopes

from probes.records import RequestRecord

# How long a rate must hold: about as long as a confirmation (459+ requests) or a 500-request
# benchmark run at this project's rates. The projection is linear, so a longer horizon scales
# the slope's noise up with it (a 15 s point's slope is good to about +-5 ms/s).
HORIZON_S = 60.0
MIN_RECORDS = 20  # fewer completed requests: no slope is estimated
CONFIDENCE = 0.90


@dataclass(frozen=True)
class Drift:
    """TTFT's trend over one open-loop point, and the shift its projection applies."""

    slope: float  # seconds of TTFT per second of arrivals (Theil-Sen); 0 where not estimated
    low: float  # lower end of the slope's 90 % interval
    span_s: float  # the measured arrival span
    shift_s: float  # added to every request's wait by the projection (0: judged as measured)

    @property
    def growing(self) -> bool:
        return self.shift_s > 0


NO_DRIFT = Drift(0.0, 0.0, 0.0, 0.0)


def queue_drift(records: Sequence[RequestRecord], horizon_s: float = HORIZON_S) -> Drift:
    """The TTFT trend of a point's completed requests against their scheduled arrival."""
    ok = [r for r in records if r.ok]
    if len(ok) < MIN_RECORDS:
        return NO_DRIFT
    t0 = min(r.t_sched for r in ok)
    x = [r.t_sched - t0 for r in ok]
    y = [r.ttft_s for r in ok]
    span = max(x)
    if span <= 0:
        return NO_DRIFT
    slope, _, low, _ = theilslopes(y, x, alpha=CONFIDENCE)
    if not (math.isfinite(slope) and math.isfinite(low)):
        return NO_DRIFT
    shift = slope * (horizon_s - span) if low > 0 and slope > 0 and horizon_s > span else 0.0
    return Drift(float(slope), float(low), float(span), float(shift))


def project(records: Sequence[RequestRecord], drift: Drift) -> list[RequestRecord]:
    """The records as they would be with ``drift.shift_s`` more queueing each (copies)."""
    if not drift.growing:
        return list(records)
    d = drift.shift_s
    out = []
    for r in records:
        if not r.ok:
            out.append(r)
            continue
        out.append(
            replace(
                r,
                t_first=r.t_first + d,
                t_last=r.t_last + d,
                t_end=r.t_end + d,
                chunk_times=[t + d for t in r.chunk_times],
            )
        )
    return out
