"""A try disturbed at its start, set aside and measured again once.

Which records are a stall the load did not cause is probes/transient.py's; whether a try is
measured again is decided here, for both kinds of try: a capacity search point that broke only
through one (``again_point``, asked by tuner/run/trial.py) and a confirmation try that missed
its headroom only through one (``again_try``, asked by tuner/run/confirmation.py). The try set
aside is kept as warm-up, written beside the points as ``*-disturbed.jsonl``, and said in a
line and a run note (``set_aside``); the caller measures the same load again, once.

The detector is the run's ``StallRule`` (probes/transient.py's ``disturbed_at_start`` unless a
caller, a test, passes another to the Runner).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from probes.metrics import Verdict
from probes.records import RequestRecord
from probes.slo import SLOSet
from probes.transient import START_SHARE, disturbed_at_start
from tuner.engines.base import RunningServer, raise_if_died
from tuner.run import stop
from tuner.run.measure import Measured, point_line
from tuner.run.state import RunState
from tuner.storage.records import write_records

# (records, slos, headroom=, planned=) -> whether the try broke only through a stall at its start
Detector = Callable[..., bool]


@dataclass(frozen=True)
class StallRule:
    """Which tries broke only through a stall at their start: a search point's and a
    confirmation try's detector (a test passes its own instead of patching modules)."""

    point: Detector = disturbed_at_start
    confirmation: Detector = disturbed_at_start


def again_point(
    rule: StallRule, records: list[RequestRecord], slos: SLOSet, verdict: Verdict, *,
    measured_again: bool, budget_left: bool,
) -> bool:  # fmt: skip
    """Whether a search point is measured again: it broke, only through a stall at its
    start, it is its load's first try, and the budget holds another."""
    return not measured_again and not verdict.holds and budget_left and rule.point(records, slos)


def again_try(
    rule: StallRule, records: list[RequestRecord], slos: SLOSet, *, missed: bool,
    headroom: float, planned: int, measured_again: bool, budget_left: bool,
) -> bool:  # fmt: skip
    """Whether a confirmation try is measured again: it missed its headroom (``missed``),
    only through a stall at its start, it is the confirmation's first set aside, and the
    budget holds as many requests again."""
    return (
        not measured_again
        and missed
        and budget_left
        and rule.confirmation(records, slos, headroom=headroom, planned=planned)
    )


def set_aside(
    st: RunState,
    server: RunningServer,
    m: Measured,
    verdict: Verdict,
    path: Path,
    label: str,
    x: float,
    headroom: float = 0.0,
) -> None:
    """Write a disturbed try's records to ``path`` and say why it does not count.

    Raises:
        EngineDied: the engine exited during the try.
        StopRequested: a Ctrl-C came in while it was measured (tuner/run/stop.py)."""
    write_records(path, m.records)
    load = st.axis.label(x)
    raise_if_died(server, f"while measured at {load}", m.metrics.n_failed > 0)
    if headroom:
        what = f"missed its {headroom:.0%} headroom only in its first seconds (every request over "
        what += f"{1 - headroom:.0%} of a limit"
    else:
        what = "broke only in its first seconds (every request over a limit"
    why = (
        f"{label}: {load} {what} arrived in its first {START_SHARE:.0%}, none after): a stall "
        f"at its start, not the load; measured again once ({point_line(m.metrics, verdict)})"
    )
    st.say(why)
    st.notes.append(why)
    stop.check()
