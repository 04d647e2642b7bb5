"""One search stage with Optuna: the only module that imports optuna.

The outer loop owns execution (Optuna's ask/tell): each configuration is handed to an
``evaluate(params) -> Outcome`` callable, which starts the engine, measures and stops it. The
stage knows nothing of engines or probes. The objective is the configuration's score (output
tokens/s at the highest load meeting every SLO); the SLOs enter as constraints, with Optuna's
sign rule (<= 0 is feasible), set on each trial with ``Trial.set_constraint`` (Optuna 5).

- Known results (the baseline, previous stages) are added to the study as finished trials, so the
  sampler learns from them without a restart.
- Candidates from the search-space file are enqueued before the sampler takes over.
- A configuration the sampler proposes again is not restarted: it gets the earlier result.
- A configuration that failed (it did not start, it died under load) is a finished trial with
  score 0 whose constraint is violated, as is an infeasible one, so the sampler learns to avoid
  the region (Optuna ignores FAIL trials); an abandoned one is a PRUNED trial. None crashes the
  stage.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.storages import BaseStorage, JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from tuner.spaces.knob import Knob
from tuner.spaces.space import Stage, is_active
from tuner.storage.shared import fail_stale, heartbeat

optuna.logging.set_verbosity(logging.WARNING)


@dataclass
class Outcome:
    """What one configuration measured, as the search sees it."""

    status: str  # ok | infeasible | failed | pruned
    score: float = 0.0  # output tokens/s under the SLOs (0 when nothing held)
    constraint: float = 1.0  # worst margin at the best load found; <= 0 feasible
    ref: Any = None  # the caller's own record of the trial
    attrs: dict[str, Any] = field(default_factory=dict)  # kept on the Optuna trial (estimate)


@dataclass
class StageResult:
    name: str
    outcomes: list[tuple[dict[str, Any], Outcome]] = field(default_factory=list)
    started: int = 0  # configurations actually started
    stopped_because: str = ""
    refused: list[tuple[dict[str, Any], str]] = field(default_factory=list)  # broke a rule

    def best(self) -> tuple[dict[str, Any], Outcome] | None:
        ok = [(p, o) for p, o in self.outcomes if o.status == "ok"]
        return max(ok, key=lambda po: po[1].score) if ok else None


def distribution(knob: Knob) -> BaseDistribution:
    if knob.type == "int":
        assert knob.low is not None and knob.high is not None
        return IntDistribution(int(knob.low), int(knob.high), log=knob.log, step=knob.step or 1)
    if knob.type == "float":
        assert knob.low is not None and knob.high is not None
        return FloatDistribution(knob.low, knob.high, log=knob.log)
    if knob.type == "bool":
        return CategoricalDistribution([False, True])
    assert knob.choices is not None
    return CategoricalDistribution(knob.choices)


CONSTRAINT = "slo_margin"


def _finite(x: float) -> float:
    # Optuna refuses NaN; an unmeasurable margin (nothing completed) is simply very infeasible.
    return 1e6 if not math.isfinite(x) else x


def open_study(storage: Path | BaseStorage, name: str, seed: int) -> tuple[optuna.Study, bool]:
    """The stage's study (a journal file in the run folder, or a shared storage), and whether
    this call created it: only its creator adds the known trials and the candidates, since in
    a shared study another worker may have done so already."""
    if isinstance(storage, Path):
        storage = JournalStorage(JournalFileBackend(str(storage)))
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=3, multivariate=True)
    try:
        study = optuna.create_study(
            study_name=name, storage=storage, sampler=sampler, direction="maximize"
        )
        return study, True
    except optuna.exceptions.DuplicatedStudyError:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler), False


class Slot(Protocol):
    """One of a shared stage's trial budget, held while a configuration is measured."""

    def hold(self, trial: optuna.Trial) -> None: ...
    def done(self) -> None: ...
    def release(self) -> None: ...


def _tell(study: optuna.Study, trial: optuna.Trial, outcome: Outcome) -> None:
    trial.set_constraint(CONSTRAINT, _finite(outcome.constraint))
    trial.set_user_attr("constraint", _finite(outcome.constraint))  # read by other workers
    trial.set_user_attr("status", outcome.status)
    for key, value in outcome.attrs.items():
        trial.set_user_attr(key, value)
    if outcome.status == "pruned":
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, outcome.score)


