"""``--objective robust`` (tuner/run/objective.py): every configuration measured on the tuned
workload and on each --check-workload one, on its own server, and ranked by its worst gain over
the baseline; the rules of the worst gain; bad values refused before anything starts.

On the fake engine, trial 1 batches 8 requests but streams answers longer than 16 tokens at
100 ms a token (a configuration tuned for short answers); trial 2 batches 4 and streams every
answer at the common 10 ms. On the tuned workload (8-token answers) trial 1 is the faster; on
the other (24-token answers) it is slower than the defaults. Ranked on the tuned workload alone
trial 1 would lead; ranked by the worst gain, trial 2 does.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from probes.slo import parse_slos
from probes.workload import parse_workload
from tests.fakes.tokenizer import CharTokenizer
from tests.unit.run_state import run_state
from tests.unit.test_runner import HW, FakeEngine, _options
from tuner.cli.main import app
from tuner.engines.lifetime import leftovers
from tuner.report.schema import AcrossReport, TrialReport
from tuner.run import objective
from tuner.run.runner import Runner
from tuner.runs.rescore import rescore

SPACE = """
engine: fake
device: cpu
baseline:
  args: [--max-concurrent, "2"]
  reason: the fake's default batch limit
common:
  args: [--itl-ms, "10"]
stages:
  - name: batching
    knobs:
      - name: max_concurrent
        type: int
        low: 1
        high: 16
        default: 2
        flag: --max-concurrent
      - name: long_itl_ms
        type: categorical
        choices: [10, 100]
        default: 10
        flag: --long-itl-ms
    candidates:
      - {max_concurrent: 8, long_itl_ms: 100}
      - {max_concurrent: 4, long_itl_ms: 10}
