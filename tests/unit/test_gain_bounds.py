"""The stage table's gains where a score is a lower bound (every load a configuration was tried
at held): "at least" where the configuration's is, "at most" where the one it is compared with
is, "two lower bounds" where both are (tuner/report/render_cells.ratio_word). The README command
on the Xeon (2026-12-06 10:08) showed an fp8 KV cache at 1.27x the batching trial it started
from, whose one point had held; that trial's capacity was unknown above it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.report.render import render_markdown
from tuner.report.render_cells import lower_bound, ratio_word
from tuner.report.schema import Report, TrialReport
from tuner.report.waterfall import Step, waterfall_steps


@pytest.fixture
def report(fake_run: Path) -> Report:
    return Report.model_validate_json((fake_run / "report.json").read_bytes())


def _censor(t: TrialReport, how: str) -> None:
    assert t.estimate is not None
    t.estimate = t.estimate.model_copy(update={"censored": how})


def _first_trial_step(r: Report) -> tuple[Step, TrialReport]:
    step = next(s for s in waterfall_steps(r) if s.kind == "scored" and s.trial)
    return step, next(t for t in r.trials if t.number == step.trial)


def test_ratio_word_for_each_pair_of_bounds(report: Report) -> None:
    scored = [t for t in [report.baseline, *report.trials] if t is not None and t.estimate]
    a, b = scored[0].model_copy(deep=True), scored[1].model_copy(deep=True)
    _censor(a, "none")
    _censor(b, "none")
    assert ratio_word(a, b) == "" and not lower_bound(a)
    _censor(a, "above")
    assert lower_bound(a) and ratio_word(a, b) == "at least " and ratio_word(b, a) == "at most "
    _censor(b, "above")
    assert ratio_word(a, b) == "two lower bounds: "
    _censor(b, "below")  # nothing held: not a lower bound
    assert ratio_word(a, b) == "at least " and ratio_word(a, None) == "at least "


def test_the_stage_table_says_what_a_gain_over_a_lower_bound_is(report: Report) -> None:
    assert report.baseline is not None
    _censor(report.baseline, "none")
    step, trial = _first_trial_step(report)
    _censor(trial, "none")
    step, _ = _first_trial_step(report)
    assert step.vs_baseline is not None and step.step_gain is not None
    assert (step.vs_baseline_word, step.step_gain_word, step.lower_bound) == ("", "", False)
    assert f"| {step.vs_baseline:.2f}x |" in render_markdown(report)

    _censor(trial, "above")  # the trial's score is a lower bound: its gains are at least
    step, _ = _first_trial_step(report)
    assert step.lower_bound and step.vs_baseline_word == "at least "
    md = render_markdown(report)
    assert f"| at least {step.vs_baseline:.2f}x |" in md
    assert f"| >= {step.tokens_per_s:.0f} `" in md

    _censor(report.baseline, "above")  # both lower bounds: the ratio says neither way
    step, _ = _first_trial_step(report)
    assert step.vs_baseline_word == "two lower bounds: "
    assert f"| two lower bounds: {step.vs_baseline:.2f}x |" in render_markdown(report)
