"""The stage plan and the staged search: the baseline, then each stage from the last winner.

``plan`` reads the stage order, names and kinds from the search space (a new stage of a known
kind is a change to the space file only) and shares ``--trials`` between the stages by the
probe's verdict per kind. ``search`` measures the baseline, then runs each planned stage as an
Optuna search (tuner/search/study.py) starting from the configuration carried in, and writes the
stage reports. What Optuna is told of a trial (``outcome``) is decided here.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from tuner.report.schema import ContrastReport, StageReport, TrialReport
from tuner.run import sizing, worker
from tuner.run.guided_stage import GuidedStage
from tuner.run.state import RunState
from tuner.run.trial import Evaluator
from tuner.scoring.gain import gain
from tuner.search.guide import Guide
from tuner.search.study import Outcome, StageResult, run_stage
from tuner.spaces.space import STAGE_ORDER, Stage

if TYPE_CHECKING:
    from tuner.storage.shared import SharedStudy

PlanRow = tuple[str, int | None, str, str | None]  # name, trials (None: skipped), why, expected

# How the trials are shared between the stages, by stage kind and by what the probe expects of
# it (probes/verdict.py): batching, where the capacity is set, gets the most either way; a
# stage not expected to pay off still gets a share, so the prediction is checked by
# measurement. Relative weights: ``plan`` divides by their sum over the stages run.
STAGE_WEIGHTS: dict[str, dict[str, float]] = {
    "batching": {"likely": 0.6, "unknown": 0.6, "unlikely": 0.3},
    "quantisation": {"likely": 0.25, "unknown": 0.1, "unlikely": 0.1},
    "speculative": {"likely": 0.15, "unknown": 0.1, "unlikely": 0.1},
}


def stage_weight(kind: str, expected: str | None) -> float:
    """A stage's relative share of the trials (1.0 without a probe verdict)."""
    if expected is None:
        return 1.0
    return STAGE_WEIGHTS.get(kind, {}).get(expected, 0.1)


def plan(st: RunState) -> list[PlanRow]:
    """Per stage in the space's order: (name, trials or None if skipped, reason, expected).

    The probe's verdict (per stage kind) weighs the budget (``STAGE_WEIGHTS``); a stage it does
    not expect to pay off still gets at least one trial, so the prediction is checked by
    measurement. A kind the
    search space has no stage of, or a stage --stages leaves out, is skipped with its reason.
    """
    space = st.space
    assert space is not None
    if not st.launches:
        why = "endpoint: the server's settings are not tuned (autotune did not start it)"
        return [(name, None, why, None) for name in STAGE_ORDER]
    verdict = {p.name: p for p in st.diagnosis.verdict.stages} if st.diagnosis else {}
    rows: list[tuple[str, float | None, str, str | None]] = []
    for kind in STAGE_ORDER:
        v = verdict.get(kind)
        expected = v.expected if v else None
        why = f"probe: {v.expected} to pay off: {v.reason}" if v else "no probe verdict"
        stages = space.of_kind(kind)
        if not stages:
            none = f"the search space ({space.engine}, {space.device}) has no {kind} knobs"
            rows.append((kind, None, f"{none}; {why}", expected))
        for stage in stages:
            if not st.selected(stage):
                rows.append((stage.name, None, f"left out by --stages; {why}", expected))
            else:
                rows.append((stage.name, stage_weight(kind, expected), why, expected))
    run = [(n, w) for n, w, _, _ in rows if w is not None]
    total_w = sum(w for _, w in run) or 1.0
    trials = st.opts.trials
    left = trials
    alloc: dict[str, int] = {}
    for i, (name, w) in enumerate(run):
        later = len(run) - i - 1  # keep one trial for each later stage where possible
        share = round(trials * w / total_w)
        n = max(1, min(share, left - later)) if left > 0 else 0
        alloc[name] = n
        left -= n
    if run and left > 0:
        alloc[run[0][0]] += left  # rounding leftovers go to the first stage run
    return [
        (name, alloc.get(name) if w is not None else None, why, exp) for name, w, why, exp in rows
    ]


