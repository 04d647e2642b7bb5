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
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
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

    def __init__(self, msg: str, status: int | None = None) -> None:
        super().__init__(msg)
        self.status = status


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
        raise QualityError(f"/v1/completions answered {status}: {data[:200]!r}", status)
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


def _map_bounded(
    fn: Callable[[str], Any], texts: Sequence[str], concurrency: int, budget_s: float | None
) -> list[Any]:
    """``fn`` over ``texts`` with a few requests in flight; QualityError past ``budget_s``
    (a configuration that slow is not worth measuring further: requests already sent finish
    under their own timeout)."""
    t0 = time.monotonic()
    out: list[Any] = []
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        futures = [pool.submit(fn, t) for t in texts]
        try:
            for f in futures:
                left = None if budget_s is None else budget_s - (time.monotonic() - t0)
                if left is not None and left <= 0:
                    raise TimeoutError
                out.append(f.result(timeout=left))
        except TimeoutError:
            for f in futures:
                f.cancel()
            raise QualityError(
                f"too slow to evaluate: {len(out)} of {len(texts)} texts in {budget_s:.0f} s"
            ) from None
    return out


def perplexity(
    base_url: str,
    model: str,
    texts: Sequence[str] | None = None,
    timeout_s: float = 120.0,
    *,
    concurrency: int = 4,
    budget_s: float | None = None,
) -> Quality:
    """Pooled perplexity of the evaluation set on the server (module docstring).

    Raises:
        QualityError: the server gives no prompt log-probabilities, answers an error, or the
            whole set takes longer than ``budget_s``.
    """
    texts = list(texts) if texts is not None else eval_texts()

    def one(text: str) -> list[float]:
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
        return token_logprobs(data["choices"][0])

    total, n = 0.0, 0
    for lps in _map_bounded(one, texts, concurrency, budget_s):
        total += sum(lps)
        n += len(lps)
    if n == 0:
        raise QualityError("no prompt tokens were scored")
    return Quality(metric="perplexity", value=math.exp(-total / n), n_tokens=n, n_texts=len(texts))


class Continuation(BaseModel):
    """One greedy continuation: token ids where the server returns them (vLLM's
    ``return_token_ids``), else None and the text is compared character by character;
    ``margins`` is the log-probability gap between the chosen token and the runner-up at each
    position, where the server gives the top two (a gap near 0 is a near-tie)."""

    model_config = ConfigDict(extra="forbid")

    ids: list[int] | None
    text: str
    tokens: list[str] | None = None
    margins: list[float] | None = None

    @property
    def units(self) -> list[int] | str:
        return self.ids if self.ids is not None else self.text


def _margins(choice: dict[str, Any]) -> tuple[list[str] | None, list[float] | None]:
    lp = choice.get("logprobs") or {}
    top = lp.get("top_logprobs")
    if not top:
        return lp.get("tokens"), None
    gaps = []
    for pos in top:
        vals = sorted((float(v) for v in (pos or {}).values()), reverse=True)
        gaps.append(vals[0] - vals[1] if len(vals) >= 2 else math.inf)
    return lp.get("tokens"), gaps


def greedy_continuations(
    base_url: str,
    model: str,
    texts: Sequence[str] | None = None,
    n_tokens: int = 32,
    timeout_s: float = 120.0,
    *,
    budget_s: float | None = None,
) -> list[Continuation]:
    """Greedy continuations of ``texts``, one request at a time (concurrency 1, so batching
    cannot change the arithmetic); QualityError past ``budget_s``. Token ids and the top two
    log-probabilities are asked for, and no longer asked where the server refuses the fields."""
    texts = list(texts) if texts is not None else eval_texts()
    extras = {"logprobs": 2, "return_token_ids": True}  # dropped where the server refuses them

    def one(text: str) -> Continuation:
        body = {"model": model, "prompt": text, "max_tokens": n_tokens, "temperature": 0.0}
        try:
            data = _completion(base_url, {**body, **extras}, timeout_s)
        except QualityError as exc:
            if not extras or exc.status not in (400, 422):
                raise
            extras.clear()  # e.g. transformers serve: "Unexpected fields in the request"
            data = _completion(base_url, body, timeout_s)
        choice = data["choices"][0]
        ids = choice.get("token_ids")
        tokens, margins = _margins(choice)
        return Continuation(
            ids=list(ids) if ids is not None else None,
            text=str(choice.get("text", "")),
            tokens=tokens,
            margins=margins,
        )

    return list(_map_bounded(one, texts, 1, budget_s))


def greedy_agreement(got: Sequence[Continuation], baseline: Sequence[Continuation]) -> Quality:
    """Share of positions equal to the baseline's, each prompt compared up to its first
    divergence (after which a continuation is not comparable position by position)."""
    if len(got) != len(baseline):
        raise ValueError("the continuations and the baseline cover different prompts")
    same = total = 0
    for gc, bc in zip(got, baseline, strict=True):
        g, b = gc.units, bc.units
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


class QualityCheck(BaseModel):
    """One configuration's quality against the run's unquantised baseline (the gate)."""

    model_config = ConfigDict(extra="forbid")

    metric: Literal["perplexity", "greedy_agreement"]
    value: float
    baseline_value: float
    degradation_pct: float
    limit_pct: float | None  # the quality SLO (None: no gate)
    holds: bool
    n_tokens: int
    n_texts: int

    @property
    def margin(self) -> float:
        """Optuna's sign rule: <= 0 holds."""
        if self.limit_pct is None:
            return -1.0
        if self.limit_pct <= 0:
            return 0.0 if self.degradation_pct <= 0 else 1.0
        return self.degradation_pct / self.limit_pct - 1.0


def check(q: Quality, baseline: Quality, limit_pct: float | None) -> QualityCheck:
    deg = degradation_pct(q, baseline)
    return QualityCheck(
        metric=q.metric,
        value=q.value,
        baseline_value=baseline.value,
        degradation_pct=deg,
        limit_pct=limit_pct,
        holds=limit_pct is None or deg <= limit_pct,
        n_tokens=q.n_tokens,
        n_texts=q.n_texts,
    )
