"""``--objective robust`` on the serving model: a screened setting scored by its worst gain.

Ranked by the worst gain (tuner/run/objective.py), the screen (tuner/search/guide.py) scores a
setting by the least of its gains: its tuned prediction over the baseline's measured score, and
on each other workload its prediction there over the baseline's prediction there. The other
workloads' predictions take the request lengths the baseline's records there had (its first
point's, each a capacity search of its own: ``trials/<number>/``) and the same step model, so
that a bias of the model cancels in the ratio. The result is in the tuned workload's tokens/s:
the baseline's score there times the worst gain, the unit ``RunState.value`` ranks in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.report.schema import TrialReport
from tuner.search.calibration import lengths_of as calibration_lengths
from tuner.search.screen import SCREEN_HORIZON_S, SCREEN_RESOLUTION
from tuner.search.study import config_key
from tuner.servemodel.configs import sim_knobs
from tuner.servemodel.predict import mean_of, predict
from tuner.servemodel.scheduler import SimulationError

if TYPE_CHECKING:  # the guide holds one
    from tuner.search.guide import Guide


@dataclass
class WorstGain:
    """The other workloads' predictions of one run's guide."""

    g: Guide
    # each other workload's request lengths, and predictions by (workload, fit, configuration)
    lengths: dict[int, list[tuple[int, ...]]] = field(default_factory=dict)
    cache: dict[tuple, float | None] = field(default_factory=dict)

    def worst(self, params: dict[str, Any], tuned: float) -> float | None:
        """A screened setting's score: its tuned prediction; ranked by the worst gain, the
        baseline's tuned score times the least of its gains (the module docstring)."""
        st = self.g.st
        base = st.baseline
        if not st.by_worst_gain or base is None or not base.score_tokens_per_s:
            return tuned
        worst = tuned / base.score_tokens_per_s
        for k in range(len(base.across)):
            mine, theirs = self.predict_on(k, params), self.predict_on(k, base.params)
            if mine is None or not theirs:
                return tuned if mine is not None else None  # nothing to rank there: tuned
            worst = min(worst, mine / theirs)  # a prediction of 0 is a gain of 0, not none
        return base.score_tokens_per_s * worst

    def predict_on(self, k: int, params: dict[str, Any]) -> float | None:
        """The output tokens/s the model predicts for ``params`` at its capacity on the run's
        ``k``-th other workload (None: no lengths there yet, or no capacity)."""
        pairs = self.lengths_on(k)
        fit = self.g._nearest(params)
        if not pairs or fit is None:
            return None
        cal = self.g.calibration
        key = (k, cal.stamps.get(self.g._key(fit.build)), cal.admit_per_seq_s, config_key(params))
        if key not in self.cache:
            step, _ = self.g._step_for(params, fit)
            try:
                p = predict(
                    step,
                    sim_knobs(params, self.g.space, self.g._kv_bytes(params)),
                    self.g._draw(pairs),
                    self.g.st.opts.slos,
                    self.g.st.opts.max_error_rate,
                    self.g.st.axis.kind,
                    mean_lengths=mean_of(pairs),
                    seed=self.g.st.opts.seed,
                    resamples=0,
                    resolution=SCREEN_RESOLUTION,
                    horizon_s=SCREEN_HORIZON_S,
                )
                self.cache[key] = p.tokens_per_s if p.load is not None else None
            except (SimulationError, ValueError):
                self.cache[key] = None
        return self.cache[key]

    def lengths_on(self, k: int) -> list[tuple[int, ...]] | None:
        """The request lengths of the baseline's first point on the ``k``-th other workload."""
        if k in self.lengths:
            return self.lengths[k]
        base = self.g.st.baseline
        if base is None or k >= len(base.across):
            return None
        path = self.g.st.trial_dir(base.across[k].number) / "trial.json"
        try:
            sub = TrialReport.model_validate_json(path.read_bytes())
            found = next((x for i in range(len(sub.points)) if (x := self.lengths_of(sub, i))), [])
        except (OSError, ValueError):
            return None
        if found:
            self.lengths[k] = found
        return found or None

    def lengths_of(self, t: TrialReport, i: int) -> list[tuple[int, ...]]:
        return calibration_lengths(self.g._records(t, i))