def search(st: RunState, ev: Evaluator) -> None:
    """The baseline, then the planned stages in order (see the module docstring)."""
    space = st.space
    assert space is not None
    shared = st.shared
    # The serving model chooses what a stage with simulated knobs measures (not in a shared
    # study, whose workers each sample on their own), and predicts every trial it can: the
    # baseline too, from the probe's sweeps on its server.
    simulated = any(k.sim is not None for k in space.knobs().values())
    guide = (
        GuidedStage(st, Guide(st))
        if simulated and st.opts.serving_model and st.launches and shared is None
        else None
    )
    if guide is not None:
        ev.predict_first = guide.before
        ev.aim = guide.aim
    if shared is None:
        st.baseline = ev.evaluate(0, "baseline", {})
        if guide is not None:
            guide.after(st.baseline)
    else:

        def measure_baseline() -> worker.Doc:
            st.baseline = ev.evaluate(0, "baseline", {})
            return worker.baseline_doc(st, st.baseline)

        doc, mine = shared.once("baseline", measure_baseline, "the baseline")
        if not mine:
            worker.take_baseline(st, doc)
            st.say("baseline: as measured by another worker of the shared study")
    if space.common.reason:
        st.notes.append(space.common.reason)
    carried: dict[str, Any] = {}
    spare = 0  # trials a stage did not use pass on to the next
    number = 1
    rows = plan(st)
    for i_stage, (name, planned, why, expected) in enumerate(rows):
        stage = space.stage(name)
        if planned is None or stage is None or planned + spare <= 0:
            reason = why if planned is None else f"no trials left in --trials; {why}"
            skipped = StageReport(
                name=name, status="skipped", reason=reason, expected=expected, trials=[],
                best_params=None, best_score=None, gain=None,
            )  # fmt: skip
            st.stage_reports.append(skipped)
            st.say(f"stage {name} skipped: {reason}")
            continue
        n_trials = planned + spare
        before = st.best()
        score_before = before.score_tokens_per_s if before else None
        if stage.stage_kind == "speculative":
            # Speculative configurations are checked against the one they start from.
            st.exactness.reference = before.number if before else None
        sizing.open_stage(st, n_trials, sum(p or 0 for _, p, _, _ in rows[i_stage + 1 :]))
        known: list[tuple[dict[str, Any], Outcome]] = []
        stage_defaults = stage.defaults()
        if before is not None and None not in stage_defaults.values():
            # The configuration carried in is this stage's defaults: already measured.
            known.append((stage_defaults, outcome(before, st.value(before))))
        numbers: list[int] = []

        def evaluate(
            params: dict[str, Any],
            stage_name: str = name,
            numbers: list[int] = numbers,
            carried: dict[str, Any] = carried,
        ) -> Outcome:
            nonlocal number
            if shared is None:
                n, handle = number, None
                number += 1
            else:  # a number unique across the workers, and their trials so far
                worker.take_trials(st, shared.records())
                n, handle = shared.begin()
            st.doing.stage_started = len(numbers) + 1
            full = {**carried, **params}
            predicted = guide.before(full, n) if guide is not None else None
            t = ev.evaluate(n, stage_name, full, predicted)
            if guide is not None:
                guide.after(t)
            st.trials.append(t)
            numbers.append(n)
            unranked = st.by_worst_gain and t.status == "ok" and t.worst_gain is None
            told = outcome(t, None if unranked else st.value(t))
            if unranked:  # not measured on every workload: not a zero, a trial cut short
                told = Outcome("pruned", 0.0, 1.0, t, attrs=told.attrs)
            t.told_tokens_per_s = told.score if told.status == "ok" else None
            if shared is not None and handle is not None:
                shared.publish(handle, worker.trial_doc(st, t))
            return told

        st.say(f"stage {name}: up to {n_trials} configurations ({why})")
        st.doing.stage, st.doing.stage_trials, st.doing.stage_started = name, n_trials, 0
        st.doing.later_trials = sum(p or 0 for _, p, _, _ in rows[i_stage + 1 :])
        measure_stage = partial(
            run_stage,
            stage,
            evaluate,
            storage=shared.storage if shared else st.out / "optuna.journal",
            study_name=shared.study_name(name) if shared else None,
            # Each worker samples with a seed of its own: the same seed would propose the
            # same configurations to every worker.
            seed=st.opts.seed if shared is None else st.rng.getrandbits(31),
            known=known,
            should_stop=partial(sizing.time_left_reason, st, started=numbers),
            refuse=partial(_refuse, st, dict(carried)),
            claim=shared.slots(name, n_trials) if shared else None,
            propose=partial(
                guide.propose,
                stage,
                dict(carried),
                last=partial(sizing.last_of_stage, st, numbers, n_trials),
                started=numbers,
            )
            if guide is not None and any(k.sim and not k.sim_build for k in stage.knobs)
            else None,
        )
        result: StageResult = measure_stage(n_trials=n_trials)
        if shared is not None:
            result = _settle(st, shared, name, result, numbers, measure_stage)
        spare = n_trials - result.started
        if before is not None:  # its current record (a resume restores new objects)
            before = next(t for t in st.measured() if t.number == before.number)
        # What goes on is the best configuration by its current estimate (a side-by-side repeat
        # may have changed the order since Optuna was told its score).
        best_trial = st.best()
        if best_trial is not None:
            carried = dict(best_trial.params)
        carried_in = (before, score_before)
        report = _stage_report(st, stage, result, numbers, carried_in, best_trial, why, expected)
        st.stage_reports.append(report)
        st.say(
            f"stage {name} done: {result.started} configurations, stopped: {result.stopped_because}"
        )


