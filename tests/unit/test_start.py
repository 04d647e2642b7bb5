"""tuner/run/start.py: where a capacity search starts. The baseline's search starts at the
probe's prediction alone, which has run high on every box measured, and steps down from there
to a load that brackets the capacity within the search's resolution in two points."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.run_state import run_state
from tests.unit.test_capacity import queueing_system
from tests.unit.test_sizing import _trial
from tuner.report.schema import PredictedReport
from tuner.run import start
from tuner.scoring.capacity import RESOLUTION, find_capacity


def _predicted(basis: str, load: float) -> PredictedReport:
    return PredictedReport(
        basis=basis, build_trials=[], load=load, tokens_per_s=64.0 * load, low=0.0, high=1e4
    )


def test_a_probe_only_prediction_is_started_at_and_a_calibrated_one_just_above(
    tmp_path: Path,
) -> None:
    st = run_state(tmp_path)
    probe = _predicted("probe", 4.24)
    assert start.start_load(st, None, probe) == 4.24
    calibrated = _predicted("calibrated", 4.24)
    assert start.start_load(st, None, calibrated) == st.axis.floor(4.24 * start.PREDICTED_ABOVE)
    for p in (probe, calibrated):  # a failure at either start steps down a little
        trial = _trial(0, 50.0, 4.0)
        trial.predicted = p
        assert start.at_prediction(st, trial, start.start_load(st, None, p))


# The baseline of the README command: the probe's prediction, the capacity its search then
# measured, and the model refitted on its first point (which broke), in requests/s. AMD box,
# 2026-12-07 02:40, 03:02, 07:09, 08:20; 2-core Xeon, 2026-12-06 00:12.
BASELINES = [
    (4.05, 3.72, 3.96),
    (3.65, 3.51, 3.61),
    (3.73, 3.54, 3.69),
    (4.24, 3.98, 3.99),
    (8.64, 7.6, 7.87),
]


@pytest.mark.parametrize(("predicted", "capacity", "refit"), BASELINES)
def test_the_baselines_search_brackets_its_capacity_in_two_points(
    tmp_path: Path, predicted: float, capacity: float, refit: float
) -> None:
    """From 6 % above the prediction, the 02:40 run broke 15 % over its capacity, stepped
    down to just under the refit, broke again and took a third point; the 00:12 run held 3 %
    under its capacity and refined it; the 08:20 run held 6 % under and refined. At the
    prediction, with the step down going no further under the failure than the resolution
    asks, each brackets its capacity in two."""
    st = run_state(tmp_path)
    trial = _trial(0, 50.0, capacity)
    trial.predicted = _predicted("probe", predicted)
    x = start.start_load(st, None, trial.predicted)
    res = find_capacity(
        queueing_system(capacity),
        start=x,
        axis=st.axis,
        max_points=7,
        descend=start.PREDICTED_DESCEND if start.at_prediction(st, trial, x) else 0.5,
        aim=lambda: refit,
    )
    assert [p.holds for p in res.points] == [False, True]
    assert res.best is not None and res.best.load <= capacity
    assert res.points[0].load <= RESOLUTION * res.best.load
