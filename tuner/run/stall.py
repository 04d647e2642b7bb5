"""A try disturbed at its start, set aside and measured again once.

Which records are a stall the load did not cause is probes/transient.py's. A capacity search
point that broke only through one (tuner/run/trial.py) and a confirmation try that missed its
headroom only through one (tuner/run/recommend.py) are both kept here as warm-up, written beside
the points as ``*-disturbed.jsonl``, and said in a line and a run note; the caller measures
the same load again, once.
"""

from __future__ import annotations

from pathlib import Path

from probes.metrics import Verdict
from probes.transient import START_SHARE
from tuner.engines.base import RunningServer, raise_if_died
from tuner.run import stop
from tuner.run.measure import Measured, point_line
from tuner.run.state import RunState
from tuner.storage.records import write_records


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
