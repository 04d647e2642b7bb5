"""The quality measures of probes/quality.py on recorded server answers (no server)."""

from __future__ import annotations

import math

import pytest

from probes.exactness import compare, describe, exact_prompts
from probes.quality import (
    Continuation,
    Quality,
    QualityError,
    _margins,
    check,
    degradation_pct,
    eval_texts,
    greedy_agreement,
    token_logprobs,
)


def C(units: list[int] | str, margins: list[float] | None = None) -> Continuation:
    if isinstance(units, str):
        return Continuation(ids=None, text=units, margins=margins)
    return Continuation(ids=units, text="", tokens=[f"t{u}" for u in units], margins=margins)


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
    base = [C([1, 2, 3, 4]), C([5, 6, 7, 8])]
    got = [C([1, 2, 9, 4]), C([5, 6, 7, 8])]  # the 4 after a divergence does not count
    q = greedy_agreement(got, base)
    assert q.value == pytest.approx(6 / 8) and q.n_tokens == 8 and q.n_texts == 2
    assert greedy_agreement([C("abcd")], [C("abxd")]).value == pytest.approx(0.5)
    with pytest.raises(ValueError):
        greedy_agreement([C([1])], [C([1]), C([2])])


def test_the_quality_gate_and_its_margin() -> None:
    base = Quality(metric="perplexity", value=48.69, n_tokens=3138, n_texts=24)
    kv_fp8 = Quality(metric="perplexity", value=48.92, n_tokens=3138, n_texts=24)
    fp8 = Quality(metric="perplexity", value=49.84, n_tokens=3138, n_texts=24)
    ok = check(kv_fp8, base, 1.0)
    assert ok.holds and ok.degradation_pct == pytest.approx(0.472, abs=1e-3) and ok.margin < 0
    bad = check(fp8, base, 1.0)
    assert not bad.holds and bad.margin == pytest.approx(bad.degradation_pct - 1.0)
    assert check(base, base, 0.0).holds and not check(kv_fp8, base, 0.0).holds
    assert check(fp8, base, None).holds  # no gate


def test_margins_are_the_gap_between_the_top_two_tokens() -> None:
    # Recorded shape of vLLM's /v1/completions "logprobs" with logprobs: 2.
    choice = {
        "logprobs": {
            "tokens": [" a", " b"],
            "top_logprobs": [{" a": -0.1, " c": -2.6}, {" b": -0.70, " d": -0.72}],
        }
    }
    tokens, margins = _margins(choice)
    assert tokens == [" a", " b"]
    assert margins == pytest.approx([2.5, 0.02])
    assert _margins({"logprobs": None}) == (None, None)


def test_exactness_reports_the_first_divergence_with_its_position() -> None:
    prompts = ["first prompt", "second prompt", "third prompt"]
    ref = [C([1, 2, 3]), C([4, 5, 6, 7], margins=[3.0, 2.0, 0.01, 1.0]), C([8, 9])]
    got = [C([1, 2, 3]), C([4, 5, 9, 7]), C([8, 7])]
    e = compare(got, ref, prompts, reference_trial=3)
    assert e.checked and e.identical is False and e.divergent_prompts == 2
    d = e.first_divergence
    assert d is not None
    assert (d.prompt_index, d.position, d.expected, d.got) == (1, 2, 6, 9)
    assert d.prompt == "second prompt" and d.expected_token == "t6" and d.got_token == "t9"
    assert d.reference_margin == pytest.approx(0.01) and d.near_tie is True
    assert e.tokens_compared == 3 + 2 + 1 and e.reference_trial == 3
    line = describe(e)
    assert "prompt 1 at output token 2" in line and "near-tie" in line


def test_exactness_identical_and_early_stop() -> None:
    ref = [C([1, 2, 3])]
    assert compare([C([1, 2, 3])], ref, ["p"]).identical is True
    short = compare([C([1, 2])], ref, ["p"])  # stopped early: a change at position 2
    assert short.identical is False and short.first_divergence is not None
    assert short.first_divergence.position == 2 and short.first_divergence.got == "<end>"
    with pytest.raises(ValueError):
        compare([], ref, ["p"])


def test_exactness_prompts_are_fixed_and_apart_from_the_quality_set() -> None:
    p = exact_prompts()
    assert p == exact_prompts() and len(p) == 8
    assert not set(p) & set(eval_texts())


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
