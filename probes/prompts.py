"""Prompt text of an exact number of tokens, counted with the model's own tokenizer.

- ``synthetic_prompt``: a fresh prompt, a salt (distinct per request) and a window of real
  public-domain text (probes/data/corpus.txt).
- ``PromptBuilder``: prompts that share prefixes on purpose. A shared segment (a prefix group's
  system prompt, a trace's prefix block) is built once per prepared set and reused word for
  word; a prompt is extended by an exact number of tokens (a session's next turn, a request's
  own part after a shared prefix).

Decoding then re-encoding can merge tokens at a seam, so every text is encoded again and
checked: its length, and that the tokens of what it extends are unchanged (a prefix cache
reuses tokens, not text). An appended part starts with a newline, where byte-level BPE
tokenizers split words, so seams rarely merge; a corpus window that does is replaced.

Also home to the two names every workload module shares: ``WorkloadError`` and ``Tokenizer``.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, cast

CORPUS = Path(__file__).parent / "data" / "corpus.txt"
SEAM = "\n"  # what starts every appended part


class WorkloadError(ValueError):
    """A malformed workload spec or file; the message names the spec or the line."""


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...


@lru_cache(maxsize=4)
def _corpus_ids(tokenizer: Any) -> tuple[int, ...]:
    text = CORPUS.read_text(encoding="utf-8")
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def synthetic_prompt(
    tokenizer: Tokenizer, n_tokens: int, salt: str, rng: random.Random, tries: int = 20
) -> str:
    """A prompt of exactly ``n_tokens`` tokens (special tokens included, as servers count them).

    The prompt starts with ``salt`` (distinct per request) followed by a window of the corpus.
    Decoding then re-encoding can merge tokens at the seams, so the length is checked and the
    window moved until it matches.

    Raises:
        WorkloadError: if no window gives the exact length (n_tokens too small for the salt).
    """
    corpus = _corpus_ids(cast(Any, tokenizer))
    n_special = len(tokenizer.encode("", add_special_tokens=True))
    salt_ids = tokenizer.encode(salt, add_special_tokens=False)
    for _ in range(tries):
        need = n_tokens - n_special - len(salt_ids)
        if need < 0:
            break
        start = rng.randrange(len(corpus))
        body = [corpus[(start + i) % len(corpus)] for i in range(need)]
        text = salt + tokenizer.decode(body)
        got = len(tokenizer.encode(text, add_special_tokens=True))
        if got == n_tokens:
            return text
    raise WorkloadError(f"could not build a prompt of exactly {n_tokens} tokens")


@dataclass(slots=True, frozen=True)
class Prompt:
    """A prompt's text and its tokens as the server counts them (special tokens included)."""

    text: str
    ids: tuple[int, ...]


class PromptBuilder:
    """Builds the prompts of one prepared set; its shared segments are built once, on first use.

    Args:
        tokenizer: the model's own.
        rng: every window of the corpus is drawn from it (a seeded set is reproducible).
    """

    def __init__(self, tokenizer: Tokenizer, rng: random.Random, tries: int = 20) -> None:
        self.tok = tokenizer
        self.rng = rng
        self.tries = tries
        self.corpus = _corpus_ids(cast(Any, tokenizer))
        self.specials = tuple(tokenizer.encode("", add_special_tokens=True))
        self._segments: dict[tuple[str, bool], tuple[str, tuple[int, ...]]] = {}

    def _window(self, n: int) -> str:
        start = self.rng.randrange(len(self.corpus))
        return self.tok.decode([self.corpus[(start + i) % len(self.corpus)] for i in range(n)])

    def _count(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False))

    def fresh(self, n_tokens: int, salt: str, *, salt_optional: bool = False) -> Prompt:
        """A prompt of exactly ``n_tokens`` tokens that starts with ``salt``; with
        ``salt_optional``, one too short for the salt goes without it (a few tokens, whose
        reuse by a prefix cache would save next to nothing).

        Raises:
            WorkloadError: no text of that length can be built.
        """
        try:
            text = synthetic_prompt(self.tok, n_tokens, salt, self.rng, self.tries)
        except WorkloadError:
            if not salt_optional or not salt:
                raise
            text = synthetic_prompt(self.tok, n_tokens, "", self.rng, self.tries)
        return Prompt(text, tuple(self.tok.encode(text, add_special_tokens=True)))

    def segment(self, key: str, n_tokens: int, first: bool) -> tuple[str, tuple[int, ...]]:
        """Shared segment ``key``'s text (``[key]``, then corpus text; after a newline unless
        it is the first) and its ``n_tokens`` tokens, encoded alone; the same every time.

        Raises:
            WorkloadError: no text of that length can be built.
        """
        if (key, first) in self._segments:
            return self._segments[(key, first)]
        tag = ("" if first else SEAM) + f"[{key}] "
        need = n_tokens - self._count(tag)
        for _ in range(self.tries if need >= 0 else 0):
            text = tag + self._window(need)
            if text[-1:].isspace():  # a trailing space or newline can merge with what follows
                continue
            ids = tuple(self.tok.encode(text, add_special_tokens=False))
            if len(ids) == n_tokens:
                self._segments[(key, first)] = (text, ids)
                return text, ids
            need = max(0, need + n_tokens - len(ids))
        raise WorkloadError(f"could not build a shared segment of exactly {n_tokens} tokens")

    def shared(self, segments: Sequence[tuple[str, int]], *, check: bool = True) -> Prompt:
        """A prompt made of shared segments ``(key, n_tokens)``, in order. Its tokens are the
        special tokens and each segment's own, so two prompts that start with the same
        segments share those tokens. ``check=False`` skips the encoding that proves it, for a
        prompt that ``extend`` will check anyway.

        Raises:
            WorkloadError: the segments' tokens merge at a seam with this tokenizer.
        """
        texts, ids = [], list(self.specials)
        for j, (key, n) in enumerate(segments):
            text, seg_ids = self.segment(key, n, first=j == 0)
            texts.append(text)
            ids.extend(seg_ids)
        prompt = Prompt("".join(texts), tuple(ids))
        if check and tuple(self.tok.encode(prompt.text, add_special_tokens=True)) != prompt.ids:
            raise WorkloadError(
                f"shared segments {[k for k, _ in segments]} change their tokens when joined "
                "with this tokenizer"
            )
        return prompt

    def extend(self, head: Prompt, n_more: int, salt: str = "") -> Prompt:
        """``head`` followed by exactly ``n_more`` more tokens: a newline, ``salt`` where it
        fits (it is left out of a part too short for it), then corpus text. The head's tokens
        stay as they were.

        Raises:
            WorkloadError: no text gives the exact length with the head's tokens intact.
        """
        lead = SEAM + salt
        if salt and self._count(lead) > n_more:
            lead = SEAM
        target = len(head.ids) + n_more
        need = n_more - self._count(lead)
        for _ in range(self.tries if need >= 0 else 0):
            text = head.text + lead + self._window(need)
            ids = tuple(self.tok.encode(text, add_special_tokens=True))
            if len(ids) == target and ids[: len(head.ids)] == head.ids:
                return Prompt(text, ids)
            if ids[: len(head.ids)] == head.ids:  # only the count is off: a merge in the window
                need = max(0, need + target - len(ids))
        raise WorkloadError(
            f"could not extend a prompt of {len(head.ids)} tokens by exactly {n_more} tokens"
        )
