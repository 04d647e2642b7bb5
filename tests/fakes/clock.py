"""A scripted clock: returns the given times in order, and says so when it runs out."""

from __future__ import annotations

from collections.abc import Iterable


class ScriptedClock:
    def __init__(self, times: Iterable[float]) -> None:
        self._times = iter(times)
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        try:
            return next(self._times)
        except StopIteration:
            raise AssertionError(f"scripted clock ran out after {self.calls - 1} calls") from None
