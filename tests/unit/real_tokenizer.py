"""The embedded default's own tokenizer (SmolLM2-135M's byte-level BPE, installed by setup.sh),
loaded once: where token counts must be exact across the seams a real tokenizer can merge.

Tests that build prompts run with it and with tests.fakes.tokenizer.CharTokenizer (one
character a token, plus a BOS special token, which SmolLM2's tokenizer does not add).
"""

from __future__ import annotations

from functools import lru_cache

from probes.workload import Tokenizer
from tests.fakes.tokenizer import CharTokenizer


@lru_cache(maxsize=1)
def smollm2() -> Tokenizer:
    from transformers import AutoTokenizer

    try:
        from tuner.engines.models import resolve_model
    except ImportError:  # where tuner/ is not split into packages yet
        from tuner.models import resolve_model  # type: ignore[no-redef]

    tok: Tokenizer = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m").path)
    return tok


def tokenizer(name: str) -> Tokenizer:
    """``"char"`` or ``"smollm2"``."""
    return CharTokenizer() if name == "char" else smollm2()


TOKENIZERS = ["char", "smollm2"]
