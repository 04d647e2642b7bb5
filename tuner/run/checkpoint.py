"""Resume: the tuner's state saved after every finished trial, and replayed on ``--resume``.

After trial N finishes, ``save`` writes a ``Checkpoint`` (tuner/storage/store.py) holding
everything the
search knows at that moment. ``--resume RUN_DIR`` starts the same run again with the options,
run id and salt it was started with, and ``Replay`` answers the search's requests for trials
that finished: when the search, seeded and fed the same outcomes as before, asks for trial N
with the same stage and configuration, the state right after N is restored (no engine starts)
and the run goes on as if it had never stopped. The time budget counts over the whole run:
restoring trial N sets the clock to how long the run had taken when N finished. The first
trial without a checkpoint (the one interrupted) is measured again from the start; its partial
folder is moved aside. Should the search ask for another configuration under a number that has
a checkpoint (it cannot, with the same seed and outcomes, but a changed search space could),
that checkpoint and every later one are moved aside and measured afresh: the replay never
serves a measurement of one configuration as another's.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

from tuner.run.state import FINDINGS
from tuner.storage.store import Checkpoint, RunStore

if TYPE_CHECKING:
    from tuner.report.schema import TrialReport
    from tuner.run.state import RunState


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _set_rng_state(rng: random.Random, state: list[Any]) -> None:
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))


def save(st: RunState, trial: TrialReport) -> Checkpoint:
    """The state right after ``trial`` finished, in the store."""
    cp = snapshot(st, trial)
    st.store.save_checkpoint(cp)
    return cp


def snapshot(st: RunState, trial: TrialReport) -> Checkpoint:
    """The state right after ``trial`` finished (``st.trials`` does not hold it yet)."""
    now = st.clock.now()
    b = st.budget
    return Checkpoint(
        number=trial.number,
        stage=trial.stage,
        params=trial.params,
        trial=trial,
        **{name: getattr(st, name) for name in FINDINGS},
        quality_ref=st.quality.ref,
        quality_ref_error=st.quality.ref_error,
        greedy=st.exactness.greedy,
        samples={n: len(s) for n, s in st.samples.items()},
        rng_state=_rng_state(st.rng),
        elapsed_s=st.clock.elapsed(),
        stage_left_s=b.stage_deadline - now if b.stage_deadline != float("inf") else None,
        startup_s=st.clock.startup_s,
        warmup_s=st.clock.warmup_s,
        measure_s=st.clock.measure_s,
        engine_starts=st.clock.engine_starts,
    )


def restore(st: RunState, cp: Checkpoint) -> TrialReport:
    """Put the run's state back in the state right after ``cp``'s trial; returns that trial."""
    st.baseline = cp.baseline
    st.trials = list(cp.trials)
    st.stage_reports = list(cp.stage_reports)
    st.comparisons = list(cp.comparisons)
    restore_findings(st, cp)
    st.exactness.greedy = dict(cp.greedy)
    st.samples = {n: st.store.samples(n, k) for n, k in cp.samples.items()}
    _set_rng_state(st.rng, cp.rng_state)
    c, b = st.clock, st.budget
    now = c.now()
    # The run had taken cp.elapsed_s when the trial finished: the clock and both deadlines
    # continue from there.
    c.t0 = now - cp.elapsed_s
    if b.bounded:
        b.deadline = c.t0 + (st.opts.time_budget_s or 0.0)
    b.stage_deadline = now + cp.stage_left_s if cp.stage_left_s is not None else float("inf")
    c.startup_s, c.warmup_s, c.measure_s = cp.startup_s, cp.warmup_s, cp.measure_s
    c.engine_starts = cp.engine_starts
    return cp.trial


def restore_findings(st: RunState, cp: Checkpoint) -> None:
    """What a checkpoint holds besides the trials: the baseline's confirmation, the notes, the
    probe and the quality gate's reference (also what a shared study's workers take from the
    one that measured the baseline, tuner/run/worker.py)."""
    st.baseline_confirmed = cp.baseline_confirmed
    st.trial_confirmed = cp.trial_confirmed
    st.displaced_confirmed = cp.displaced_confirmed
    st.notes = list(cp.notes)
    st.diagnosis = cp.diagnosis
    st.probe_s = cp.probe_s
    st.quality.ref = cp.quality_ref
    st.quality.ref_error = cp.quality_ref_error


class Replay:
    """The checkpoints of a run being resumed, served in order (see the module docstring)."""

    def __init__(self, store: RunStore, checkpoints: dict[int, Checkpoint]) -> None:
        self.store = store
        self.pending = dict(checkpoints)
        self.replayed: list[int] = []

    def take(self, number: int, stage: str, params: dict[str, Any]) -> Checkpoint | None:
        """The checkpoint of trial ``number`` if it measured this configuration; else None,
        with it and every later checkpoint moved aside (they followed another history)."""
        cp = self.pending.pop(number, None)
        if cp is None:
            self.drop_from(number, "interrupted before it finished: measured again")
            return None
        if cp.stage == stage and cp.params == params:
            self.replayed.append(number)
            return cp
        self.pending[number] = cp
        self.drop_from(
            number,
            f"the resumed search asked for {stage} {params} as trial {number}, not "
            f"{cp.stage} {cp.params}: measured afresh",
        )
        return None

    def drop_from(self, number: int, why: str) -> None:
        for n in sorted(k for k in self.pending if k >= number):
            del self.pending[n]
            self.store.set_aside(n, why)
        self.store.set_aside(number, why)
