"""A character-level tokenizer with one special (BOS) token: exact, fast and predictable.

It has the two methods probes.workload.Tokenizer asks for. Every character is one token (its
code point + 1), and ``add_special_tokens=True`` prepends BOS (id 0), as Llama tokenizers do.
"""

from __future__ import annotations

from collections.abc import Sequence

BOS = 0


class CharTokenizer:
    def __init__(self, bos: bool = True) -> None:
        self.bos = bos
        self.encode_calls = 0

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.encode_calls += 1
        ids = [ord(c) + 1 for c in text]
        return [BOS, *ids] if (add_special_tokens and self.bos) else ids

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i - 1) for i in ids if i != BOS)
