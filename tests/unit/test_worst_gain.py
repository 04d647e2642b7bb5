"""tuner/search/worst_gain.py: under ``--objective robust`` the serving model's screen scores a
setting by its worst gain, its prediction on each other workload taken over the baseline's
prediction there (scripted records, no engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.metrics import Verdict
from probes.workload import parse_workload
from tests.unit.test_guide import TRUE, _baseline, _metrics, _state
from tuner.report.schema import AcrossReport, PointReport, TrialReport, dump_json
from tuner.run import objective
from tuner.run.state import RunState
from tuner.search.guide import Guide
from tuner.servemodel.load import cycled, poisson
from tuner.servemodel.scheduler import Knobs, simulate
from tuner.storage.records import write_records

LONG = "synthetic:input=1024,output=32"


def _robust(tmp_path: Path) -> tuple[RunState, TrialReport]:
    """A robust run's baseline, measured on the tuned workload and on long prompts."""
    st = _state(tmp_path)
    st.opts = st.opts.model_copy(
        update={"objective": "robust", "check_workloads": [parse_workload(LONG)]}
    )
    base = _baseline(st, 600.0)
    n = objective.number(0, 0)
    recs = simulate(poisson(1.0, 120, cycled([(1024, 32)]), seed=3), Knobs(128, 2048), TRUE)
    f = st.trial_dir(n) / "r1.0-0.jsonl"
    f.parent.mkdir(parents=True)
    write_records(f, recs)
    v = Verdict(holds=True, provisional=True, worst_margin=-0.5, checks=[])
    point = PointReport(
        load={"rate_rps": 1.0}, metrics=_metrics(recs), verdict=v, records_file=str(f)
    )
    sub = TrialReport(
        number=n, stage="across", params={}, args=[], env={}, launch_command=[],
        status="ok", score_tokens_per_s=30.0, points=[point],
    )  # fmt: skip
    (st.trial_dir(n) / "trial.json").write_bytes(dump_json(sub))
    base.across = [AcrossReport(workload=LONG, number=n, status="ok", score_tokens_per_s=30.0)]
    objective.settle(st)
    return st, base


def test_the_screen_scores_a_setting_by_its_worst_predicted_gain(tmp_path: Path) -> None:
    st, base = _robust(tmp_path)
    assert st.by_worst_gain and base.worst_gain == 1.0
    g = Guide(st, screen_trials=8)
    wg = g._others
    assert wg.lengths_on(0) == [(1024, 32, 0)] * 120  # the baseline's requests there
    on_base = wg.predict_on(0, base.params)
    assert on_base is not None and on_base > 0
    # a token budget too small for those prompts' prefill: the same tuned figure, less there
    small = {"max_num_batched_tokens": 256}
    on_small = wg.predict_on(0, small)
    assert on_small is not None and on_small < on_base
    twice = 2 * 600.0
    assert wg.worst(small, twice) == pytest.approx(600.0 * min(2.0, on_small / on_base))
    assert wg.worst(small, twice) < twice
    # the baseline's own setting gains nothing there: a tuned gain of 1.1 is capped at 1
    assert wg.worst({}, 660.0) == pytest.approx(600.0)


def test_ranked_on_the_tuned_workload_the_screen_scores_the_tuned_figure(tmp_path: Path) -> None:
    st, _ = _robust(tmp_path)
    st.opts = st.opts.model_copy(update={"objective": "tuned"})
    g = Guide(st, screen_trials=8)
    assert g._others.worst({"max_num_batched_tokens": 256}, 1200.0) == 1200.0


def test_the_baselines_other_workloads_keep_back_only_the_runs_end(tmp_path: Path) -> None:
    """Its figures are what every gain divides by: they come before the first trial's gate,
    which a trial's searches keep back (a robust run of 18 minutes on a slow box measured the
    baseline on the tuned workload alone, and no trial after it)."""
    from tuner.run import sizing
    from tuner.run.budget import Budget

    st, base = _robust(tmp_path)
    st.budget = Budget(900.0)
    assert sizing.reserve_s(st, base) > sizing.end_reserve_s(st)  # the first trial's gate too
    assert objective._reserve_s(st, base) == sizing.end_reserve_s(st)
    trial = base.model_copy(update={"number": 1})
    assert objective._reserve_s(st, trial) == sizing.reserve_s(st, trial)
