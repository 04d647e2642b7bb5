"""Per-request raw records: the hot-path data the load client fills in.

All times are seconds on one monotonic clock (``time.perf_counter`` in production), as
docs/measurement.md defines them:

- ``t_sched``: when the request was due (open loop: its place in the arrival schedule;
  closed loop: when its slot freed up); ``t_send``: when it was actually sent;
- ``t_first`` / ``t_last``: arrival of the first / last chunk that carries content;
- ``t_end``: when the request ended, successfully or not (the window's end);
- ``n_out``: output tokens from the server's usage, or counted chunks where the server gave
  no usage (``n_out_from_usage`` is then False and the summary says so);
- what was sent: ``n_prompt_expected`` (the prompt's tokens, where the workload counted them),
  ``max_tokens`` (the output asked for) and ``n_prompt_shared`` (the prompt's first tokens an
  earlier request of its point starts with too), for the workload's description
  (probes.describe); None in records written before they were kept.

A failed request is a record with ``error`` set, never a silent drop.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import asdict, dataclass, field
from typing import Any

NAN = math.nan


@dataclass(slots=True)
class RequestRecord:
    index: int
    t_sched: float
    t_send: float = NAN
    t_first: float = NAN
    t_last: float = NAN
    t_end: float = NAN
    n_out: int = 0
    n_out_from_usage: bool = False
    n_prompt: int | None = None
    n_prompt_expected: int | None = None
    max_tokens: int | None = None
    n_prompt_shared: int | None = None
    chunk_times: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not math.isnan(self.t_first)

    @property
    def ttft_s(self) -> float:
        """TTFT = t_first - t_sched (from the scheduled time: no coordinated omission)."""
        return self.t_first - self.t_sched

    @property
    def e2e_s(self) -> float:
        """E2E = t_last - t_sched."""
        return self.t_last - self.t_sched

    @property
    def tpot_s(self) -> float | None:
        """TPOT = (E2E - TTFT) / (n_out - 1), only where n_out > 1 (vLLM's definition)."""
        if self.n_out <= 1:
            return None
        return (self.e2e_s - self.ttft_s) / (self.n_out - 1)

    @property
    def queue_s(self) -> float:
        """Client-side queueing: t_send - t_sched."""
        return self.t_send - self.t_sched

    def itl_s(self) -> list[float]:
        """Gaps between consecutive content chunks (a chunk is not a token under speculation)."""
        ts = self.chunk_times
        return [b - a for a, b in itertools.pairwise(ts)]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        for k, v in list(d.items()):
            if isinstance(v, float) and math.isnan(v):
                d[k] = None
        return d