def _settle(
    st: RunState,
    shared: SharedStudy,
    name: str,
    result: StageResult,
    numbers: list[int],
    measure_stage: Callable[..., StageResult],
) -> StageResult:
    """A shared stage ends when no worker measures any of its trials: a dead worker's trial is
    taken over here while this worker's budget allows. Its result is then every worker's."""

    def take_retry() -> bool:
        if sizing.time_left_reason(st) is not None:
            return False
        more = measure_stage(n_trials=1)
        result.refused += more.refused
        return more.started > 0

    shared.settle(name, take_retry)
    worker.take_trials(st, shared.records())
    numbers[:] = [t.number for t in st.trials if t.stage == name]
    why = result.stopped_because or "the stage's trials are done"
    return StageResult(
        name,
        started=len(numbers),
        stopped_because=f"{why} (across the shared study's workers)",
        refused=result.refused,
    )


def _stage_report(
    st: RunState,
    stage: Stage,
    result: StageResult,
    numbers: list[int],
    carried_in: tuple[TrialReport | None, float | None],
    best: TrialReport | None,
    why: str,
    expected: str | None,
) -> StageReport:
    before, score_before = carried_in
    refused = ""
    if result.refused:
        refused = (
            f"; {len(result.refused)} sampled configurations were not started: the engine "
            f"refuses them (first: {result.refused[0][1]})"
        )
    ratio = gain(best.score_tokens_per_s, score_before) if best else None
    return StageReport(
        name=stage.name,
        status="run",
        expected=expected,
        reason=f"{result.started} configurations; stopped: {result.stopped_because}"
        f"{refused}; {why}",
        trials=numbers,
        best_params=best.params if best else None,
        best_score=best.score_tokens_per_s if best else None,
        best_trial=best.number if best else None,
        gain=ratio,
        contrast=_contrast(st, stage, numbers, before),
        # Without a trial of its own, the stage checked no prediction.
        prediction_held=prediction_held(expected, ratio) if numbers else None,
    )


