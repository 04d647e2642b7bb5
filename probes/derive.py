"""A workload derived from another with a different length shape (``--check-workload derived``).

A configuration tuned on one length shape can lose on another (a scheduler tuned for fixed,
short prompts stalls everyone's first token behind a few long ones), so the held-out check's
default workload keeps the tuned one's mean lengths and changes their shape:

- lengths that are not heavy-tailed (fixed, a uniform spread, a pairs file or a trace whose
  p99 is under ``HEAVY_RATIO`` x its mean) become lognormal of the same means with a p99 of
  ``DERIVED_P99_RATIO`` x each mean (probes.lengths), clipped to the spec's defaults; a length
  too short for a lognormal above its floor (a prompt's salt, a prefix group's prefix) stays
  fixed;
- heavy-tailed lengths become fixed at their means.

A synthetic or pairs workload keeps its prefix groups, sessions and arrivals; a trace's
derived workload is synthetic, with Poisson arrivals and no shared blocks (a trace's times and
blocks belong to its rows). A file of written prompts has no counted lengths to derive from.
The derived workload is a ``synthetic:`` spec, parsed like ``--workload``, so it is checked
the same way; ``describe_derivation`` says in a sentence what was derived.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from probes.kinds import MIN_OWN_TOKENS, PairsWorkload, SyntheticWorkload, Workload, shape_spec
from probes.prompts import WorkloadError
from probes.spec import parse_synthetic
from probes.trace import TraceWorkload

DERIVED_P99_RATIO = 4  # the derived lognormal's p99 over its mean
HEAVY_RATIO = 2.0  # a length whose p99 is at least this over its mean is heavy-tailed already


class Lengths(NamedTuple):
    """A workload's mean prompt and output tokens, and whether either is heavy-tailed."""

    input_mean: float
    output_mean: float
    heavy: bool


class Derived(NamedTuple):
    workload: SyntheticWorkload
    what: str  # one sentence: what was derived from what


def lengths(workload: Workload) -> Lengths | None:
    """The mean prompt and output tokens of a workload's requests (a synthetic workload's own
    means; a pairs file's or a trace's rows'), and whether either length is heavy-tailed (a
    lognormal length; rows whose p99 is at least ``HEAVY_RATIO`` x their mean). None for a
    file of written prompts: its prompts' tokens are not counted."""
    if isinstance(workload, SyntheticWorkload):
        heavy = workload.input_dist is not None or workload.output_dist is not None
        return Lengths(float(workload.input_len), float(workload.output_len), heavy)
    if isinstance(workload, PairsWorkload):
        rows = [(i, o) for i, o in workload.pairs]
    elif isinstance(workload, TraceWorkload):
        rows = [(r.input, r.output) for r in workload.rows]
    else:
        return None
    table = np.array(rows, dtype=float)
    means = table.mean(axis=0)
    p99 = np.percentile(table, 99, axis=0)
    heavy = bool(np.any(p99 >= HEAVY_RATIO * means))
    return Lengths(float(means[0]), float(means[1]), heavy)


def heavy_prompts(workload: Workload) -> bool:
    """Whether a workload's prompt lengths are heavy-tailed: a synthetic workload's lognormal
    input, or pairs' or a trace's rows whose prompt p99 is at least ``HEAVY_RATIO`` x their
    mean (where a long-prefill cap can pay off). False for a file of written prompts: their
    tokens are not counted."""
    if isinstance(workload, SyntheticWorkload):
        return workload.input_dist is not None
    if isinstance(workload, PairsWorkload):
        prompts = [i for i, _ in workload.pairs]
    elif isinstance(workload, TraceWorkload):
        prompts = [r.input for r in workload.rows]
    else:
        return False
    table = np.array(prompts, dtype=float)
    return bool(np.percentile(table, 99) >= HEAVY_RATIO * table.mean())


def derive(workload: Workload) -> Derived:
    """The held-out workload derived from ``workload`` (see the module docstring).

    Raises:
        WorkloadError: a file of written prompts, or lengths too short for any other shape.
    """
    got = lengths(workload)
    if got is None:
        raise WorkloadError(
            "--check-workload derived needs a workload of counted lengths to derive from; a "
            "file of written prompts has none: give the held-out workload itself "
            "(e.g. --check-workload synthetic:input=512,output=128,in_p99=2048)"
        )
    n_in, n_out = max(1, round(got.input_mean)), max(1, round(got.output_mean))
    shape: list[str] = []
    prefix_len = 0
    if isinstance(workload, SyntheticWorkload | PairsWorkload):
        shape = shape_spec(workload.prefix, workload.sessions, workload.arrivals)
        kept = f"; its {', '.join(shape)} kept" if shape else ""
        prefix_len = workload.prefix.length if workload.prefix else 0
    else:
        kept = "; Poisson arrivals and no shared blocks instead of the trace's"
    source = (
        "the tuned workload's means"
        if isinstance(workload, SyntheticWorkload)
        else f"the means of {workload.label}'s rows"
    )
    parts = [f"synthetic:input={n_in},output={n_out}"]
    if got.heavy:
        what = f"fixed lengths at {source} (input {n_in}, output {n_out} tokens)"
        wl = _parse(",".join([*parts, *shape]), what)
        return Derived(wl, f"{what}, where it was tuned on heavy-tailed ones{kept}")
    floor = MIN_OWN_TOKENS + prefix_len
    tails = []
    if n_in > floor:
        parts.append(f"in_p99={DERIVED_P99_RATIO * n_in}")
        tails.append("input")
    if n_out > 1:
        parts.append(f"out_p99={DERIVED_P99_RATIO * n_out}")
        tails.append("output")
    if not tails:
        raise WorkloadError(
            f"--check-workload derived: the tuned workload's lengths (input {n_in}, output "
            f"{n_out} tokens) are too short for a heavy-tailed shape; give the held-out "
            "workload itself"
        )
    fixed = {"input", "output"} - set(tails)
    also = f" ({fixed.pop()} kept fixed: too short for a tail)" if fixed else ""
    what = (
        f"{' and '.join(tails)} lognormal at {source} (input {n_in}, output {n_out} "
        f"tokens), p99 {DERIVED_P99_RATIO}x the mean{also}"
    )
    return Derived(_parse(",".join([*parts, *shape]), what), what + kept)


def _parse(spec: str, what: str) -> SyntheticWorkload:
    try:
        return parse_synthetic(spec)
    except WorkloadError as exc:
        raise WorkloadError(f"--check-workload derived ({what}): {exc}") from None
