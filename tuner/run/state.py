"""What a tuning run knows while it works: the one object every step reads and adds to.

A ``RunState`` holds the options, the load axis, the clock and budget, the store, and what has
been measured so far (the baseline, the trials, the stages' reports, the comparisons, the
recommendation, the notes). Trial records are written by tuner/run/trial.py only; the other steps
read them, and add their own results (a stage report, a comparison, a recommendation) here.
A checkpoint (tuner/run/checkpoint.py) is this state right after a trial finished. Its fields
are declared by concern: ``Target`` (what is tuned), ``Findings`` (what the run has found,
what a checkpoint keeps), and the run's set-up in ``RunState`` itself.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from probes.client import LoadClient
from probes.diagnose import Diagnosis
from probes.workload import Tokenizer
from tuner.engines.base import Engine
from tuner.engines.hardware import Hardware
from tuner.options import TuneOptions
from tuner.report.schema import (
    HeldOutReport,
    PointReport,
    Recommendation,
    StageReport,
    TrialReport,
)
from tuner.run.budget import Budget, PhaseTimes
from tuner.run.gates import ExactnessGate, QualityGate
from tuner.run.measure import PointMeasurer
from tuner.run.progress import Doing
from tuner.run.quality_paid import may_lead
from tuner.scoring.capacity import LoadAxis
from tuner.scoring.compare import ComparisonReport
from tuner.scoring.estimate import CapacityEstimate, Constraint, Samples, estimate
from tuner.spaces.space import SearchSpace, Stage
from tuner.storage.store import RunMeta, RunStore

if TYPE_CHECKING:  # the checkpoint reads FINDINGS from here
    from tuner.run.checkpoint import Replay
    from tuner.storage.shared import SharedStudy

Say = Callable[[str], None]


@dataclass(kw_only=True)
class Target:
    """What is tuned, once the run is prepared (the target resolved, the client built)."""

    space: SearchSpace | None = None
    ctx: dict[str, Any] = field(default_factory=dict)
    model_path: str = ""
    tokenizer: Tokenizer | None = None
    client: LoadClient | None = None
    measurer: PointMeasurer | None = None
    launches: bool = True


@dataclass(kw_only=True)
class Findings:
    """What the run has found so far, each field under the name a checkpoint keeps it by
    (tuner/storage/store.py ``Checkpoint``; tuner/run/checkpoint.py saves and restores them
    together)."""

    baseline: TrialReport | None = None
    trials: list[TrialReport] = field(default_factory=list)
    stage_reports: list[StageReport] = field(default_factory=list)
    comparisons: list[ComparisonReport] = field(default_factory=list)
    baseline_confirmed: Recommendation | None = None
    # A trial confirmed on its own server after its search (the budget held no restart):
    trial_confirmed: Recommendation | None = None
    # The one it replaced: a later trial led by a little and was confirmed in its place.
    displaced_confirmed: Recommendation | None = None
    notes: list[str] = field(default_factory=list)
    diagnosis: Diagnosis | None = None
    probe_s: float = 0.0


FINDINGS = tuple(f.name for f in fields(Findings))


@dataclass(kw_only=True)
class RunState(Target, Findings):
    """One run's state (see the module docstring): how the run is set up (below), what is
    tuned (``Target``), what it has found (``Findings``), and what the end of the run adds."""

    opts: TuneOptions
    say: Say
    engine: Engine
    hw: Hardware
    run_id: str
    out: Path
    store: RunStore
    salt: str
    rng: random.Random
    axis: LoadAxis
    cons: list[Constraint]
    clock: PhaseTimes
    budget: Budget
    quality: QualityGate
    exactness: ExactnessGate = field(default_factory=ExactnessGate)
    doing: Doing = field(default_factory=Doing)  # what the run is at (the status line)
    meta: RunMeta | None = None
    replay: Replay | None = None
    shared: SharedStudy | None = None  # --storage: the study several workers share
    samples: dict[int, list[Samples]] = field(default_factory=dict)  # per trial, its points'
    recommended: Recommendation | None = None
    held_out: list[HeldOutReport] = field(default_factory=list)  # --check-workload (held_out.py)
    screened: int = 0  # configurations the serving model predicted (tuner/search/guide.py)

    @property
    def quality_limit(self) -> float:
        return self.quality.limit_pct

    def fresh_seed(self) -> int:
        """A different seed (so a different salt) per load point: no prefix-cache reuse."""
        return self.rng.getrandbits(31)

    def load(self, x: float) -> dict[str, float]:
        """A load as report.json writes it: ``{"concurrency": N}`` or ``{"rate_rps": R}``."""
        return {self.axis.key: int(x) if self.axis.kind == "concurrency" else x}

    def load_of(self, t: TrialReport) -> float | None:
        return float(t.load[self.axis.key]) if t.load and self.axis.key in t.load else None

    def point_load(self, p: PointReport) -> float:
        return float(p.load[self.axis.key])

    def measured(self) -> list[TrialReport]:
        """The baseline (once measured) and every trial, in order."""
        return [t for t in [self.baseline, *self.trials] if t is not None]

    def best(self) -> TrialReport | None:
        """The highest-scoring configuration that may be recommended; of equal scores, the one
        with the most latency headroom at its highest load that held (``held_margin``): two
        trials whose every point held at the same load score the same lower bound, and the
        README command of 2026-12-06 08:14 then confirmed the first of them, whose TPOT there
        was 1.8x the second's."""
        ok = may_lead(self.measured(), self.opts.tie_band)  # a quality cost paid by its gain
        if self.by_worst_gain:  # measured on every workload (tuner/run/objective.py)
            ok = [t for t in ok if t.worst_gain is not None]
        return max(ok, key=lambda t: (self.value(t), -held_margin(t))) if ok else None

    @property
    def robust(self) -> bool:
        """``--objective robust``: configurations ranked by their worst gain over the tuned
        workload and each --check-workload one (tuner/run/objective.py)."""
        return self.opts.objective == "robust"

    @property
    def by_worst_gain(self) -> bool:
        """Whether configurations are ranked by their worst gain now: ``--objective robust``
        once the baseline has a score on the tuned workload, which every gain divides by (a
        baseline that met the SLOs at no load there leaves the tuned score to rank them)."""
        base = self.baseline
        return self.robust and base is not None and bool(base.score_tokens_per_s)

    def value(self, t: TrialReport) -> float:
        """What ranks ``t`` (and what Optuna is told), in output tokens/s on the tuned
        workload: its score; ranked by the worst gain (``by_worst_gain``), the baseline's
        score times its worst gain, the tokens/s a configuration with that gain on every
        workload would reach here (0 without one)."""
        if not self.by_worst_gain or self.baseline is None:
            return t.score_tokens_per_s or 0.0
        return (self.baseline.score_tokens_per_s or 0.0) * (t.worst_gain or 0.0)

    def to_beat(self, best: TrialReport | None) -> float:
        """The tokens/s on the tuned workload a configuration must exceed to lead ``best``: its
        ``value`` (its score, or ranked by the worst gain the baseline's score times its worst
        gain). A gain on the tuned workload bounds a worst gain from above, so one that does not
        exceed this cannot lead."""
        if best is None:
            return 0.0
        return self.value(best)

    def add_samples(self, number: int, samples: Samples) -> None:
        """A point's samples join its trial's estimate, and the store, at once."""
        kept = self.samples.setdefault(number, [])
        self.store.add_samples(number, len(kept), samples)
        kept.append(samples)

    def estimate(self, number: int, level: float = 0.0) -> CapacityEstimate | None:
        """The capacity estimate from all of a trial's points (seeded: reproducible)."""
        return estimate(
            self.samples.get(number, []), self.cons, level=level, seed=self.opts.seed + number
        )

    def selected(self, stage: Stage) -> bool:
        """Whether --stages (names or kinds) leaves this stage in."""
        chosen = self.opts.stages
        return chosen is None or stage.name in chosen or stage.stage_kind in chosen

    def wants(self, kind: str) -> bool:
        """Whether the space has a stage of this kind that --stages does not leave out."""
        return self.space is not None and any(self.selected(s) for s in self.space.of_kind(kind))

    def trial_dir(self, number: int) -> Path:
        return self.out / "trials" / f"{number:03d}"


def held_margin(t: TrialReport) -> float:
    """The worst latency margin (probes.metrics.Verdict: over 0 breaks) of the trial's own
    highest-load point that held; +inf where none did."""
    held = [p for p in t.points if p.verdict.holds and not p.side_by_side]
    if not held:
        return math.inf
    top = max(held, key=lambda p: max(p.load.values()))
    return top.verdict.worst_margin
