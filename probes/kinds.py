"""What a workload is: the kinds of ``--workload`` (probes.spec parses them; probes.workload
prepares their requests) and the request ready to send.

- ``SyntheticWorkload``: generated prompts of given lengths (fixed, uniform over a spread, or
  lognormal), optionally in prefix groups or multi-turn sessions, optionally with gamma
  arrivals.
- ``PairsWorkload``: generated prompts whose lengths come from a file of (input, output)
  pairs, with the same options.
- ``TraceWorkload`` (probes.trace): a trace's requests, at its own times.
- ``FileWorkload``: prompts or chat messages written in a JSONL file.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from probes.arrivals import Gamma
from probes.lengths import LogNormal
from probes.prefixes import PrefixGroups, Sessions
from probes.trace import TraceWorkload

# The least a lognormal input is clipped to by default (after a prefix group's prefix, if
# any): room for a request's salt and some text of its own.
MIN_OWN_TOKENS = 32


@dataclass(slots=True, frozen=True)
class PreparedRequest:
    """One request ready to send: the path, the serialised body, the prompt tokens expected."""

    path: str  # "/v1/completions" or "/v1/chat/completions"
    body: bytes
    chat: bool
    prompt_tokens: int | None
    max_tokens: int
    # The prompt's first tokens that an earlier request of its set starts with too (a group's
    # prefix, a session's earlier turns, a trace's shared blocks): what a prefix cache holding
    # everything sent before could reuse.
    shared_tokens: int = 0


def shape_spec(
    prefix: PrefixGroups | None, sessions: Sessions | None, arrivals: Gamma | None
) -> list[str]:
    """The spec's parts for the options every generated workload takes."""
    return [x.spec for x in (prefix, sessions, arrivals) if x is not None]


class SyntheticWorkload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["synthetic"] = "synthetic"
    input_len: int = Field(gt=0)
    output_len: int = Field(gt=0)
    spread: float = Field(default=0.0, ge=0.0, lt=1.0)  # lengths uniform over +-spread
    input_dist: LogNormal | None = None  # a lognormal input of mean input_len
    output_dist: LogNormal | None = None  # a lognormal output of mean output_len
    prefix: PrefixGroups | None = None
    sessions: Sessions | None = None
    arrivals: Gamma | None = None  # None: Poisson

    @model_validator(mode="after")
    def _one_distribution(self) -> SyntheticWorkload:
        if self.spread and (self.input_dist or self.output_dist):
            raise ValueError("a spread and a lognormal length do not mix")
        return self

    @property
    def label(self) -> str:
        parts = [f"synthetic:input={self.input_len},output={self.output_len}"]
        if self.spread:
            parts.append(f"spread={self.spread:g}")
        if self.input_dist:
            parts.append(self.input_dist.spec("in"))
        if self.output_dist:
            parts.append(self.output_dist.spec("out"))
        return ",".join(parts + shape_spec(self.prefix, self.sessions, self.arrivals))

    def lengths(self, rng: random.Random) -> tuple[int, int]:
        """One request's (prompt, output) token counts: fixed, uniform over +-spread, or
        lognormal."""
        if self.input_dist or self.output_dist:
            n_in = self.input_dist.draw(rng) if self.input_dist else self.input_len
            n_out = self.output_dist.draw(rng) if self.output_dist else self.output_len
            return n_in, n_out
        if not self.spread:
            return self.input_len, self.output_len

        def draw(n: int) -> int:
            return rng.randint(max(1, round(n * (1 - self.spread))), round(n * (1 + self.spread)))

        return draw(self.input_len), draw(self.output_len)

    @property
    def shortest_input(self) -> int:
        if self.input_dist:
            return self.input_dist.lo
        return max(1, round(self.input_len * (1 - self.spread))) if self.spread else self.input_len

    @property
    def shares_prefixes(self) -> bool:
        return self.prefix is not None or self.sessions is not None


class PairsWorkload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["pairs"] = "pairs"
    path: str
    pairs: tuple[tuple[int, int], ...] = Field(min_length=1)  # (input, output) tokens
    order: Literal["cycle", "sample"] = "cycle"  # in the file's order, or drawn at random
    prefix: PrefixGroups | None = None
    sessions: Sessions | None = None
    arrivals: Gamma | None = None  # None: Poisson

    @property
    def label(self) -> str:
        order = ["order=sample"] if self.order == "sample" else []
        shape = shape_spec(self.prefix, self.sessions, self.arrivals)
        return ",".join([f"pairs:{self.path}", *order, *shape])

    @property
    def items(self) -> tuple[tuple[int, int], ...]:
        """The file's entries (as a file workload's ``items``)."""
        return self.pairs

    def pair(self, i: int, rng: random.Random) -> tuple[int, int]:
        """The i-th request's (prompt, output) token counts."""
        if self.order == "sample":
            return self.pairs[rng.randrange(len(self.pairs))]
        return self.pairs[i % len(self.pairs)]

    @property
    def shortest_input(self) -> int:
        return min(p[0] for p in self.pairs)


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


Workload = SyntheticWorkload | PairsWorkload | TraceWorkload | FileWorkload
Generated = SyntheticWorkload | PairsWorkload  # prompts built to lengths, with shape options