def run_stage(
    stage: Stage,
    evaluate: Callable[[dict[str, Any]], Outcome],
    *,
    storage: Path | BaseStorage,
    n_trials: int,
    seed: int,
    study_name: str | None = None,
    known: list[tuple[dict[str, Any], Outcome]] = (),  # type: ignore[assignment]
    should_stop: Callable[[], str | None] = lambda: None,
    refuse: Callable[[dict[str, Any]], str | None] = lambda p: None,
    claim: Callable[[], Slot | None] | None = None,
    propose: Callable[[set[tuple]], dict[str, Any] | str | None] | None = None,
    max_repeats: int = 4,
    max_refusals: int = 25,
) -> StageResult:
    """Search one stage's knobs for up to ``n_trials`` new configurations.

    Args:
        evaluate: measures one configuration of this stage's knobs (the caller merges in what
            earlier stages fixed).
        storage: the run folder's journal file, or a storage several workers share
            (tuner/storage/shared.py), where ``study_name`` names the stage's study.
        known: results the sampler should learn from (the baseline, as this stage's knobs).
        should_stop: a reason to stop before the next configuration (time budget), or None.
        refuse: why the engine would refuse a configuration at start-up (the space's rules),
            or None; a refused one is told to Optuna as failed and never started.
        claim: in a shared study, one of the stage's trials across all workers (None: none
            left); a configuration is started only with one held.
        propose: the serving model's choice (tuner/search/guide.py): given the keys of the
            configurations tried so far, the next one to measure (enqueued, so Optuna records
            it as its own trial), or why none is worth a start (the stage stops), or None: the
            sampler's own. With it, the space's candidates are the guide's to rank, not
            enqueued first.
    """
    dists = {k.name: distribution(k) for k in stage.knobs}
    study, created = open_study(storage, study_name or stage.name, seed)
    result = StageResult(stage.name)
    knobs = {k.name: k for k in stage.knobs}
    for params, outcome in known:
        active = {k.name for k in stage.active(params)}
        if set(params) != active or not _valid(knobs, params):
            continue
        if created:
            study.add_trial(
                optuna.trial.create_trial(
                    params=params,
                    distributions={n: dists[n] for n in params},
                    value=outcome.score,
                    constraints={CONSTRAINT: _finite(outcome.constraint)},
                    user_attrs={**outcome.attrs, "status": "known"},
                )
            )
        result.outcomes.append((params, outcome))
    if created and propose is None:
        for cand in stage.candidates:
            study.enqueue_trial(cand, skip_if_exists=True)

    seen: dict[tuple, Outcome] = {config_key(p): o for p, o in result.outcomes}
    repeats = 0
    slot: Slot | None = None
    while result.started < n_trials:
        if why := should_stop():
            result.stopped_because = why
            break
        fail_stale(study)  # a shared study: a dead worker's trial goes back in the queue
        if claim is not None and slot is None and (slot := claim()) is None:
            result.stopped_because = "every trial of the stage is taken (the workers share them)"
            break
        if propose is not None:
            nxt = propose(set(seen))
            if isinstance(nxt, str):
                result.stopped_because = nxt
                if slot is not None:
                    slot.release()
                    slot = None
                break
            if nxt is not None:
                study.enqueue_trial(nxt)
        trial = study.ask()
        if slot is not None:
            slot.hold(trial)
        params = _sample(trial, stage, dists)
        key = config_key(params)
        if key not in seen and (other := _measured_elsewhere(study, trial, params)) is not None:
            seen[key] = other  # another worker's measurement, or one still running
        if key in seen:
            # Proposed again: reuse the measurement instead of restarting the engine.
            _tell(study, trial, seen[key])
            repeats += 1
            if repeats >= max_repeats:
                result.stopped_because = "the sampler kept proposing measured configurations"
                break
            continue
        if why := refuse(params):
            result.refused.append((params, why))
            attrs = {"autotune_status": "refused", "reason": f"the engine would refuse it: {why}"}
            outcome = Outcome("failed", 0.0, 1.0, None, attrs=attrs)
            seen[key] = outcome
            _tell(study, trial, outcome)
            if len(result.refused) >= max_refusals:
                result.stopped_because = (
                    "the sampler kept proposing configurations the engine refuses"
                )
                break
            continue
        repeats = 0
        result.started += 1
        with heartbeat(study, trial):  # a worker killed mid-trial goes stale, and is retried
            outcome = evaluate(params)
        seen[key] = outcome
        result.outcomes.append((params, outcome))
        _tell(study, trial, outcome)
        if slot is not None:
            slot.done()
            slot = None
    else:
        result.stopped_because = f"trial budget reached ({n_trials})"
    if slot is not None:
        slot.release()
    return result


def _measured_elsewhere(
    study: optuna.Study, trial: optuna.Trial, params: dict[str, Any]
) -> Outcome | None:
    """Another worker's finished measurement of these parameters, or, while one is still
    measuring them, a stand-in (told to Optuna as pruned): no configuration is measured
    twice. None where no other trial has them."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
        if t.number == trial.number or t.params != params:
            continue
        if t.state == TrialState.RUNNING:
            return Outcome("pruned", 0.0, 1.0, None, attrs={"duplicate_of": t.number})
        if t.value is not None:
            status = str(t.user_attrs.get("status", "ok"))
            return Outcome(
                "ok" if status == "known" else status, float(t.value),
                float(t.user_attrs.get("constraint", 1.0)), None, attrs={"same_as": t.number},
            )  # fmt: skip
    return None


def _sample(trial: optuna.Trial, stage: Stage, dists: dict[str, BaseDistribution]) -> dict:
    """Define-by-run: each knob is sampled only where its ``when`` condition holds."""
    return _sample_knobs(trial, stage.knobs, dists)


def _sample_knobs(
    trial: optuna.Trial, knobs: list[Knob], dists: dict[str, BaseDistribution]
) -> dict[str, Any]:
    """Each of ``knobs`` sampled where its ``when`` condition holds (on the values so far)."""
    params: dict[str, Any] = {}
    for knob in knobs:
        if not is_active(knob, params):
            continue
        d = dists[knob.name]
        if isinstance(d, IntDistribution):
            params[knob.name] = trial.suggest_int(knob.name, d.low, d.high, step=d.step, log=d.log)
        elif isinstance(d, FloatDistribution):
            params[knob.name] = trial.suggest_float(knob.name, d.low, d.high, log=d.log)
        else:
            assert isinstance(d, CategoricalDistribution)
            params[knob.name] = trial.suggest_categorical(knob.name, d.choices)
    return params


def _valid(knobs: dict[str, Knob], params: dict[str, Any]) -> bool:
    try:
        for name, value in params.items():
            knobs[name].validate_value(value)
    except ValueError:
        return False
    return True


def config_key(params: dict[str, Any]) -> tuple:
    """A configuration's identity: its knob values, order aside."""
    return tuple(sorted((k, repr(v)) for k, v in params.items()))
