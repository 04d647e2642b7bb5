"""The quality and exactness gates' steps on a running server, for one trial.

``GateSteps`` does what tuner/run/trial.py's Evaluator asks of the gates (tuner/run/gates.py)
during a
trial: a quantised configuration's quality figure, the quality reference (on the baseline, or
deferred to the first configuration that meets the SLOs, taken once in a shared study), and the
greedy outputs the exactness gate keeps as its reference or compares a speculative
configuration with. Each writes what it found into the trial (its quality figure; its
exactness, and the rejection where speculation changed outputs) and into the run's state; the
quality gate's rejection and what follows any rejection stay with the Evaluator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from probes.exactness import Exactness, describe
from probes.quality import Quality, QualityError
from tuner.engines.base import RunningServer, raise_if_died
from tuner.report.schema import TrialReport, write_atomic
from tuner.run import sizing
from tuner.run.gates import quality_rejection, rejection
from tuner.run.state import RunState


class GateSteps:
    """The gates' measurements on a trial's running server, into the run's state."""

    def __init__(self, st: RunState) -> None:
        self.st = st

    def quality(self, server: RunningServer, trial: TrialReport, label: str) -> bool:
        """The quality gate's figure for this configuration; False: it could not be taken
        (the trial failed)."""
        st = self.st
        try:
            trial.quality = st.quality.check(server.base_url, server.served_model or st.model_path)
        except QualityError as exc:
            raise_if_died(server, "during its quality check")
            trial.status, trial.error = "failed", f"quality could not be measured: {exc}"
            st.say(f"{label}: {trial.error}")
            return False
        q = trial.quality
        st.say(
            f"{label}: quality {q.metric} {q.value:.4g} against {q.baseline_value:.4g} "
            f"({q.degradation_pct:+.2f} %, limit {st.quality_limit:g} %)"
        )
        return True

    def refused_unmeasured(self, trial: TrialReport, label: str) -> bool:
        """Under a time budget, a configuration whose quality figure is over the limit is not
        load-tested: it cannot be recommended, and the budget goes to those that can (a run
        tuned on a heavy-tailed workload on a slow AMD box, 2026-12-06 17:01: fp8 weights,
        +2.48 % perplexity against a 1 % limit, took 111 s to start and 85 s of a load point,
        and was then refused). Without a budget it is load-tested, so that the report shows
        what the quality cost would have bought. True: refused here (``trial.rejected``)."""
        st = self.st
        q = trial.quality
        if q is None or q.holds or not st.budget.bounded:
            return False
        trial.rejected = quality_rejection(q, st.quality_limit)
        trial.status = "abandoned"
        trial.error = "not load-tested: its quality cost is over the limit (time budget)"
        st.say(f"{label}: not recommendable: {trial.rejected}; not load-tested (time budget)")
        return True

    def baseline_quality(self, server: RunningServer) -> None:
        """The quality gate's reference, on the baseline server (tuner/run/gates.py)."""
        st = self.st
        st.notes += st.quality.take_reference(server.base_url, server.served_model or st.model_path)
        if isinstance(st.quality.ref, Quality):
            st.say(f"quality reference: perplexity {st.quality.ref.value:.4g}")

    def deferred_reference(self, server: RunningServer, trial: TrialReport) -> None:
        """The quality gate's reference on the first configuration to meet the SLOs (the
        baseline meets them at no load). In a shared study one worker measures it and every
        worker takes it, so that all of them judge quantisation against the same figure."""
        st = self.st

        def take() -> dict[str, Any]:
            before = len(st.notes)
            self.baseline_quality(server)
            return {**st.quality.dump(), "trial": trial.number, "notes": st.notes[before:]}

        if st.shared is None:
            doc = take()
        else:
            doc, mine = st.shared.once("quality-reference", take, "the quality gate's reference")
            if not mine:
                st.quality.load(doc)
                st.notes += doc["notes"]
        st.notes.append(
            f"the quality gate's reference was measured on trial {doc['trial']}, the first "
            "configuration to meet the SLOs: the baseline meets them at no load"
        )

    def exactness(
        self,
        server: RunningServer,
        trial: TrialReport,
        tdir: Path,
        label: str,
        best: TrialReport | None,
    ) -> None:
        """Greedy outputs at concurrency 1: kept as the reference by a configuration that may
        be carried into the speculative stage, compared with that reference by one that uses
        speculative decoding (tuner/run/gates.py)."""
        st = self.st
        if st.space is None or not st.wants("speculative"):
            return
        speculative = bool(st.space.changed("speculative", trial.params))
        new_best = not trial.rejected and (best is None or st.value(trial) > st.to_beat(best))
        if not speculative and not (new_best and trial.status == "ok"):
            return
        if (
            not speculative
            and st.shared is None  # another worker may start the speculative stage from it
            and not sizing.another_trial_fits(st, trial, strict=False)
        ):
            # Nothing can follow it, a speculative trial least of all: no reference to keep.
            # (The README command on a slow AMD box, 2026-12-07: 9 s of the last minutes.)
            return
        try:
            outs = self.greedy(server, trial, tdir)
        except QualityError as exc:
            raise_if_died(server, "during its exactness check")
            if speculative:
                trial.exactness = Exactness(checked=False, reason=f"greedy outputs: {exc}")
                trial.rejected = trial.rejected or f"exactness not checked: {exc}"
            return
        gate = st.exactness
        if not speculative:
            gate.keep(trial.number, outs)
            return
        trial.exactness = gate.compare(outs)
        st.say(f"{label}: exactness: {describe(trial.exactness)}")
        trial.rejected = trial.rejected or rejection(trial.exactness, st.opts.accept_divergence)

    def greedy(self, server: RunningServer, trial: TrialReport, tdir: Path) -> list[Any]:
        """Greedy outputs at concurrency 1 on the exactness prompts, kept in the trial's folder.
        Raises QualityError."""
        outs = self.st.exactness.outputs(server.base_url, server.served_model or self.st.model_path)
        write_atomic(tdir / "greedy.json", orjson.dumps([o.model_dump() for o in outs]))
        return outs

    def keep_reference(self, server: RunningServer, trial: TrialReport) -> None:
        """Greedy outputs of a configuration that became the best after its own check (a
        side-by-side repeat put it ahead), so that the speculative stage, which starts from
        it, has its reference."""
        st = self.st
        if not st.wants("speculative") or trial.number in st.exactness.greedy:
            return
        if st.space is not None and st.space.changed("speculative", trial.params):
            return
        try:
            st.exactness.keep(trial.number, self.greedy(server, trial, st.trial_dir(trial.number)))
        except QualityError as exc:
            raise_if_died(server, "during its exactness check")
            st.notes.append(f"trial {trial.number}: no greedy outputs to check exactness by: {exc}")
