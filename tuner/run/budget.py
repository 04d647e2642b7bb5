"""Time: the run's budget (a deadline and a stage's share of it) and where the time went.

Pure over an injected monotonic clock, so the budget's decisions are tested with a scripted
one. What a trial, a point or a confirmation is likely to take is estimated by the caller from
what it measured; this module only says whether that fits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

Now = Callable[[], float]


@dataclass
class PhaseTimes:
    """Wall-time accounting of a run, by phase (report.json's ``timing``)."""

    now: Now = time.monotonic
    t0: float = field(default=math.nan)
    startup_s: float = 0.0
    warmup_s: float = 0.0
    measure_s: float = 0.0
    engine_starts: int = 0

    def __post_init__(self) -> None:
        if math.isnan(self.t0):
            self.t0 = self.now()

    def elapsed(self) -> float:
        return self.now() - self.t0


class Budget:
    """The whole run's deadline (none without a budget), the current stage's, and the current
    trial's share (tuner/run/share.py).

    Args:
        total_s: the budget, from ``start``; None: unbounded (everything fits).
        now: the monotonic clock.
        start: when the run began (default: now).
    """

    def __init__(
        self, total_s: float | None, now: Now = time.monotonic, start: float | None = None
    ):
        self.now = now
        t0 = now() if start is None else start
        self.deadline = t0 + total_s if total_s is not None else math.inf
        self.stage_deadline = math.inf
        self.trial_deadline = math.inf

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.deadline)

    def left(self, reserve_s: float = 0.0) -> float:
        """Seconds left before the deadline once ``reserve_s`` is kept back (inf: unbounded)."""
        return self.deadline - self.now() - reserve_s

    def fits(self, need_s: float, reserve_s: float = 0.0) -> bool:
        """Whether ``need_s`` more still ends before the deadline with ``reserve_s`` kept."""
        return self.now() + need_s + reserve_s <= self.deadline

    def open_stage(self, share: float, reserve_s: float = 0.0) -> None:
        """A stage gets ``share`` of the time left once ``reserve_s`` is kept back."""
        if not self.bounded:
            self.stage_deadline = math.inf
            return
        self.stage_deadline = self.now() + max(0.0, self.left(reserve_s)) * share

    def stage_fits(self, need_s: float) -> bool:
        return self.now() + need_s <= self.stage_deadline

    def open_trial(self, share_s: float | None) -> None:
        """The trial starting now may take ``share_s`` (None: what the run's deadline allows)."""
        self.trial_deadline = math.inf if share_s is None else self.now() + max(0.0, share_s)

    def trial_fits(self, need_s: float) -> bool:
        return self.now() + need_s <= self.trial_deadline

    def trial_left(self) -> float:
        """Seconds left in the current trial's share (inf: no share)."""
        return self.trial_deadline - self.now()
