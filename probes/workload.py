"""Workloads: what requests the load client sends.

- ``synthetic:input=128,output=64``: fixed lengths, sent to ``/v1/completions`` with exactly
  ``input`` prompt tokens counted with the model's own tokenizer (checked later against the
  server's ``usage.prompt_tokens``). Prompts are windows of real public-domain text
  (probes/data/corpus.txt), each behind a distinct salted prefix, so no two requests share a
  prefix and a prefix cache cannot flatter TTFT by accident; the salt is fresh per run.
  ``ignore_eos`` forces the output length where the engine accepts it.
- ``synthetic:input=128,output=64,spread=0.5``: each request's lengths drawn uniformly over
  +-50 % of those (integers, like vLLM's ``--random-range-ratio``), so that a closed loop does
  not march in lockstep; each prompt still has exactly its drawn number of tokens.
- ``FILE.jsonl``: each line ``{"prompt": ...}`` (to ``/v1/completions``) or
  ``{"messages": [...]}`` (to ``/v1/chat/completions``), optional ``"max_tokens"``. The file is
  cycled; every request gets the salted prefix too (at the start of its prompt, or of its first
  message's text), unless its line says ``"shared_prefix": true``: then it is sent as written,
  for a workload whose requests share prefixes on purpose.

Request bodies are serialised once, before the clock starts, to keep the client lean.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import orjson
from pydantic import BaseModel, ConfigDict, Field

CORPUS = Path(__file__).parent / "data" / "corpus.txt"
DEFAULT_FILE_MAX_TOKENS = 128


class WorkloadError(ValueError):
    """A malformed workload spec or file; the message names the spec or the line."""


class Tokenizer(Protocol):
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...
    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(slots=True, frozen=True)
class PreparedRequest:
    """One request ready to send: the path, the serialised body, the prompt tokens expected."""

    path: str  # "/v1/completions" or "/v1/chat/completions"
    body: bytes
    chat: bool
    prompt_tokens: int | None
    max_tokens: int


class SyntheticWorkload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["synthetic"] = "synthetic"
    input_len: int = Field(gt=0)
    output_len: int = Field(gt=0)
    spread: float = Field(default=0.0, ge=0.0, lt=1.0)  # lengths uniform over +-spread

    @property
    def label(self) -> str:
        tail = f",spread={self.spread:g}" if self.spread else ""
        return f"synthetic:input={self.input_len},output={self.output_len}{tail}"

    def lengths(self, rng: random.Random) -> tuple[int, int]:
        """One request's (prompt, output) token counts: fixed, or uniform over +-spread."""
        if not self.spread:
            return self.input_len, self.output_len

        def draw(n: int) -> int:
            return rng.randint(max(1, round(n * (1 - self.spread))), round(n * (1 + self.spread)))

        return draw(self.input_len), draw(self.output_len)

    @property
    def shortest_input(self) -> int:
        return max(1, round(self.input_len * (1 - self.spread))) if self.spread else self.input_len


