"""tuner/run/gates.py: what an exactness verdict means for a speculative configuration; the
quality reference, shared by the workers of a study."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from probes.exactness import Divergence, Exactness
from probes.quality import Continuation, Quality, QualityError
from tuner.run.gate_steps import GateSteps
from tuner.run.gates import ExactnessGate, QualityGate, rejection
from tuner.storage.shared import SharedStudy


def test_identical_outputs_pass_and_divergent_ones_need_the_users_consent() -> None:
    same = Exactness(checked=True, identical=True, prompts=4, tokens_compared=64)
    first = Divergence(prompt_index=0, prompt="The", position=5, expected=11, got=12)
    diff = Exactness(
        checked=True, identical=False, prompts=4, divergent_prompts=1, first_divergence=first
    )
    assert rejection(same, accept_divergence=False) is None
    assert "changed the greedy outputs" in (rejection(diff, accept_divergence=False) or "")
    assert rejection(diff, accept_divergence=True) is None


def test_an_unchecked_comparison_is_never_accepted() -> None:
    unchecked = Exactness(checked=False, reason="no reference")
    assert (rejection(unchecked, accept_divergence=True) or "").startswith("exactness")


def test_no_reference_outputs_means_not_checked() -> None:
    gate = ExactnessGate()
    gate.reference = 3  # nothing kept for trial 3
    ex = gate.compare([])
    assert not ex.checked and "no greedy outputs" in ex.reason


def test_a_quality_check_without_a_reference_says_why() -> None:
    gate = QualityGate(limit_pct=1.0)
    gate.ref_error = "the server gives no log-probabilities"
    with pytest.raises(QualityError, match="no log-probabilities"):
        gate.check("http://127.0.0.1:1", "m")


def test_the_baseline_reference_gets_a_longer_budget_than_each_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tuner.run.gates as gates
    from probes.quality import Quality

    asked: list[float] = []

    def fake(base_url: str, model: str, budget_s: float) -> Quality:
        asked.append(budget_s)
        return Quality(metric="perplexity", value=10.0, n_tokens=100, n_texts=2)

    monkeypatch.setattr(gates, "perplexity", fake)
    gate = QualityGate(limit_pct=1.0)
    assert gate.take_reference("http://x", "m") == []
    gate.check("http://x", "m")
    assert asked == [gates.REFERENCE_BUDGET_S, gates.QUALITY_BUDGET_S]
    assert gates.REFERENCE_BUDGET_S > gates.QUALITY_BUDGET_S


def test_a_quality_reference_goes_to_another_worker_as_it_was() -> None:
    for ref in (
        Quality(metric="perplexity", value=12.5, n_tokens=900, n_texts=24),
        [Continuation(ids=[1, 2], text="ab", margins=[0.5, 0.01])],
    ):
        a, b = QualityGate(1.0), QualityGate(1.0)
        a.ref = ref
        b.load(json.loads(json.dumps(a.dump())))  # through a shared study's JSON document
        assert b.ref == ref and b.ref_error is None


def test_a_deferred_quality_reference_is_one_workers_in_a_shared_study(tmp_path: Path) -> None:
    # The baseline meets the SLOs at no load: the reference waits for the first configuration
    # that meets them. With two workers, the second takes the first's reference (and says
    # whose), not one of its own from another configuration.
    url = f"sqlite:///{tmp_path / 'shared.db'}"

    def worker(ppl: float) -> tuple[SimpleNamespace, GateSteps]:
        st = SimpleNamespace(
            shared=SharedStudy(url, "s", poll_s=0.05), quality=QualityGate(1.0), notes=[]
        )
        steps = GateSteps(st)  # type: ignore[arg-type]
        ref = Quality(metric="perplexity", value=ppl, n_tokens=900, n_texts=24)
        steps.baseline_quality = lambda server: setattr(st.quality, "ref", ref)  # type: ignore[method-assign]
        return st, steps

    (a, ev_a), (b, ev_b) = worker(10.0), worker(20.0)
    ev_a.deferred_reference(None, SimpleNamespace(number=3))  # type: ignore[arg-type]
    ev_b.deferred_reference(None, SimpleNamespace(number=5))  # type: ignore[arg-type]
    assert a.quality.ref.value == b.quality.ref.value == 10.0
    assert "measured on trial 3" in a.notes[-1] and "measured on trial 3" in b.notes[-1]
