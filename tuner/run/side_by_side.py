"""Too close to call: the best configuration started again beside a new one, both measured.

When each estimate is inside the other's interval (tuner/scoring/compare.py's ``too_close``), the
best
configuration is started again from its launch command next to the new trial's running engine,
and both are measured at their capacities, interleaved with fresh salts (``side_by_side``).
Both are then scored from all their points, and the comparison goes into the report.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from tuner.engines.base import EngineDied, EngineStartError, RunningServer, raise_if_died
from tuner.report.schema import TrialReport
from tuner.run import sizing
from tuner.run.state import RunState
from tuner.scoring.compare import side_by_side, too_close, verdict

if TYPE_CHECKING:
    from tuner.run.trial import Evaluator


def repeat(
    st: RunState, ev: Evaluator, server: RunningServer, trial: TrialReport, best: TrialReport
) -> None:
    """Measure ``trial`` (on ``server``) and ``best`` (started again) side by side, where they
    are too close to call and the budget has room; both are rescored."""
    a, b = best.estimate, trial.estimate
    if not (st.opts.side_by_side and st.launches and a is not None and b is not None):
        return
    if st.shared is not None:  # the best may have run on another worker's device
        return
    if not too_close(a, b, st.opts.tie_band):
        return
    loads = sorted({st.axis.floor(x) for x in (st.load_of(best), st.load_of(trial)) if x})
    rounds = 1
    if len(loads) == 2 and loads[1] <= loads[0] * 1.05:
        loads, rounds = loads[:1], 2  # one load, measured twice each (A-B-B-A)
    rps = trial.metrics.requests_per_s if trial.metrics else 1.0
    point_s = sum(sizing.n_search(st, x, trial) for x in loads) * 2 * rounds / max(rps, 1e-3)
    need = (best.startup_s or 60.0) + (best.warmup_s or 20.0) + point_s
    if not (st.budget.fits(need, sizing.end_reserve_s(st)) and st.budget.trial_fits(need)):
        # (the budget, or the trial's share of it: tuner/run/share.py)
        st.notes.append(
            f"trials {best.number} and {trial.number} are within each other's intervals; "
            "the time budget left no room to measure them side by side"
        )
        return
    st.say(
        f"trial {trial.number} ({b.tokens_per_s:.0f} tok/s) and trial {best.number} "
        f"({a.tokens_per_s:.0f}) are too close to call: measuring both again side by side"
    )
    assert st.measurer is not None
    log = st.trial_dir(best.number) / f"server-beside-{trial.number:03d}.log"
    labels = (f"trial {best.number} (side by side)", f"trial {trial.number} (side by side)")
    try:
        with ev.target.server(ev.target.relaunch(best), log) as other:
            st.measurer.warmup(other, loads[0], st.model_path)
            run = side_by_side(
                {
                    "a": lambda x: ev.point(
                        other, best, x, sizing.n_search(st, x, best), labels[0], True
                    ),
                    "b": lambda x: ev.point(
                        server, trial, x, sizing.n_search(st, x, trial), labels[1], True
                    ),
                },
                loads,
                rounds=rounds,
                should_stop=partial(sizing.points_time_left, st, trial),
            )
    except EngineStartError as exc:
        raise_if_died(server, "during a side-by-side repeat")  # this trial's own engine
        what = "died" if isinstance(exc, EngineDied) else "failed to start"
        st.notes.append(f"side by side with trial {best.number}: it {what}: {exc}")
        return
    after = (ev.rescore(best, "side by side"), ev.rescore(trial, "side by side"))
    report = verdict((best.number, trial.number), loads, run, (a, b), after)
    st.comparisons.append(report)
    if report.winner == trial.number:
        ev.gates.keep_reference(server, trial)
    ev.save(best)
    st.say(f"side by side: trial {report.winner} goes on; {report.note}")
