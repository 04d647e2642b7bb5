"""Progress of a tuning on stderr: a line per event (each load point, each start, each verdict)
and, on a terminal, a status line under them (rich) with the stage, trial k of n, the
configuration being measured, the best score so far, the time taken and the time left. Not on
a terminal (CI logs, pipes) the lines are plain and there is no status line.

The status reads ``Doing`` (what the run is at, kept on the run's state by tuner/run/stages.py and
tuner/run/trial.py) and the run's clock and budget; it draws, it decides nothing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console
from rich.live import Live
from rich.text import Text

if TYPE_CHECKING:
    from tuner.run.state import RunState


@dataclass
class Doing:
    """What the run is at, for the status line."""

    stage: str = "baseline"
    stage_trials: int = 0  # configurations the stage may measure
    stage_started: int = 0  # of them started so far
    later_trials: int = 0  # configurations the stages after this one may measure
    trial: str = ""  # "trial 3 (batching)"
    config: str = ""  # its knobs, as the log line shows them


def _clock(seconds: float) -> str:
    s = max(0, int(seconds))
    return (
        f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def status_text(st: RunState) -> Text:
    """The status line: stage, trial k of n, configuration, best so far, elapsed, time left."""
    d = st.doing
    best = st.best()
    parts = [f"stage {d.stage}"]
    if d.stage_trials:
        parts.append(f"trial {d.stage_started} of up to {d.stage_trials}")
    if d.trial:
        parts.append(f"{d.trial}: {d.config}" if d.config else d.trial)
    score = best.score_tokens_per_s if best else None
    if best is not None and score:
        who = "baseline" if best.number == 0 else f"trial {best.number}"
        parts.append(f"best {score:.0f} tok/s ({who})")
    else:
        parts.append("best: none yet")
    elapsed = f"{_clock(st.clock.elapsed())} elapsed"
    if st.budget.bounded:
        elapsed += f", {_clock(st.budget.deadline - st.clock.now())} left"
    parts.append(elapsed)
    return Text(" | ".join(parts), style="bold cyan", overflow="ellipsis", no_wrap=True)


class Display:
    """The tuning's progress sink: call it with a line; ``watch`` a run for the status line."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True, highlight=False)
        self.live: Live | None = None

    def __call__(self, msg: str) -> None:
        if self.live is not None:
            self.live.console.print(msg, markup=False, highlight=False, soft_wrap=True)
        else:
            print(msg, file=sys.stderr if self.console.stderr else self.console.file, flush=True)

    def watch(self, st: RunState) -> None:
        """Show the status line under the lines while the run works (on a terminal only)."""
        if not self.console.is_terminal or self.live is not None:
            return
        self.live = Live(
            console=self.console,
            get_renderable=lambda: status_text(st),
            refresh_per_second=2,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self.live.start()

    def close(self) -> None:
        live, self.live = self.live, None
        if live is not None:
            live.stop()
