"""The serving model's part in a stage (tuner/search/guide.py decides; this says and guards it):
the prediction said before each trial, the next configuration proposed, the error figures
after. The model only advises: where it fails on something unforeseen, the run says so once
and the stage goes on with Optuna's sampler, as with ``--no-serving-model``."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from tuner.report.schema import PredictedReport, TrialReport
from tuner.run.state import RunState
from tuner.search.guide import Guide
from tuner.search.study import config_key
from tuner.spaces.space import Stage


class GuidedStage:
    def __init__(self, st: RunState, guide: Guide) -> None:
        self.st, self.guide = st, guide
        self.off: str | None = None  # why the model was set aside, once it failed

    def _failed(self, exc: Exception) -> None:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        self.off = f"{type(exc).__name__}: {exc} ({where.filename}:{where.lineno})"
        self.st.say(f"serving model: set aside for the rest of the run after an error: {self.off}")
        self.st.notes.append(f"The serving model failed and was set aside: {self.off}.")

    def before(self, params: dict[str, Any], number: int) -> PredictedReport | None:
        """The model's prediction for trial ``number``, said before it is measured."""
        if self.off is not None:
            return None
        try:
            p = self.guide.before(params)
        except Exception as exc:  # the model advises; a failure of it must not end the run
            self._failed(exc)
            return None
        self.st.screened = self.guide.screened
        label = f"trial {number}" if number else "baseline"
        if p is None:
            self.st.say(f"{label}: no prediction (no build is calibrated yet)")
            return None
        load = f"{p.load:.2f} {self.st.axis.unit}" if p.load else "no load"
        hi = f"{p.high:.0f}" if p.high is not None else "?"
        if p.basis == "calibrated":
            why = f"calibrated on trial(s) {', '.join(map(str, p.build_trials))}"
        elif p.basis == "probe":
            why = "calibrated on the probe's sweeps alone"
        elif p.basis == "roofline":
            why = (
                f"a quantised build not measured yet ({self.guide.label(params)}), the nearest "
                "measured one scaled by the probe's roofline: this measurement calibrates it"
            )
        else:
            why = (
                f"a build not measured yet ({self.guide.label(params)}), predicted from the "
                "nearest measured one: this measurement calibrates it"
            )
        self.st.say(
            f"{label}: predicted {p.tokens_per_s:.0f} tok/s [{p.low:.0f}-{hi}] at {load} ({why})"
        )
        return p

    def aim(self, trial: TrialReport) -> float | None:
        """The capacity the model predicts for ``trial`` from its points so far (None: none,
        or the model was set aside)."""
        if self.off is not None:
            return None
        try:
            return self.guide.aim(trial)
        except Exception as exc:  # as in before()
            self._failed(exc)
            return None

    def after(self, t: TrialReport) -> None:
        if self.off is not None:
            return
        try:
            self.guide.after(t)
        except Exception as exc:  # as in before()
            self._failed(exc)
        self.st.screened = self.guide.screened

    def propose(
        self,
        stage: Stage,
        carried: dict[str, Any],
        tried: set[tuple],
        last: Callable[[], bool] = lambda: False,
        started: Sequence[int] = (),
    ) -> dict[str, Any] | str | None:
        """The next configuration for ``stage`` (tuner/search/study.py ``propose``): the model's,
        or, where nothing is calibrated yet or the model was set aside, the space's next
        candidate, then the sampler's. ``last``: whether the trial is the stage's last
        (tuner/run/sizing.py ``last_of_stage``), chosen for its surest gain; ``started``: the
        stage's trials so far.

        Where the model expects nothing to beat the best before the stage has measured any
        configuration of its own, the stage's first candidate is measured all the same, as a
        stage the probe expects nothing of still gets a trial: the expectation is checked by
        measurement. (A run tuned on a heavy-tailed, prefix-sharing workload on a slow AMD box,
        2026-12-06 17:00: the model, which then simulated no prefix cache, put every configuration's
        capacity at no load under p99 TTFT <= 2 s, the baseline measured 0.93 requests/s, and
        the batching stage measured nothing.)"""
        c = None
        final = False
        before, t0 = self.guide.screened, time.monotonic()
        if self.off is None:
            try:
                if self.guide.fits():
                    final = last()
                    self.guide.workers = 1
                    c = self.guide.propose(stage, carried, tried, last=final, first=not started)
                    self.st.screened = self.guide.screened
                    if c is None:
                        return self._checked(stage, tried, started)
            except Exception as exc:  # as in before()
                self._failed(exc)
        if c is None:
            return _next_candidate(stage, tried)
        shown = " ".join(f"{k}={v}" for k, v in c.params.items())
        why = " (the stage's last: the surest gain)" if final else ""
        w = self.guide.workers
        took = (
            f" ({self.guide.screened - before} now, in {time.monotonic() - t0:.0f} s on {w} "
            f"{'processes' if w > 1 else 'process'})"
        )
        self.st.say(
            f"stage {stage.name}: the serving model has screened {self.guide.screened} "
            f"configurations{took}; next{why}: {shown}"
        )
        return c.params

    def _checked(
        self, stage: Stage, tried: set[tuple], started: Sequence[int]
    ) -> dict[str, Any] | str:
        """The model expects nothing to gain: the stage stops (the reason), unless it has
        measured none of its own yet and has a candidate left, which is measured instead."""
        expects = (
            f"the serving model expects none of the {self.guide.screened} configurations it "
            "screened to beat the best measured one"
        )
        nxt = None if started else _next_candidate(stage, tried)
        if nxt is None:
            return expects
        self.st.say(f"stage {stage.name}: {expects}; its first candidate is measured to check that")
        return nxt


def _next_candidate(stage: Stage, tried: set[tuple]) -> dict[str, Any] | None:
    return next((dict(x) for x in stage.candidates if config_key(x) not in tried), None)
