"""The quality measures of probes/quality.py on recorded server answers (no server)."""

from __future__ import annotations

import math

import pytest

from probes.quality import (
    Quality,
    QualityError,
    degradation_pct,
    eval_texts,
    greedy_agreement,
    token_logprobs,
)

# Recorded from vLLM 0.32 (CPU), prompt_logprobs: 0, for "The capital of France is Paris."
VLLM_CHOICE = {
    "prompt_logprobs": [
        None,
        {"3575": {"logprob": -11.708, "rank": 3121, "decoded_token": " capital"}},
        {"282": {"logprob": -0.3356, "rank": 1, "decoded_token": " of"}},
        {"4649": {"logprob": -2.4156, "rank": 2, "decoded_token": " France"}},
    ],
    "prompt_token_ids": None,
}


def test_token_logprobs_skips_the_first_token() -> None:
    assert token_logprobs(VLLM_CHOICE) == [-11.708, -0.3356, -2.4156]


def test_token_logprobs_picks_the_prompt_token_among_top_k() -> None:
    choice = {
        "prompt_logprobs": [None, {"7": {"logprob": -0.1}, "9": {"logprob": -3.0}}],
        "prompt_token_ids": [1, 9],
    }
    assert token_logprobs(choice) == [-3.0]
    choice["prompt_token_ids"] = None
    with pytest.raises(QualityError):
        token_logprobs(choice)
    with pytest.raises(QualityError, match="no prompt log-probabilities"):
        token_logprobs({"prompt_logprobs": None})


def test_perplexity_formula_matches_the_definition() -> None:
    lps = token_logprobs(VLLM_CHOICE)
    assert math.exp(-sum(lps) / len(lps)) == pytest.approx(math.exp((11.708 + 0.3356 + 2.4156) / 3))


def test_greedy_agreement_stops_at_the_first_divergence() -> None:
    base = [[1, 2, 3, 4], [5, 6, 7, 8]]
    got = [[1, 2, 9, 4], [5, 6, 7, 8]]  # the 4 after a divergence does not count
    q = greedy_agreement(got, base)
    assert q.value == pytest.approx(6 / 8) and q.n_tokens == 8 and q.n_texts == 2
    assert greedy_agreement(["abcd"], ["abxd"]).value == pytest.approx(0.5)
    with pytest.raises(ValueError):
        greedy_agreement([[1]], [[1], [2]])


def test_degradation_signs() -> None:
    base = Quality(metric="perplexity", value=40.0, n_tokens=100, n_texts=2)
    worse = Quality(metric="perplexity", value=42.0, n_tokens=100, n_texts=2)
    assert degradation_pct(worse, base) == pytest.approx(5.0)
    agree = Quality(metric="greedy_agreement", value=0.9, n_tokens=100, n_texts=2)
    full = Quality(metric="greedy_agreement", value=1.0, n_tokens=100, n_texts=2)
    assert degradation_pct(agree, full) == pytest.approx(10.0)
    with pytest.raises(ValueError):
        degradation_pct(agree, base)


def test_the_evaluation_set_is_fixed_real_text() -> None:
    a, b = eval_texts(), eval_texts()
    assert a == b and len(a) == 24
    assert all(len(t.split()) >= 40 for t in a)
    assert a[0].startswith("However little known the feelings or views of such a man")