def _refuse(st: RunState, carried: dict[str, Any], params: dict[str, Any]) -> str | None:
    """Why the engine would refuse this configuration at start-up (the space's rules)."""
    assert st.space is not None
    return st.space.broken_rule({**carried, **params}, st.ctx)


def _contrast(
    st: RunState, stage: Stage, numbers: list[int], before: TrialReport | None
) -> ContrastReport | None:
    """The stage's own figure (``contrast`` in its space): best score with the knob on over the
    best with it off, among this stage's trials and the configuration carried in."""
    c = stage.contrast
    if c is None:
        return None
    default = next(k.default for k in stage.knobs if k.name == c.knob)
    pool = [t for t in st.trials if t.number in numbers]
    if before is not None:
        pool.append(before)
    ok = [t for t in pool if t.status == "ok" and not t.rejected]

    def top(on: bool) -> TrialReport | None:
        side = [t for t in ok if (t.params.get(c.knob, default) == c.on) == on]
        return max(side, key=lambda t: t.score_tokens_per_s or 0.0) if side else None

    hi, lo = top(True), top(False)
    hs = hi.score_tokens_per_s if hi else None
    ls = lo.score_tokens_per_s if lo else None
    report = ContrastReport(
        label=c.label,
        knob=c.knob,
        factor=hs / ls if hs and ls else None,
        on_score=hs,
        off_score=ls,
        on_trial=hi.number if hi else None,
        off_trial=lo.number if lo else None,
    )
    if report.factor is not None:
        st.say(f"stage {stage.name}: {c.label} {report.factor:.2f}x ({hs:.0f} / {ls:.0f})")
    return report


def outcome(t: TrialReport, value: float | None = None) -> Outcome:
    """What Optuna is told: a score (``value`` where given: what ranks it,
    ``RunState.value``), or a trial that violates its constraints (failed and infeasible
    configurations included, so the sampler learns to avoid the region). Every
    trial carries autotune's trial number, its status and why (user attributes, which
    optuna-dashboard shows)."""
    attrs: dict[str, Any] = {
        "autotune_trial": t.number,
        "autotune_status": t.status,
        "reason": t.rejected or t.error or "",
    }
    if t.quality is not None and not t.quality.holds:
        # over the quality limit: load-tested, or refused before its points under a time
        # budget (tuner/run/gate_steps.py ``refused_unmeasured``); the sampler learns the margin
        return Outcome("infeasible", 0.0, max(t.quality.margin, 1e-6), t, attrs=attrs)
    if t.status == "ok" and t.rejected:
        return Outcome("infeasible", 0.0, 1.0, t, attrs=attrs)
    if t.status == "ok":
        held = [p.verdict.worst_margin for p in t.points if p.verdict.holds]
        if (e := t.estimate) is not None:
            attrs |= {
                "capacity_load": e.load,
                "tokens_per_s_low": e.low,
                "tokens_per_s_high": e.high,
                "censored": e.censored,
                "points": e.n_points,
            }
        if t.worst_gain is not None:
            attrs["worst_gain"] = t.worst_gain
        score = t.score_tokens_per_s if value is None else value
        return Outcome("ok", score or 0.0, min(held, default=0.0), t, attrs=attrs)
    if t.status == "infeasible":
        m = min((p.verdict.worst_margin for p in t.points), default=1.0)
        return Outcome("infeasible", 0.0, max(m, 1e-6), t, attrs=attrs)
    if t.status in ("abandoned", "no_effect"):
        return Outcome("pruned", 0.0, 1.0, t, attrs=attrs)
    return Outcome("failed", 0.0, 1.0, t, attrs=attrs)


def prediction_held(expected: str | None, gain: float | None) -> bool | None:
    """Whether the probe's prediction for a stage matched its measured gain (5 % threshold)."""
    if gain is None or expected not in ("likely", "unlikely"):
        return None
    return (gain > 1.05) == (expected == "likely")
