"""tuner/gates.py: what an exactness verdict means for a speculative configuration."""

from __future__ import annotations

import pytest

from probes.exactness import Divergence, Exactness
from tuner.gates import ExactnessGate, QualityGate, rejection


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
    try:
        gate.check("http://127.0.0.1:1", "m")
    except Exception as exc:  # QualityError
        assert "no log-probabilities" in str(exc)
    else:
        raise AssertionError("a check without a reference must raise")


def test_the_baseline_reference_gets_a_longer_budget_than_each_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tuner.gates as gates
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
