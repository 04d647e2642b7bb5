"""What the engine measures next: the serving model's choice, and its published error.

Every start of the engine costs minutes, so within a stage the serving model
(tuner/servemodel/) decides what is worth one:

- **Calibrated builds.** Every build measured so far (the knobs that change kernels or the front
  end: tuner/servemodel/configs.py) has a step model fitted on the records of its trials'
  points. For each, an Optuna search on the model (tuner/search/screen.py) screens the simulated
  knobs (batch limit, token budget, chunked prefill, KV cache), and its best setting becomes a
  candidate with a ``calibrated`` prediction.
- **Builds not measured yet** (the stage's hand-seeded candidates, then the best build with one
  build knob changed) are predicted with the nearest calibrated build's step model, unscaled,
  and marked ``transferred``: the weaker kind, with ``TRANSFER_SPREAD`` in its interval; a
  quantised build (one differing only in the quantisation stage's knobs) with that step model
  scaled to its bytes by the probe's roofline where the probe can say (``roofline``, as weak:
  tuner/servemodel/roofline.py). A new build costs one measured configuration to calibrate,
  and the progress line says so.
- **The choice** (tuner/search/choice.py): the candidate with the highest expected gain over
  the best measured score, or, for a stage's last trial, the surest gain; where none is worth a
  start, the stage stops, with the number of candidates the model screened.
- **Ranked by the worst gain** (``--objective robust``, tuner/run/objective.py): the screen
  scores a setting by the least of its gains, its tuned figure over the baseline's measured
  one and, on each other workload, its predicted figure over the baseline's predicted one there
  (the same step model, the lengths the baseline's requests had there: a bias of the model
  cancels), in the tuned workload's tokens/s; the choice then weighs the tuned prediction
  against what the best must be beaten by there (an upper bound of the worst gain).

Each measured trial keeps the prediction it was chosen on (``TrialReport.predicted``), and,
once measured, what the same step model predicts at the load its figures were measured at, so
report.json can give the model's error per metric beside every measurement (``errors``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from probes.drift import HORIZON_S
from probes.records import RequestRecord
from tuner.report.model_errors import model_errors
from tuner.report.schema import PredictedReport, TrialReport
from tuner.search.calibration import BuildFit, Calibration, build_key, probe_points
from tuner.search.calibration import lengths_of as calibration_lengths
from tuner.search.choice import Candidate, choose
from tuner.search.parallel import map_forked, usable
from tuner.search.screen import SCREEN_HORIZON_S, SCREEN_RESOLUTION, screen, with_headroom
from tuner.search.study import config_key
from tuner.search.worst_gain import WorstGain
from tuner.servemodel.configs import build_label, build_of, kv_bytes_per_token, sim_knobs
from tuner.servemodel.load import Lengths, cycled
from tuner.servemodel.predict import (
    RESOLUTION,
    Simulator,
    Spread,
    mean_of,
    predict,
)
from tuner.servemodel.roofline import roofline_of
from tuner.servemodel.scheduler import SimulationError
from tuner.servemodel.spreads import MEASURED_BASES, Basis, spread_for
from tuner.servemodel.steptime import StepModel
from tuner.spaces.knob import Knob
from tuner.spaces.space import SearchSpace, Stage
from tuner.storage.records import RecordsMissing, read_records, records_path

if TYPE_CHECKING:
    from tuner.run.state import RunState

SCREEN_TRIALS = 200  # distinct candidates the model screens per calibrated build and proposal
# A build screened already in a stage, whose own points have not changed since, is screened
# again with a quarter as many candidates: only the run's admission delay and the error counts
# moved its predictions. In the README command on the AMD box (2026-12-07 12:43) the second
# screen, the baseline's build again beside trial 1's new one, took 36 s of the 13 minutes,
# and the run ended 5-10 s short of a fourth configuration's gate.
RESCREEN_SHARE = 4


@dataclass
class Guide:
    """The serving model over one run (see the module docstring)."""

    st: RunState
    screen_trials: int = SCREEN_TRIALS  # candidates screened per calibrated build and proposal
    _screened: set[tuple] = field(default_factory=set)  # every configuration predicted
    # (stage, build, carried) -> the build's stamp when it was last screened in full, and the
    # best settings that screen found (the first a smaller screen of it scores again)
    _full: dict[tuple, tuple[tuple | None, list[dict[str, Any]]]] = field(default_factory=dict)
    workers: int = 1  # the most processes its predictions were spread over (parallel.py)
    _cal: Calibration | None = None
    _lengths: list[tuple[int, ...]] | None = None
    _pending: StepModel | None = None  # the step model of the trial being measured
    _chosen: tuple[dict[str, Any], Candidate] | None = None  # the last proposal (full params)
    # predictions by (the step model's trials and points, the configuration, resamples)
    _cache: dict[tuple, Candidate | None] = field(default_factory=dict)
    # --objective robust: predictions on the other workloads (tuner/search/worst_gain.py)
    _others: WorstGain = field(init=False)

    def __post_init__(self) -> None:
        self._others = WorstGain(self)

    @property
    def screened(self) -> int:
        """Distinct configurations the model has predicted (screened) so far."""
        return len(self._screened)

    @property
    def space(self) -> SearchSpace:
        assert self.st.space is not None
        return self.st.space

    # ------------------------------------------------------------ calibration
    def lengths(self) -> list[tuple[int, ...]] | None:
        """The (prompt, output) tokens the run's requests had, from the first measured ones."""
        if self._lengths is not None:
            return self._lengths
        found = self.calibration.lengths(self.st.measured())
        if any(t.points for t in self.st.measured()):  # not the probe's few: kept
            self._lengths = found
        return found

    def _records(self, t: TrialReport, i: int) -> list[RequestRecord]:
        """A point's records, where it was written (relative to the working directory, as
        the run names it) or where the run folder has moved to."""
        try:
            return read_records(records_path(self.st.out, t, t.points[i]))
        except (RecordsMissing, OSError):
            return []

    @property
    def calibration(self) -> Calibration:
        if self._cal is None:
            d = self.st.diagnosis
            self._cal = Calibration(
                self.space,
                self._records,
                self.st.load_of,
                # the probe ran on the baseline's server: the engine's defaults
                probe=probe_points(d.records_files, {}, self.st.out / "probe") if d else None,
                model_dir=self.st.model_path,
            )
        return self._cal

    def fits(self) -> dict[str, BuildFit]:
        """Every measured build's step model, refitted where it has new points."""
        return self.calibration.update(self.st.measured())

    def _key(self, params: dict[str, Any]) -> str:
        return build_key(params, self.space)

    def _nearest(self, params: dict[str, Any]) -> BuildFit | None:
        self.fits()
        found = self.calibration.nearest(params)
        return found[0] if found else None

    # ------------------------------------------------------------ prediction
    def spread(self, basis: Basis) -> Spread:
        """Spreads from the error measured on this run's trials (the probe-only predictions
        left out: theirs is a weaker kind, with a term of its own)."""
        measured = model_errors(self.st.measured(), MEASURED_BASES)
        return spread_for(measured.get("capacity", {}).get("median"), basis)

    def predict(self, params: dict[str, Any], *, resamples: int = 100) -> Candidate | None:
        """The model's prediction for the full configuration ``params`` (None: no build is
        calibrated yet, or the configuration cannot be simulated)."""
        return self.predict_many([params], resamples=resamples)[0]

    def predict_many(
        self, many: list[dict[str, Any]], *, resamples: int = 100
    ) -> list[Candidate | None]:
        """``predict`` of each configuration in ``many``, those not predicted before side by
        side on the machine's cores (tuner/search/parallel.py)."""
        pairs = self.lengths()
        n_errors = self.errors().get("capacity", {}).get("n")  # the spread's evidence
        keys: list[tuple | None] = []
        todo: dict[tuple, tuple[dict[str, Any], BuildFit]] = {}
        for params in many:
            fit = self._nearest(params)
            if fit is None or not pairs:
                keys.append(None)
                continue
            key = (
                self.calibration.stamps.get(self._key(fit.build)),
                self.calibration.admit_per_seq_s,  # the run's, refitted with any build
                config_key(params),
                resamples,
                n_errors,
            )
            keys.append(key)
            if key not in self._cache:
                todo.setdefault(key, (params, fit))
        if todo and pairs:
            jobs = list(todo.values())
            self.workers = max(self.workers, usable(len(jobs)))
            found = map_forked(lambda job: self._predict(job[0], job[1], pairs, resamples), jobs)
            for key, (params, _), c in zip(todo, jobs, found, strict=True):
                self._cache[key] = c
                if c is not None:
                    self._screened.add(config_key(params))
        return [self._cache[k] if k is not None else None for k in keys]

    def _predict(
        self, params: dict[str, Any], fit: BuildFit, pairs: list[tuple[int, ...]], resamples: int
    ) -> Candidate | None:
        step, basis = self._step_for(params, fit)
        try:
            knobs = sim_knobs(params, self.space, self._kv_bytes(params))
            p = predict(
                step,
                knobs,
                self._draw(pairs),
                self.st.opts.slos,
                self.st.opts.max_error_rate,
                self.st.axis.kind,
                mean_lengths=mean_of(pairs),
                spread=self.spread(basis),
                basis=basis,
                seed=self.st.opts.seed,
                resamples=resamples,
                start=fit.load,
                resolution=SCREEN_RESOLUTION if resamples == 0 else RESOLUTION,
                horizon_s=SCREEN_HORIZON_S if resamples == 0 else HORIZON_S,
            )
        except (SimulationError, ValueError):
            return None
        own = basis in ("calibrated", "probe")
        return Candidate(params, p, p.basis, list(fit.trials) if own else [])

    def _step_for(self, params: dict[str, Any], fit: BuildFit) -> tuple[StepModel, Basis]:
        roof = roofline_of(self.st.diagnosis)
        return self.calibration.step_for(params, fit, roof, self.st.model_path or None)

    def _draw(self, pairs: list[tuple[int, ...]]) -> Lengths:
        return cycled(pairs)

    def _kv_bytes(self, params: dict[str, Any]) -> int | None:
        return kv_bytes_per_token(self.st.model_path, params.get("kv_cache_dtype"))

    # ------------------------------------------------------------ the choice
    def propose(
        self,
        stage: Stage,
        carried: dict[str, Any],
        tried: set[tuple],
        *,
        last: bool = False,
        first: bool = False,
    ) -> Candidate | None:
        """The stage's next configuration to measure, or None: nothing the model screened
        is expected to gain enough over the best measured configuration. ``last``: the stage's
        last trial, chosen for its surest gain; ``first``: its first, which takes a build the
        space seeds where one is worth a start (tuner/search/choice.py)."""
        sim = [k for k in stage.knobs if k.sim is not None and not k.sim_build]
        fits = self.fits()
        if not sim or not fits:
            return None
        best = self.st.best()
        found: list[dict[str, Any]] = []
        top: dict[str, dict[str, Any]] = {}  # per build: its best simulated-knob setting
        for key, fit in fits.items():
            where = (stage.name, key, config_key(carried))
            stamp = self.calibration.stamps.get(key)
            again = where in self._full and self._full[where][0] == stamp
            n, before = self.screen_trials, []
            if again:
                n, before = max(1, n // RESCREEN_SHARE), self._full[where][1]
            ranked = self._screen_build(stage, carried, fit.build, sim, n, before)
            if not again:
                self._full[where] = (stamp, [{k.name: r[k.name] for k in sim} for r in ranked])
            found += ranked
            if ranked:
                top[key] = {k.name: ranked[0][k.name] for k in sim}
        # A new build takes the simulated knobs the model found best for the build it is
        # nearest to (the best measured one's), so its first measurement is a good guess too.
        ref = self._key(best.params) if best is not None else next(iter(fits))
        sim_values = top.get(ref) or next(iter(top.values()), {})
        new = self._new_builds(stage, carried, sim_values, tried)
        found += new
        seeded = {config_key(p) for p in new if first and self._seeded(stage, carried, p)}
        # each predicted with the full horizon and the bootstrap, side by side
        predicted = self.predict_many([{**carried, **params} for params in found])
        cands = [
            Candidate(params, c.prediction, c.basis, c.build_trials)
            for params, c in zip(found, predicted, strict=True)
            if c is not None
        ]
        cands = [
            c
            for c in cands
            if config_key(c.params) not in tried and not self._refused(carried, c.params)
        ]
        # what a candidate's tuned figure must beat (its worst gain, under --objective robust)
        chosen = choose(
            cands,
            self.st.to_beat(best),
            self.st.opts.tie_band,
            last=last,
            prefer=(lambda c: config_key(c.params) in seeded) if seeded else None,
        )
        if chosen is None:
            return None
        self._chosen = ({**carried, **chosen.params}, chosen)
        return chosen

    def _screen_build(
        self,
        stage: Stage,
        carried: dict[str, Any],
        build: dict[str, Any],
        sim: list[Knob],
        n: int | None = None,
        before: list[dict[str, Any]] = (),  # type: ignore[assignment]
    ) -> list[dict[str, Any]]:
        """The best simulated-knob settings of one calibrated build (at most two; the stage's
        knobs, the build's among them), best first, from ``n`` candidates (default: the
        guide's ``screen_trials``); ``before``: settings an earlier screen found best, scored
        first."""
        base = _in_range([k for k in stage.knobs if k not in sim], {**carried, **build})

        def score(batch: list[dict[str, Any]]) -> list[float | None]:
            fulls = [{**carried, **base, **values} for values in batch]
            ok = [f for f in fulls if not self._refused(carried, f)]
            found = dict(zip(map(config_key, ok), self.predict_many(ok, resamples=0), strict=True))
            out: list[float | None] = []
            for f in fulls:
                c = found.get(config_key(f))
                out.append(None if c is None else self._others.worst(f, c.prediction.tokens_per_s))
            return out

        seeds = [*before, _in_range(sim, {**carried, **build})]
        if (best := self.st.best()) is not None:
            seeds.append(_in_range(sim, best.params))
        ranked = screen(
            sim, score, n_trials=n or self.screen_trials, seed=self.st.opts.seed, seeds=seeds
        )

        def room(values: dict[str, Any]) -> float:
            return self._room({**carried, **base, **values})

        return [{**base, **values} for values, _ in with_headroom(ranked, room)[:2]]

    def _room(self, params: dict[str, Any]) -> float:
        """The requests the engine can hold at once under ``params``: its batch limit, or
        what its KV cache holds of the run's mean request where that is less."""
        try:
            knobs = sim_knobs(params, self.space, self._kv_bytes(params))
        except ValueError:  # a space the model cannot simulate ranks nothing by room
            return 0.0
        pairs = self.lengths()
        if knobs.kv_blocks is None or not pairs:
            return float(knobs.max_num_seqs)
        n_in, n_out = mean_of(pairs)
        per_request = math.ceil((n_in + n_out) / knobs.block_size)
        return float(min(knobs.max_num_seqs, knobs.kv_blocks // max(per_request, 1)))

    def _new_builds(
        self, stage: Stage, carried: dict[str, Any], sim_values: dict[str, Any], tried: set[tuple]
    ) -> list[dict[str, Any]]:
        """Stage settings of builds not measured yet: the space's candidates' builds while any
        is left (each the best of a grid measured elsewhere: a stronger prior than a knob
        changed at random, which the model, transferring one build's step times to another,
        cannot rank), then the best build with one of the stage's build knobs changed. Either
        takes its simulated knobs at ``sim_values`` (the model's best for the build it is
        predicted with), not a candidate's own: predicted as well as the best calibrated
        setting, and less surely, a new build is measured before the calibrated ones (the
        README command on the Xeon measured a 508-sequence setting of the defaults' build
        first, since a candidate's own 128 sequences were predicted lower, and never reached
        the build with both cores, 1.5x faster)."""
        known = set(self.fits())
        best = self.st.best()
        base = _in_range(stage.knobs, best.params if best else carried) | sim_values
        # a candidate names some knobs; the others as the base has them (in range), so what is
        # measured is what was predicted
        sim = {k.name for k in stage.knobs if k.sim is not None and not k.sim_build}
        builds = [{k: v for k, v in c.items() if k not in sim} for c in stage.candidates]
        out = [
            base | c
            for c in builds
            if self._key({**carried, **c}) not in known and config_key(base | c) not in tried
        ]
        if out:
            return out
        for knob in stage.knobs:
            if knob.sim is not None and not knob.sim_build:
                continue
            if knob.type == "bool":
                values: list[Any] = [not base[knob.name]]
            elif knob.type == "categorical" and knob.choices:
                values = [v for v in knob.choices if v != base[knob.name]]
            else:
                continue
            for v in values:
                params = {**base, knob.name: v}
                if self._key({**carried, **params}) not in known:
                    out.append(params)
        return out

    def _seeded(self, stage: Stage, carried: dict[str, Any], params: dict[str, Any]) -> bool:
        """Whether ``params`` has the build of one of the stage's hand-seeded candidates (the
        candidate's values laid over it change no build knob)."""
        mine = self._key({**carried, **params})
        return any(self._key({**carried, **params, **c}) == mine for c in stage.candidates)

    def _refused(self, carried: dict[str, Any], params: dict[str, Any]) -> bool:
        return self.space.broken_rule({**carried, **params}, self.st.ctx) is not None

    # ------------------------------------------------------------ within a trial
    def aim(self, trial: TrialReport) -> float | None:
        """The capacity (a load) the model predicts for ``trial``, being measured, refitted on
        its build's points with the trial's own so far (None: too few records, or no
        capacity): where its capacity search goes next (tuner/scoring/capacity.py ``aim``). Every
        measurement recalibrates its build, within the trial too."""
        if not trial.points:
            return None
        pairs = calibration_lengths(self._records(trial, 0)) or self.lengths()
        step = self.calibration.refit_with(trial, self.st.measured())
        if step is None or not pairs:
            return None
        try:
            p = predict(
                step,
                sim_knobs(trial.params, self.space, self._kv_bytes(trial.params)),
                self._draw(pairs),
                self.st.opts.slos,
                self.st.opts.max_error_rate,
                self.st.axis.kind,
                mean_lengths=mean_of(pairs),
                seed=self.st.opts.seed,
                resamples=0,
                start=max(self.st.point_load(q) for q in trial.points),
            )
        except (SimulationError, ValueError):
            return None
        return p.load

    # ------------------------------------------------------------ the published error
    def report(self, c: Candidate) -> PredictedReport:
        p = c.prediction
        at = p.at_capacity
        return PredictedReport(
            basis=c.basis,
            build_trials=c.build_trials,
            load=p.load,
            load_low=p.load_low,
            load_high=p.load_high,
            tokens_per_s=p.tokens_per_s,
            low=p.low,
            high=p.high,
            ttft_ms_p99=at.ttft_ms_p99 if at else None,
            tpot_ms_p50=at.tpot_ms_p50 if at else None,
        )

    def before(self, params: dict[str, Any]) -> PredictedReport | None:
        """The prediction for a configuration about to be measured (None where none can be
        made yet: the run's first build)."""
        c = self._chosen[1] if self._chosen and self._chosen[0] == params else None
        c = c or self.predict(params)
        self._chosen = None
        if c is None:
            return None
        fit = self._nearest(params)
        self._pending = self._step_for(params, fit)[0] if fit is not None else None
        return self.report(c)

    def after(self, t: TrialReport) -> None:
        """Once ``t`` is measured: what its prediction's step model says a point like the one
        its measured figures come from would show (the same load and number of requests), so
        the two are compared like for like (``Simulator.like_point``)."""
        step, self._pending = self._pending, None
        pred = t.predicted
        if pred is None or step is None or t.metrics is None or not t.points:
            return
        ref = next((p for p in t.points if p.metrics == t.metrics), None)
        pairs = self.lengths()
        if ref is None or not pairs:
            return
        x = self.st.point_load(ref)
        try:
            knobs = sim_knobs(t.params, self.space, self._kv_bytes(t.params))
            sim = Simulator(
                step,
                knobs,
                self._draw(pairs),
                self.st.opts.slos,
                self.st.opts.max_error_rate,
                self.st.axis.kind,
                self.st.opts.seed,
            )
            ttft, tpot = sim.like_point(x, ref.metrics.n_requests)
        except (SimulationError, ValueError):
            return
        pred.at_load, pred.ttft_ms_p99_at_load, pred.tpot_ms_p50_at_load = x, ttft, tpot

    def errors(self) -> dict[str, dict[str, float]]:
        """The model's relative error per metric over the run's measured trials (median and
        worst of |predicted / measured - 1|, and how many trials)."""
        return model_errors(self.st.measured())

    def label(self, params: dict[str, Any]) -> str:
        return build_label(build_of(params, self.space), self.space)


def _in_range(knobs: list[Knob], params: dict[str, Any]) -> dict[str, Any]:
    """``params``' values of ``knobs``, each brought into the knob's searched range (an
    engine default may lie outside it), or the knob's default where it has none."""
    out: dict[str, Any] = {}
    for k in knobs:
        v = params.get(k.name, k.default)
        if k.type in ("int", "float") and k.low is not None and k.high is not None:
            v = min(max(v if v is not None else k.low, k.low), k.high)
            v = int(v) if k.type == "int" else float(v)
        elif k.choices is not None and v not in k.choices:
            v = k.choices[0]
        out[k.name] = v
    return out