class FileItem(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    max_tokens: int | None = Field(default=None, gt=0)
    shared_prefix: bool = False  # sent as written: no salted prefix (shares prefixes on purpose)


class FileWorkload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["file"] = "file"
    path: str
    items: tuple[FileItem, ...]

    @property
    def label(self) -> str:
        return self.path


Workload = SyntheticWorkload | FileWorkload

_SYN_KEYS = {"input": "input_len", "output": "output_len"}
_SYN_FORM = "synthetic:input=128,output=64[,spread=0.5]"


def parse_workload(spec: str) -> Workload:
    """Parse ``--workload``: ``synthetic:input=N,output=M`` or a path to a JSONL file.

    Raises:
        WorkloadError: naming the bad spec, key or line number.
    """
    if spec == "synthetic" or spec.startswith("synthetic:"):
        body = spec[len("synthetic") :].lstrip(":")
        values: dict[str, int] = {}
        spread = 0.0
        for part in filter(None, body.split(",")):
            m = re.fullmatch(r"\s*(\w+)\s*=\s*(\d+(?:\.\d+)?)\s*", part)
            if m and m[1] == "spread":
                spread = float(m[2])
                if not 0.0 <= spread < 1.0:
                    raise WorkloadError(f"workload {spec!r}: spread must be in [0, 1), e.g. 0.5")
                continue
            if not m or m[1] not in _SYN_KEYS or "." in m[2]:
                raise WorkloadError(f"workload {spec!r}: bad part {part!r}; form: {_SYN_FORM}")
            values[_SYN_KEYS[m[1]]] = int(m[2])
        missing = [k for k, v in _SYN_KEYS.items() if v not in values]
        if missing:
            raise WorkloadError(f"workload {spec!r} lacks {', '.join(missing)}")
        if min(values.values()) <= 0:
            raise WorkloadError(f"workload {spec!r}: lengths must be positive")
        return SyntheticWorkload(**values, spread=spread)
    return load_file_workload(Path(spec))


def load_file_workload(path: Path) -> FileWorkload:
    if not path.is_file():
        raise WorkloadError(
            f"workload {str(path)!r} is neither synthetic:input=N,output=M nor an existing file"
        )
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise WorkloadError(f"workload {path}: not UTF-8 text (one JSON object a line)") from None
    except OSError as exc:
        raise WorkloadError(f"workload {path}: cannot be read: {exc.strerror or exc}") from None
    items: list[FileItem] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = orjson.loads(line)
            item = FileItem.model_validate(data)
        except Exception as exc:
            raise WorkloadError(f"{path}:{n}: not a valid workload line: {exc}") from None
        if (item.prompt is None) == (item.messages is None):
            raise WorkloadError(f"{path}:{n}: give exactly one of 'prompt' or 'messages'")
        items.append(item)
    if not items:
        raise WorkloadError(f"{path}: no requests in the file")
    return FileWorkload(path=str(path), items=tuple(items))


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


def check_buildable(workload: Workload, tokenizer: Tokenizer | None) -> None:
    """Whether the workload's shortest prompt can be built with this tokenizer, before any
    engine starts (a request's salt and the special tokens take some of its tokens).

    Raises:
        WorkloadError: the prompts cannot be built, with the shortest input that can.
    """
    if not isinstance(workload, SyntheticWorkload):
        return
    if tokenizer is None:
        raise WorkloadError("a synthetic workload needs the model's tokenizer")
    n = workload.shortest_input
    salt = "[ffffffff-99999] "  # as long as a run's salts get
    try:
        synthetic_prompt(tokenizer, n, salt, random.Random(0))
    except WorkloadError:
        least = len(tokenizer.encode(salt, add_special_tokens=True)) + 1
        for m in range(least, least + 16):  # the first length that builds (seams can merge)
            try:
                synthetic_prompt(tokenizer, m, salt, random.Random(0))
                least = m
                break
            except WorkloadError:
                continue
        spread = " (its shortest, with the spread)" if workload.spread else ""
        raise WorkloadError(
            f"workload {workload.label}: a prompt of {n} tokens{spread} cannot be built with this "
            f"model's tokenizer (each request starts with a distinct prefix); the shortest that "
            f"can is {least} tokens"
        ) from None


def prepare_requests(
    workload: Workload,
    n: int,
    *,
    model: str,
    tokenizer: Tokenizer | None,
    seed: int,
    ignore_eos: bool = True,
    extra_body: dict[str, Any] | None = None,
) -> list[PreparedRequest]:
    """Build ``n`` requests (a file workload is cycled) with a salt drawn from ``seed``.

    Greedy sampling (temperature 0), streamed, with usage in the last chunk. The caller gives
    a fresh ``seed`` per call (drawn from the run's random salt), so no two calls, and no two
    runs, send the same prefix.
    """
    rng = random.Random(seed)
    run_salt = f"{rng.getrandbits(32):08x}"
    common: dict[str, Any] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
        **(extra_body or {}),
    }
    out: list[PreparedRequest] = []
    if isinstance(workload, SyntheticWorkload):
        if tokenizer is None:
            raise WorkloadError("a synthetic workload needs the model's tokenizer")
        for i in range(n):
            n_in, n_out = workload.lengths(rng)
            prompt = synthetic_prompt(tokenizer, n_in, f"[{run_salt}-{i}] ", rng)
            body = {**common, "prompt": prompt, "max_tokens": n_out}
            if ignore_eos:
                body["ignore_eos"] = True
            out.append(PreparedRequest("/v1/completions", orjson.dumps(body), False, n_in, n_out))
        return out
    for i in range(n):
        item = workload.items[i % len(workload.items)]
        max_tokens = item.max_tokens or DEFAULT_FILE_MAX_TOKENS
        body = {**common, "max_tokens": max_tokens}
        salt = "" if item.shared_prefix else f"[{run_salt}-{i}] "
        if item.messages is not None:
            body["messages"] = _salted_messages(item.messages, salt)
            out.append(
                PreparedRequest("/v1/chat/completions", orjson.dumps(body), True, None, max_tokens)
            )
        else:
            body["prompt"] = salt + (item.prompt or "")
            out.append(
                PreparedRequest("/v1/completions", orjson.dumps(body), False, None, max_tokens)
            )
    return out


def _salted_messages(messages: list[dict[str, Any]], salt: str) -> list[dict[str, Any]]:
    """The messages with ``salt`` before the first message's text (string content, or the
    first text part of a content list); unchanged without a salt or a text to put it on."""
    if not salt:
        return messages
    out = [dict(m) for m in messages]
    for m in out:
        content = m.get("content")
        if isinstance(content, str):
            m["content"] = salt + content
            return out
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and part.get("type") == "text":
                    m["content"] = [
                        *content[:j],
                        {**part, "text": salt + str(part.get("text", ""))},
                        *content[j + 1 :],
                    ]
                    return out
    return out
