"""The two gates a configuration passes besides the SLOs, each holding its own reference.

- ``QualityGate``: the baseline's quality (perplexity where the engine gives prompt
  log-probabilities, else greedy continuations for greedy-token agreement), and each
  configuration's degradation against it, within the quality SLO's limit.
- ``ExactnessGate``: greedy outputs at concurrency 1, kept for configurations that may be
  carried into the speculative stage, and each speculative configuration's outputs compared
  with those of the configuration it started from (speculative decoding is exact: outputs must
  not change).

Both talk to a running server over HTTP (probes/quality.py); what to do with a verdict (reject
the trial, write it) stays with the caller.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from probes.exactness import EXACT_TOKENS, Exactness, compare, describe, exact_prompts
from probes.quality import (
    Continuation,
    Quality,
    QualityCheck,
    QualityError,
    check,
    eval_texts,
    greedy_agreement,
    greedy_continuations,
    perplexity,
)

QUALITY_BUDGET_S = 90.0  # a configuration slower than this to score the evaluation set is out
# The baseline's reference may take longer: without it the gate falls back to greedy-token
# agreement, which counts every bf16/float32 near-tie as a loss (71 % agreement for float32
# against bf16 on an AVX2-only AMD EPYC, where emulated bf16 missed the 90 s, 2026-12-03).
REFERENCE_BUDGET_S = 240.0
GREEDY_BUDGET_S = 60.0
_REF = TypeAdapter(Quality | list[Continuation] | None)
AGREEMENT_TEXTS = 8  # texts for greedy-token agreement, where an engine has no log-probabilities


class QualityGate:
    """The baseline's quality, and each configuration's against it."""

    def __init__(self, limit_pct: float) -> None:
        self.limit_pct = limit_pct
        self.ref: Quality | list[Continuation] | None = None
        self.ref_error: str | None = None

    def take_reference(self, base_url: str, model: str) -> list[str]:
        """Measure the baseline's quality; returns notes for the report (empty: perplexity)."""
        try:
            self.ref = perplexity(base_url, model, budget_s=REFERENCE_BUDGET_S)
            return []
        except QualityError as exc:
            try:
                self.ref = greedy_continuations(
                    base_url, model, eval_texts(AGREEMENT_TEXTS), budget_s=QUALITY_BUDGET_S
                )
                return [f"perplexity unavailable ({exc}); quality is greedy-token agreement"]
            except QualityError as exc2:
                self.ref_error = str(exc2)
                return [f"the baseline's quality could not be measured: {exc2}"]

    def dump(self) -> dict[str, Any]:
        """The reference as JSON, for the other workers of a shared study."""
        return {"ref": _REF.dump_python(self.ref, mode="json"), "error": self.ref_error}

    def load(self, doc: dict[str, Any]) -> None:
        """Another worker's reference (``dump``) as this gate's."""
        self.ref, self.ref_error = _REF.validate_python(doc["ref"]), doc["error"]

    def check(self, base_url: str, model: str) -> QualityCheck:
        """This configuration's quality against the baseline's. Raises QualityError."""
        ref = self.ref
        if ref is None:
            raise QualityError(self.ref_error or "no baseline quality to compare with")
        if isinstance(ref, Quality):
            q = perplexity(base_url, model, budget_s=QUALITY_BUDGET_S)
            return check(q, ref, self.limit_pct)
        got = greedy_continuations(
            base_url, model, eval_texts(AGREEMENT_TEXTS), budget_s=QUALITY_BUDGET_S
        )
        full = Quality(metric="greedy_agreement", value=1.0, n_tokens=1, n_texts=len(ref))
        return check(greedy_agreement(got, ref), full, self.limit_pct)


class ExactnessGate:
    """Greedy outputs per trial, and a speculative configuration's against its reference."""

    def __init__(self) -> None:
        self.greedy: dict[int, list[Continuation]] = {}  # trial number -> greedy outputs
        self.reference: int | None = None  # the trial speculative configs are compared with
        self.prompts = exact_prompts()

    def outputs(self, base_url: str, model: str) -> list[Continuation]:
        """Greedy outputs at concurrency 1 on the exactness prompts. Raises QualityError."""
        return greedy_continuations(
            base_url, model, self.prompts, EXACT_TOKENS, budget_s=GREEDY_BUDGET_S
        )

    def keep(self, number: int, outs: list[Continuation]) -> None:
        self.greedy[number] = outs

    def compare(self, outs: list[Continuation]) -> Exactness:
        """A speculative configuration's outputs against the reference's."""
        ref = self.greedy.get(self.reference) if self.reference is not None else None
        if ref is None:
            return Exactness(
                checked=False,
                reason="the configuration it started from has no greedy outputs to compare with",
            )
        return compare(outs, ref, self.prompts, self.reference)


def rejection(ex: Exactness, accept_divergence: bool) -> str | None:
    """Why a speculative configuration with this exactness may not be recommended, or None."""
    if ex.identical:
        return None
    if not ex.checked:
        return f"exactness {describe(ex)}"
    if accept_divergence:
        return None
    return (
        f"speculative decoding changed the greedy outputs ({describe(ex)}); "
        "--accept-divergence allows it"
    )


def quality_rejection(q: QualityCheck, limit_pct: float) -> str:
    """Why a configuration whose quality figure ``q`` is over the limit may not be recommended."""
    return (
        f"quality: {q.metric} degraded {q.degradation_pct:.2f} % against the baseline, over "
        f"the {limit_pct:g} % allowed"
    )
