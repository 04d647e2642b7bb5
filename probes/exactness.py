"""The exactness check of speculative decoding: greedy outputs must not change.

Speculative decoding is exact in theory: the target model verifies every drafted token, so
greedy outputs should be identical to the same configuration without speculation. In practice a
verification step scores several positions in one forward pass, with other matrix shapes, and
bf16 arithmetic can flip a near-tie between the two most likely tokens; an engine bug does the
same without a near-tie. The check compares, token by token, the greedy continuations of a fixed
prompt set (``EXACT_PROMPTS`` corpus texts after the quality set, ``EXACT_TOKENS`` tokens each,
sent one at a time) with the reference configuration's, and reports the first divergence with
the reference's log-probability gap between its top two tokens there (a gap under
``NEAR_TIE_NATS`` is reported as a near-tie).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from probes.quality import EVAL_TEXTS, Continuation, eval_texts

EXACT_PROMPTS = 8
EXACT_TOKENS = 32
NEAR_TIE_NATS = 0.1


def exact_prompts() -> list[str]:
    """The fixed prompt set: the ``EXACT_PROMPTS`` corpus texts after the quality set (other
    texts, so that no prompt is served from the prefix cache the quality check filled)."""
    return eval_texts(EVAL_TEXTS + EXACT_PROMPTS)[EVAL_TEXTS:]


class Divergence(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_index: int
    prompt: str  # the start of the prompt
    position: int  # 0-based index of the first differing output token (or character)
    expected: int | str  # the reference's token id (or character)
    got: int | str
    expected_token: str | None = None
    got_token: str | None = None
    reference_margin: float | None = None  # top-1 minus top-2 log-probability in the reference
    near_tie: bool | None = None


class Exactness(BaseModel):
    model_config = ConfigDict(extra="forbid")

    checked: bool
    identical: bool | None = None
    prompts: int = 0
    tokens_compared: int = 0
    divergent_prompts: int = 0
    first_divergence: Divergence | None = None
    reference_trial: int | None = None  # the trial whose outputs were the reference
    reason: str = ""  # why it was not checked, or how


def compare(
    got: Sequence[Continuation],
    reference: Sequence[Continuation],
    prompts: Sequence[str],
    reference_trial: int | None = None,
) -> Exactness:
    """Token-by-token comparison of two sets of greedy continuations of ``prompts``."""
    if not (len(got) == len(reference) == len(prompts)):
        raise ValueError("the continuations, the reference and the prompts differ in number")
    first: Divergence | None = None
    divergent = compared = 0
    for i, (g, r) in enumerate(zip(got, reference, strict=True)):
        gu, ru = g.units, r.units
        pos = next((j for j, (a, b) in enumerate(zip(gu, ru, strict=False)) if a != b), None)
        if pos is None and len(gu) != len(ru):
            pos = min(len(gu), len(ru))  # one stopped early (end of sequence): still a change
        compared += len(ru) if pos is None else pos
        if pos is None:
            continue
        divergent += 1
        if first is None:
            margin = r.margins[pos] if r.margins and pos < len(r.margins) else None
            first = Divergence(
                prompt_index=i,
                prompt=prompts[i][:160],
                position=pos,
                expected=ru[pos] if pos < len(ru) else "<end>",
                got=gu[pos] if pos < len(gu) else "<end>",
                expected_token=_tok(r, pos),
                got_token=_tok(g, pos),
                reference_margin=margin,
                near_tie=None if margin is None else margin < NEAR_TIE_NATS,
            )
    return Exactness(
        checked=True,
        identical=divergent == 0,
        prompts=len(prompts),
        tokens_compared=compared,
        divergent_prompts=divergent,
        first_divergence=first,
        reference_trial=reference_trial,
        reason=f"greedy outputs at concurrency 1, {len(prompts)} prompts, compared token by token "
        "with the same configuration without speculative decoding",
    )


def _tok(c: Continuation, pos: int) -> str | None:
    return c.tokens[pos] if c.tokens and pos < len(c.tokens) else None


def describe(e: Exactness) -> str:
    """One line for progress and report.md."""
    if not e.checked:
        return f"not checked: {e.reason}"
    if e.identical:
        return f"identical on {e.prompts} prompts ({e.tokens_compared} tokens)"
    d = e.first_divergence
    assert d is not None
    tie = ""
    if d.reference_margin is not None:
        kind = "a near-tie" if d.near_tie else "not a near-tie"
        tie = f"; reference top-2 gap {d.reference_margin:.3f} nats ({kind})"
    return (
        f"diverged on {e.divergent_prompts} of {e.prompts} prompts; first: prompt "
        f"{d.prompt_index} at output token {d.position} ({d.expected_token or d.expected!r} "
        f"expected, {d.got_token or d.got!r} produced{tie})"
    )
