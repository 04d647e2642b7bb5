"""tuner/run/gate_steps.py ``refused_unmeasured``: under a time budget a configuration whose
quality cost is over the limit is refused before its load points; without one it is measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.quality import QualityCheck
from tests.unit.run_state import run_state
from tests.unit.test_sizing import _trial
from tuner.run.gate_steps import GateSteps


def _quality(degradation_pct: float, limit_pct: float = 1.0) -> QualityCheck:
    return QualityCheck(
        metric="perplexity", value=49.87, baseline_value=48.66,
        degradation_pct=degradation_pct, limit_pct=limit_pct,
        holds=degradation_pct <= limit_pct, n_tokens=4096, n_texts=8,
    )  # fmt: skip


def test_over_the_limit_under_a_budget_is_refused_unmeasured(tmp_path: Path) -> None:
    st = run_state(tmp_path, budget_s=1500.0)
    said: list[str] = []
    st.say = said.append
    t = _trial(2, 111.0, 0.93)
    t.points, t.rejected = [], None
    t.quality = _quality(2.48)
    assert GateSteps(st).refused_unmeasured(t, "trial 2 (quantisation)")
    assert t.status == "abandoned" and t.error and "not load-tested" in t.error
    assert t.rejected == (
        "quality: perplexity degraded 2.48 % against the baseline, over the 1 % allowed"
    )
    assert said == [
        f"trial 2 (quantisation): not recommendable: {t.rejected}; not load-tested (time budget)"
    ]


def test_within_the_limit_or_without_a_budget_it_is_measured(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    bounded = run_state(tmp_path / "a", budget_s=1500.0)
    ok = _trial(1, 47.0, 0.93)
    ok.quality = _quality(0.46)
    assert not GateSteps(bounded).refused_unmeasured(ok, "trial 1")
    assert ok.status == "ok" and ok.rejected is None
    unbounded = run_state(tmp_path / "b", budget_s=None)
    over = _trial(2, 111.0, 0.93)
    over.quality = _quality(2.48)
    assert not GateSteps(unbounded).refused_unmeasured(over, "trial 2")
    assert over.status == "ok" and over.rejected is None


def test_optuna_learns_the_quality_margin_measured_or_not(tmp_path: Path) -> None:
    from tuner.run.stages import outcome

    st = run_state(tmp_path, budget_s=1500.0)
    t = _trial(2, 111.0, 0.93)
    t.points = []
    t.quality = _quality(2.48)
    GateSteps(st).refused_unmeasured(t, "trial 2")
    told = outcome(t)
    assert told.status == "infeasible"
    assert told.constraint == t.quality.margin  # 2.48 / 1 - 1: how far over the limit


@pytest.mark.timeout(180)
def test_a_run_under_a_budget_refuses_the_lossy_configuration_before_its_points(
    tmp_path: Path,
) -> None:
    from tests.unit.test_runner import HW, SPACE_KINDS, FakeEngine, _options
    from tuner.run.runner import Runner

    opts = _options(tmp_path, trials=2, time_budget_s=3600.0)
    (tmp_path / "fake.yaml").write_text(SPACE_KINDS)
    lines: list[str] = []
    report = Runner(opts, lines.append, engine=FakeEngine(), hardware=HW).run()
    assert report.status == "complete"
    weights = next(t for t in report.trials if t.stage == "weights")
    assert weights.quality is not None and not weights.quality.holds
    assert weights.status == "abandoned" and not weights.points
    assert weights.rejected and weights.rejected.startswith("quality: perplexity degraded")
    assert any("not load-tested (time budget)" in line for line in lines)
    assert report.recommended is not None and report.recommended.from_trial != weights.number