"""
TUNED = "synthetic:input=40,output=8"
LONG = "synthetic:input=40,output=24"


def _runner(tmp_path: Path, lines: list[str], **kw: object) -> Runner:
    space = tmp_path / "robust.yaml"
    space.write_text(SPACE)
    opts = _options(
        tmp_path,
        workload=parse_workload(TUNED),
        trials=2,
        space_file=space,
        check_workloads=[parse_workload(LONG)],
        objective="robust",
        max_concurrency=16,
        **kw,
    )
    return Runner(
        opts,
        lines.append,
        engine=FakeEngine(),
        hardware=HW,
        tokenizer_loader=lambda path: CharTokenizer(),
    )


@pytest.mark.timeout(300)
def test_robust_ranks_by_the_worst_gain_not_the_tuned_one(tmp_path: Path) -> None:
    lines: list[str] = []
    runner = _runner(tmp_path, lines)
    report = runner.run()
    assert report.status == "complete" and report.objective == "robust"
    base = report.baseline
    assert base is not None and base.status == "ok"
    one, two = report.trials
    assert one.params["long_itl_ms"] == 100 and two.params["long_itl_ms"] == 10
    for t in (base, one, two):
        assert t.status == "ok", t.error
        (a,) = t.across
        # measured on the long workload on its own server, with a record of its own
        assert a.workload == LONG and a.number == objective.number(t.number, 0)
        assert a.status == "ok" and a.score_tokens_per_s and a.points >= 1
        sub = json.loads((runner.out / "trials" / f"{a.number:03d}" / "trial.json").read_text())
        assert sub["stage"] == "across" and sub["params"] == t.params
        assert sub["score_tokens_per_s"] == a.score_tokens_per_s
        assert len(sub["points"]) == a.points
    assert base.worst_gain == 1.0
    # on the tuned workload trial 1 is the faster of the two: ranked there, it would lead
    assert one.score_tokens_per_s and two.score_tokens_per_s and base.score_tokens_per_s
    assert one.score_tokens_per_s > two.score_tokens_per_s > base.score_tokens_per_s
    # on the long answers it loses to the defaults, so its worst gain is its gain there
    assert one.across[0].gain is not None and one.across[0].gain < 1
    assert one.worst_gain == pytest.approx(one.across[0].gain)
    tuned_two = two.score_tokens_per_s / base.score_tokens_per_s
    assert two.worst_gain == pytest.approx(min(tuned_two, two.across[0].gain or 0.0))
    assert two.worst_gain > 1 > one.worst_gain
    rec = report.recommended
    assert rec is not None and rec.from_trial == 2
    # Optuna was told the baseline's score times the worst gain
    study = optuna.load_study(
        study_name="batching",
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(runner.out / "optuna.journal"))
        ),
    )
    told = {t.user_attrs["autotune_trial"]: t.value for t in study.trials if t.value is not None}
    # the baseline, as the stage's known start, with its worst gain of 1 from its own trial on
    assert told[0] == pytest.approx(base.score_tokens_per_s)
    for t in (one, two):
        assert told[t.number] == pytest.approx(base.score_tokens_per_s * (t.worst_gain or 0.0))
        assert t.told_tokens_per_s == pytest.approx(told[t.number])
    # said while it ran, and shown in report.md and report.html
    assert any("trial 1 (batching): worst gain over the 2 workloads" in x for x in lines)
    # the other workload ranked the search: no held-out check re-measures it after
    assert report.held_out == [] and not (runner.out / "held_out").exists()
    assert any("held-out check: none: under --objective robust" in x for x in lines)
    md = (runner.out / "report.md").read_text()
    assert "## Ranked by the worst gain over the workloads (--objective robust)" in md
    assert "Ranked by the worst gain over the 2 workloads: trial 2 is recommended" in md
    assert f"| trial 2 | {two.score_tokens_per_s:.0f} (" in md and "(recommended) |" in md
    page = (runner.out / "report.html").read_text()
    assert 'id="robust"' in page and f"<code>{html.escape(LONG)}</code>" in page
    assert not leftovers(runner.run_id)
    # re-scored under the same SLO from its records, every workload's figure is judged again
    # (from each measurement's own record) and ranks as the run did
    again = rescore(runner.out, report, parse_slos(["ttft=300ms"]))
    assert again.rescored is not None and again.rescored.best_trial == 2
    for old, new in zip([base, one, two], [again.baseline, *again.trials], strict=True):
        assert new is not None and new.worst_gain == pytest.approx(old.worst_gain)
        assert new.across[0].score_tokens_per_s == pytest.approx(old.across[0].score_tokens_per_s)
    # under a stricter one the other workload's figures move, and the worst gains with them
    strict = rescore(runner.out, report, parse_slos(["ttft=50ms"]))
    b2 = strict.baseline
    assert b2 is not None
    moved = [
        new.across[0].score_tokens_per_s != old.across[0].score_tokens_per_s
        for old, new in zip([base, one, two], [b2, *strict.trials], strict=True)
    ]
    assert any(moved)
    for t in [b2, *strict.trials]:
        assert t.worst_gain == objective.worst_gain(b2, t, 1)


# ---------------------------------------------------------------- the rules
def _t(number: int, score: float | None, status: str = "ok", *across: AcrossReport) -> TrialReport:
    return TrialReport(
        number=number, stage="s", params={}, args=[], env={}, launch_command=[],
        status=status, score_tokens_per_s=score, across=list(across),  # type: ignore[arg-type]
    )  # fmt: skip


def _a(score: float | None, status: str = "ok") -> AcrossReport:
    return AcrossReport(workload="w", number=0, status=status, score_tokens_per_s=score)  # type: ignore[arg-type]


BASE = _t(0, 100.0, "ok", _a(50.0), _a(None, "infeasible"))


@pytest.mark.parametrize(
    ("trial", "worst"),
    [
        (_t(1, 150.0, "ok", _a(40.0), _a(10.0)), 0.8),  # the first other workload limits it
        (_t(1, 90.0, "ok", _a(60.0), _a(None, "infeasible")), 0.9),  # the tuned one does
        (_t(1, 150.0, "ok", _a(None, "infeasible"), _a(10.0)), 0.0),  # fails where defaults serve
        (_t(1, 150.0, "ok", _a(60.0)), None),  # not measured on every workload
        (_t(1, 150.0, "ok", _a(60.0), _a(None, "failed")), None),  # its engine died there
        (_t(1, None, "infeasible"), 0.0),  # met the SLOs at no load on the tuned workload
        (_t(1, None, "failed"), None),
    ],
)
def test_the_worst_gain_follows_its_rules(trial: TrialReport, worst: float | None) -> None:
    assert objective.worst_gain(BASE, trial, 2) == (pytest.approx(worst) if worst else worst)
    assert objective.worst_gain(BASE, BASE, 2) == 1.0
    assert objective.worst_gain(None, trial, 2) is None


def test_a_baseline_with_no_tuned_score_leaves_the_tuned_score_to_rank(tmp_path: Path) -> None:
    st = run_state(tmp_path)
    st.opts = st.opts.model_copy(
        update={"objective": "robust", "check_workloads": [parse_workload(LONG)]}
    )
    st.baseline = _t(0, None, "infeasible")
    fast, robust = _t(1, 300.0, "ok", _a(10.0)), _t(2, 200.0, "ok", _a(90.0))
    st.trials = [fast, robust]
    objective.settle(st)
    assert fast.worst_gain is None and robust.worst_gain is None  # no gain to form
    assert not st.by_worst_gain and st.best() is fast and st.value(fast) == 300.0
    # with a baseline scored there, the worst gain ranks, and the same trials swap places
    st.baseline = _t(0, 100.0, "ok", _a(50.0))
    objective.settle(st)
    assert st.by_worst_gain and st.best() is robust
    assert st.value(robust) == pytest.approx(100.0 * min(2.0, 90.0 / 50.0))


def test_a_baseline_with_no_tuned_score_is_noted_once_however_often_measured(
    tmp_path: Path,
) -> None:
    st = run_state(tmp_path)
    st.opts = st.opts.model_copy(
        update={"objective": "robust", "check_workloads": [parse_workload(LONG)]}
    )
    said: list[str] = []
    st.say = said.append  # type: ignore[method-assign]
    base = _t(0, None, "infeasible")
    for _ in range(2):  # measured, then measured again by a resumed run
        objective.across(st, None, None, base, "the baseline")  # type: ignore[arg-type]
    assert [n for n in st.notes if "--objective robust" in n] == [said[0]]
    assert len(said) == 2 and base.across == []  # nothing searched with no tuned score


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--objective", "robust"], "give at least one (--check-workload derived"),
        (["--objective", "best"], "--objective"),
        (
            ["--objective", "robust", "--check-workload", "derived", "--storage",
             "sqlite:///x.db", "--study", "s"],
            "--objective robust is for one worker",
        ),
    ],
)  # fmt: skip
def test_bad_objectives_are_one_line_and_exit_2_before_anything_starts(
    tmp_path: Path, extra: list[str], needle: str
) -> None:
    out = tmp_path / "results"
    args = ["--model", "smollm2-135m", "--slo", "ttft=2s", "--output", str(out), *extra]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    errors = [x for x in res.output.splitlines() if x.startswith("autotune: error:")]
    assert len(errors) == 1 and needle in errors[0], res.output
    assert not out.exists()
