"""Prefixes shared on purpose: prefix groups and multi-turn sessions (which requests share what).

- ``PrefixGroups``: ``groups`` distinct system prompts of ``length`` tokens each (after the
  special tokens the tokenizer adds, if any); a ``share`` of the requests start with one of
  them, drawn at random, then their own salted part. Which requests belong is spread evenly
  (request i belongs where floor((i + 1) share) > floor(i share)), so any stretch of the
  requests holds the share to within one request. Each group's text is salted per run like
  every prompt, so nothing is shared with another run or another point.
- ``Sessions``: conversations of ``turns`` turns. A later turn's prompt is the turn before's
  prompt, a stand-in for its answer (as many tokens as that turn's output) and a new user part
  (the turn's own drawn input length), so it extends the earlier prompt token for token.
  ``width`` sessions run side by side: request i is turn (k mod turns) of a session in slot
  i mod width (k = i div width), so a session's turns are ``width`` requests apart, about
  width / R seconds at rate R, time for its earlier turn to be answered, as a user's would
  be. (The load client does not wait for that answer: the schedule stays open-loop.)
"""

from __future__ import annotations

import math
import random

from pydantic import BaseModel, ConfigDict, Field

from probes.arrivals import number_spec

DEFAULT_SESSION_WIDTH = 8


class PrefixGroups(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: int = Field(gt=0)
    length: int = Field(gt=0)  # tokens of each group's shared prefix
    share: float = Field(default=1.0, gt=0.0, le=1.0)  # of the requests (sessions) in a group

    @property
    def spec(self) -> str:
        tail = f",prefix_share={number_spec(self.share)}" if self.share != 1.0 else ""
        return f"prefix_groups={self.groups},prefix_len={self.length}{tail}"

    def member(self, i: int) -> bool:
        """Whether the i-th request (session) starts with a group's prefix."""
        return math.floor((i + 1) * self.share + 1e-9) > math.floor(i * self.share + 1e-9)

    def pick(self, i: int, rng: random.Random) -> int | None:
        """The group of the i-th request (session), or None where it has none."""
        return rng.randrange(self.groups) if self.member(i) else None


class Sessions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    turns: int = Field(gt=1)
    width: int = Field(default=DEFAULT_SESSION_WIDTH, gt=0)  # sessions side by side

    @property
    def spec(self) -> str:
        tail = f",sessions={self.width}" if self.width != DEFAULT_SESSION_WIDTH else ""
        return f"turns={self.turns}{tail}"

    def place(self, i: int) -> tuple[int, int]:
        """The i-th request's (session, turn), both from 0."""
        slot, k = i % self.width, i // self.width
        return slot + self.width * (k // self.turns), k % self.turns
