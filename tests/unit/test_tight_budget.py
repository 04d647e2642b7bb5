"""A time budget too tight for the baseline's confirmation, a trial and a restart, on the fake
engine of test_runner (a real process): the baseline's confirmation is put off, the trial
that leads is confirmed on its own server, and the baseline is confirmed at the end on a fresh
start of its own, so the gain is still confirmed over confirmed.

What is tight is decided by tuner/run/sizing.py from measured times (tests/unit/test_sizing.py
tests that on a scripted clock); here its two answers are fixed, so that the run's wiring is
tested without depending on how fast this machine is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tuner.engines.base as base_mod
from probes.metrics import Verdict
from tests.unit.test_runner import HW, FakeEngine, _options
from tuner.report.render import render_markdown
from tuner.report.schema import TrialReport
from tuner.run import sizing, tighten
from tuner.run.confirmation import Confirmation
from tuner.run.runner import Runner
from tuner.run.state import RunState
from tuner.scoring import confirm as confirm_rules


def _tight(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """No room for the baseline's confirmation right after its search, nor for a trial after
    trial 1; the engines started, by folder."""
    real_min, real_fits = sizing.trial_min_s, sizing.another_trial_fits

    def trial_min_s(st: RunState, best: TrialReport | None = None) -> float:
        if best is not None and best.number == 0 and st.baseline is None:
            return 1e6  # asked while the baseline is measured: its confirmation must wait
        return real_min(st, best)

    def another_trial_fits(
        st: RunState,
        best: TrialReport | None = None,
        *,
        strict: bool | None = None,
        slack_s: float = 0.0,
    ) -> bool:
        lead = best or st.best()
        if lead is None or lead.number == 0:
            return real_fits(st, best, strict=strict, slack_s=slack_s)
        return False

    monkeypatch.setattr(sizing, "trial_min_s", trial_min_s)
    # The baseline's search keeps nothing back for the first trial: every load it is tried at.
    monkeypatch.setattr(sizing, "_first_trial_s", lambda st, baseline: 0.0)
    monkeypatch.setattr(sizing, "another_trial_fits", another_trial_fits)
    started: list[str] = []
    real_start = base_mod.ServerProcess.start

    def spy(self: base_mod.ServerProcess) -> None:
        started.append(f"{self.log_path.parent.name}/{self.log_path.name}")
        real_start(self)

    monkeypatch.setattr(base_mod.ServerProcess, "start", spy)
    return started


@pytest.mark.timeout(180)
def test_a_tight_budget_confirms_the_leader_in_place_and_the_baseline_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _tight(monkeypatch)
    lines: list[str] = []
    opts = _options(tmp_path, time_budget_s=3600.0, side_by_side=False)
    runner = Runner(opts, lines.append, engine=FakeEngine(), hardware=HW)
    report = runner.run()
    text = "\n".join(lines)
    assert report.status == "complete", text
    assert any("baseline confirmation: not now" in line for line in lines), text
    rec = report.recommended
    assert rec is not None and rec.from_trial == 1, text
    assert rec.confirmation.startswith("trial 1's own start from its launch command"), text
    assert not rec.fresh_start
    assert rec.tries and rec.n_requests >= 60  # the full sample (confirm_requests)
    # Three starts: the baseline, trial 1 (confirmed on its own server), the baseline again.
    # No restart of trial 1, and trial 2 was not started (no room for it).
    assert started == ["000/server.log", "001/server.log", "000/server-confirmation.log"], text
    assert report.timing.engine_starts == 3
    assert not (runner.out / "confirmation" / "server.log").exists()
    assert [t.number for t in report.trials] == [1]
    base = report.baseline_confirmation
    assert base is not None and base.tries, text
    assert base.confirmation.startswith("the baseline started again"), text
    assert base.fresh_start
    assert rec.gain_vs_baseline is not None and rec.gain_vs_baseline > 1.0, rec.gain_basis
    assert rec.gain_basis.startswith("confirmed over confirmed")
    assert rec.gain_vs_baseline == pytest.approx(
        rec.metrics.output_tokens_per_s / base.metrics.output_tokens_per_s
    )
    md = (runner.out / "report.md").read_text()
    assert "requests (trial 1's own start from its launch command" in md
    assert "after a fresh start" not in md
    # the stage table's confirmed row says where it was measured, as the sentence above does
    assert "| confirmed | trial 1, its search's own start, " in md
    assert "| confirmed | trial 1, a fresh start" not in md
    assert "confirmed on a fresh start" not in (runner.out / "report.html").read_text()
    on_disk = json.loads((runner.out / "report.json").read_text())
    assert on_disk["recommended"]["from_trial"] == 1
    # The in-place confirmation is in trial 1's checkpoint: a resume would not measure it again.
    cp = runner.state.store.checkpoints()[1]
    assert cp.trial_confirmed is not None and cp.trial_confirmed.from_trial == 1


@pytest.mark.timeout(180)
def test_without_room_at_the_end_the_baseline_stays_unconfirmed_and_no_gain_is_divided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = _tight(monkeypatch)
    real_estimate = sizing.start_estimate_s

    def start_estimate_s(st: RunState, also: TrialReport | None = None) -> float:
        # After trial 1 (confirmed on its own server), a start no longer fits.
        return 1e6 if st.trials else real_estimate(st, also)

    monkeypatch.setattr(sizing, "start_estimate_s", start_estimate_s)
    lines: list[str] = []
    opts = _options(tmp_path, time_budget_s=3600.0, side_by_side=False)
    runner = Runner(opts, lines.append, engine=FakeEngine(), hardware=HW)
    report = runner.run()
    text = "\n".join(lines)
    rec = report.recommended
    assert rec is not None and rec.from_trial == 1, text
    assert report.baseline_confirmation is None
    assert started == ["000/server.log", "001/server.log"], text
    assert rec.gain_vs_baseline is None
    assert rec.gain_basis.startswith("not computed: the baseline was not confirmed")
    assert any("no room to confirm the baseline" in n for n in report.notes), report.notes
    md = (runner.out / "report.md").read_text()
    assert "- Baseline not confirmed (time budget): " in md
    assert rec.search_score_tokens_per_s and report.baseline is not None
    ratio = rec.search_score_tokens_per_s / (report.baseline.score_tokens_per_s or 1.0)
    # Every load the fake baseline was tried at held, and every load trial 1 was: both scores
    # are lower bounds, so the ratio says neither way.
    est = report.baseline.estimate
    trial = next(t for t in report.trials if t.number == 1)
    assert est is not None and est.censored == "above"
    assert trial.estimate is not None and trial.estimate.censored == "above"
    assert f"(two lower bounds: {ratio:.2f}x), not with the confirmed figure above" in md
    assert "is a lower bound of its search" in md
    assert f"| two lower bounds: {ratio:.2f}x |" in md  # the stage table's "vs baseline"
    # The trial bracketed: a ratio over the baseline's lower bound is an upper one.
    trial.estimate = trial.estimate.model_copy(update={"censored": "none"})
    md = render_markdown(report)
    assert f"(at most {ratio:.2f}x), not with the confirmed figure above" in md
    assert f"| at most {ratio:.2f}x |" in md
    # Both bracketed: estimates, and the ratios are as measured.
    report.baseline.estimate = est.model_copy(update={"censored": "none"})
    md = render_markdown(report)
    assert f"({ratio:.2f}x), not with the confirmed figure above" in md
    assert "at most" not in md and "is its search estimate, from short points" in md


@pytest.mark.timeout(180)
def test_a_leader_confirmed_in_place_asks_before_raising_its_held_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-place confirmation is the one that asks tuner/run/tighten.py before a try after
    one that held (here it is told the next trial needs the time): its claim is its first try.
    Whether a try at the edge holds, and where the next would go, depend on this machine's
    speed, so every try counts as held and a next load is always proposed: what is tested is
    who asks, not the verdicts."""
    _tight(monkeypatch)
    asked: list[int] = []

    def search_instead(
        st: RunState, trial: TrialReport, try_s: float, reserve_s: float = 0.0
    ) -> str | None:
        asked.append(trial.number)
        return "the next trial's room"

    def took(self: Confirmation, verdict: Verdict) -> None:
        self.tries += 1
        self.held = True

    monkeypatch.setattr(tighten, "search_instead", search_instead)
    monkeypatch.setattr(Confirmation, "took", took)
    monkeypatch.setattr(confirm_rules, "_next", lambda tries, *a, **k: 2.0 * tries[-1].load)
    lines: list[str] = []
    opts = _options(tmp_path, time_budget_s=3600.0, side_by_side=False)
    report = Runner(opts, lines.append, engine=FakeEngine(), hardware=HW).run()
    rec = report.recommended
    assert rec is not None and rec.from_trial == 1 and not rec.fresh_start, "\n".join(lines)
    assert asked == [1]  # trial 1's, once; not the baseline's late confirmation
    assert len(rec.tries) == 1
