"""A gain: one configuration's output tokens/s over another's, the figure every comparison in a
report states (a trial over the baseline, a stage's best over its start, a workload's figure
over the defaults' there). Both figures must be of one kind: search figure over search figure,
or confirmed over confirmed."""

from __future__ import annotations


def gain(mine: float | None, theirs: float | None) -> float | None:
    """``mine`` over ``theirs``; None where either has no figure (or a figure of 0)."""
    return mine / theirs if mine and theirs else None
