"""Output quality of a served model, for the quantisation stage's quality gate.

The evaluation set is fixed and ships with the project: the first ``EVAL_TEXTS`` paragraphs of
at least 40 words of probes/data/corpus.txt (public-domain prose, see SOURCES.md), in order.

- Perplexity, where the server returns prompt log-probabilities (vLLM's ``prompt_logprobs`` on
  ``/v1/completions``): exp(-(sum of the log-probability of every prompt token after the first)
  / (number of those tokens)), pooled over the set. Lower is better.
- Greedy-token agreement, where it does not: the share of greedy continuation tokens, position
  by position, equal to the baseline's continuation of the same prompts (first divergence ends
  the comparison of a prompt). Higher is better.

Degradation against the unquantised baseline, in percent (<= the ``quality=X%`` SLO holds):
perplexity: (value / baseline - 1) x 100; agreement: (baseline - value) / baseline x 100.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from probes.client import normalize_base_url
from probes.http import request

CORPUS = Path(__file__).parent / "data" / "corpus.txt"
EVAL_TEXTS = 24
MIN_WORDS = 40


class QualityError(RuntimeError):
    """The server could not be evaluated (no log-probabilities, HTTP errors)."""


class Quality(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: Literal["perplexity", "greedy_agreement"]
    value: float
    n_tokens: int
    n_texts: int


def eval_texts(n: int = EVAL_TEXTS) -> list[str]:
    """The fixed evaluation set (see the module docstring)."""
    paras = [p.strip() for p in CORPUS.read_text(encoding="utf-8").split("\n\n")]
    return [p for p in paras if len(p.split()) >= MIN_WORDS][:n]


def _completion(base_url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    status, data = request(
        "POST", normalize_base_url(base_url) + "/v1/completions", body, timeout_s
    )
    if status != 200:
        raise QualityError(f"/v1/completions answered {status}: {data[:200]!r}")
    return json.loads(data)


def token_logprobs(choice: dict[str, Any]) -> list[float]:
    """The log-probability of each prompt token after the first, from one completion choice.

    With ``prompt_logprobs: 0`` each position holds the actual token; where it holds more
    (top-k asked for), the actual token is found through ``prompt_token_ids``.
    """
    entries = choice.get("prompt_logprobs")
    if not entries:
        raise QualityError("the server returned no prompt log-probabilities")
    ids = choice.get("prompt_token_ids")
    out: list[float] = []
    for i, entry in enumerate(entries):
        if entry is None:
            continue
        if len(entry) == 1:
            (lp,) = entry.values()
        elif ids is not None:
            lp = entry[str(ids[i])]
        else:
            raise QualityError("cannot tell the prompt token among several log-probabilities")
        out.append(float(lp["logprob"]))
    return out


def perplexity(
    base_url: str, model: str, texts: Sequence[str] | None = None, timeout_s: float = 120.0
) -> Quality:
    """Pooled perplexity of the evaluation set on the server (module docstring).

    Raises:
        QualityError: the server gives no prompt log-probabilities or answers an error.
    """
    texts = list(texts) if texts is not None else eval_texts()
    total, n = 0.0, 0
    for text in texts:
        data = _completion(
            base_url,
            {
                "model": model,
                "prompt": text,
                "max_tokens": 1,
                "temperature": 0.0,
                "prompt_logprobs": 0,
                "return_token_ids": True,
            },
            timeout_s,
        )
        lps = token_logprobs(data["choices"][0])
        total += sum(lps)
        n += len(lps)
    if n == 0:
        raise QualityError("no prompt tokens were scored")
    return Quality(metric="perplexity", value=math.exp(-total / n), n_tokens=n, n_texts=len(texts))


def greedy_continuations(
    base_url: str,
    model: str,
    texts: Sequence[str] | None = None,
    n_tokens: int = 32,
    timeout_s: float = 120.0,
) -> list[list[int] | str]:
    """Greedy continuations of the evaluation set: token ids where the server returns them
    (vLLM's ``return_token_ids``), else the text (compared character by character)."""
    texts = list(texts) if texts is not None else eval_texts()
    out: list[list[int] | str] = []
    for text in texts:
        data = _completion(
            base_url,
            {
                "model": model,
                "prompt": text,
                "max_tokens": n_tokens,
                "temperature": 0.0,
                "return_token_ids": True,
            },
            timeout_s,
        )
        choice = data["choices"][0]
        ids = choice.get("token_ids")
        out.append(list(ids) if ids is not None else str(choice.get("text", "")))
    return out


def greedy_agreement(
    got: Sequence[list[int] | str], baseline: Sequence[list[int] | str]
) -> Quality:
    """Share of positions equal to the baseline's, each prompt compared up to its first
    divergence (after which a continuation is not comparable position by position)."""
    if len(got) != len(baseline):
        raise ValueError("the continuations and the baseline cover different prompts")
    same = total = 0
    for g, b in zip(got, baseline, strict=True):
        total += len(b)
        for x, y in zip(g, b, strict=False):
            if x != y:
                break
            same += 1
    return Quality(
        metric="greedy_agreement",
        value=same / total if total else 0.0,
        n_tokens=total,
        n_texts=len(baseline),
    )


def degradation_pct(q: Quality, baseline: Quality) -> float:
    """How much worse ``q`` is than ``baseline``, in percent (negative: better)."""
    if q.metric != baseline.metric:
        raise ValueError(f"cannot compare {q.metric} with {baseline.metric}")
    if q.metric == "perplexity":
        return (q.value / baseline.value - 1.0) * 100.0
    return (baseline.value - q.value) / baseline.value * 100.0
