"""Length distributions beyond fixed and uniform (those are ``SyntheticWorkload``'s own).

- ``LogNormal``: a heavy tail given by its mean and its p99, drawn per request and rounded to
  whole tokens, clipped to [lo, hi]. ln X ~ Normal(mu, sigma), so ln p99 = mu + z sigma
  (z = 2.326, the normal's 99th percentile) and ln mean = mu + sigma²/2: sigma is the smaller
  root of sigma²/2 - z sigma + ln(p99/mean) = 0, which exists while p99/mean <= e^(z²/2)
  (about 14.97). (The larger root fits too, with a median far below the mean; the smaller is the
  tail real prompt and answer lengths show.) The clip moves the mean: a little by default,
  more where much of the distribution lies under the floor (a prefix group's prompts are
  clipped to at least its prefix_len + 32); a run reports the lengths it actually sent.
- ``load_pairs``: (input, output) token pairs from a CSV or JSONL file: an empirical
  distribution, a histogram in effect, of real requests.
"""

from __future__ import annotations

import math
import random
from pathlib import Path
from statistics import NormalDist

from pydantic import BaseModel, ConfigDict, Field, model_validator

from probes.prompts import WorkloadError
from probes.tables import read_table, whole

Z99 = NormalDist().inv_cdf(0.99)
MAX_P99_RATIO = math.exp(Z99**2 / 2)  # the largest p99 / mean a lognormal can have
_KEYS = {"in": "input", "out": "output"}


def lognormal_sigma(mean: float, p99: float) -> float:
    """The sigma of the lognormal of this mean and p99 (the smaller of the two that fit).

    Raises:
        ValueError: p99 not above the mean, or more than MAX_P99_RATIO times it.
    """
    r = math.log(p99 / mean)
    if r <= 0 or 2 * r > Z99**2:
        raise ValueError(f"no lognormal has mean {mean:g} and p99 {p99:g}")
    return Z99 - math.sqrt(Z99**2 - 2 * r)


def check_lognormal(side: str, mean: int, p99: int, lo: int, hi: int) -> None:
    """Whether these make a lognormal length; ``side`` is ``in`` or ``out``, for the keys.

    Raises:
        WorkloadError: naming the keys at fault and what would do.
    """
    mean_key = _KEYS[side]
    if p99 <= mean:
        raise WorkloadError(f"{side}_p99={p99} must exceed the mean {mean_key}={mean}")
    if p99 > MAX_P99_RATIO * mean:
        raise WorkloadError(
            f"{side}_p99={p99} is over {MAX_P99_RATIO:.2f}x the mean {mean_key}={mean}: no "
            f"lognormal has that mean and p99; lower {side}_p99 or raise {mean_key}"
        )
    if not lo < mean:
        raise WorkloadError(f"{side}_min={lo} must be below the mean {mean_key}={mean}")
    if hi < p99:
        raise WorkloadError(f"{side}_max={hi} must be at least {side}_p99={p99}")


class LogNormal(BaseModel):
    """A lognormal length of this mean and p99, in whole tokens, clipped to [lo, hi]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mean: int = Field(gt=0)
    p99: int = Field(gt=0)
    lo: int = Field(ge=1)
    hi: int = Field(ge=1)

    @model_validator(mode="after")
    def _fits(self) -> LogNormal:
        check_lognormal("in", self.mean, self.p99, self.lo, self.hi)
        return self

    @property
    def sigma(self) -> float:
        return lognormal_sigma(self.mean, self.p99)

    @property
    def mu(self) -> float:
        return math.log(self.mean) - self.sigma**2 / 2

    def draw(self, rng: random.Random) -> int:
        return min(self.hi, max(self.lo, round(rng.lognormvariate(self.mu, self.sigma))))

    def spec(self, side: str) -> str:
        """The spec's keys for this length (``side``: ``in`` or ``out``)."""
        return f"{side}_p99={self.p99},{side}_min={self.lo},{side}_max={self.hi}"


# Column names a pairs file may use: its own, the OpenAI usage's, the traces'.
INPUT_COLUMNS = ("input", "input_tokens", "prompt_tokens", "input_length", "ContextTokens")
OUTPUT_COLUMNS = (
    "output",
    "output_tokens",
    "completion_tokens",
    "output_length",
    "GeneratedTokens",
)


def load_pairs(path: Path) -> tuple[tuple[int, int], ...]:
    """The (input, output) token pairs of a CSV (with a header) or JSONL file.

    Raises:
        WorkloadError: naming the file and the missing column, or the line of a bad value.
    """
    rows, columns = read_table(path, "pairs file")
    found = []
    for names in (INPUT_COLUMNS, OUTPUT_COLUMNS):
        col = next((c for c in names if c in columns), None)
        if col is None:
            raise WorkloadError(
                f"pairs file {path}: no column {names[0]!r} (or {', '.join(names[1:])}); it "
                f"has: {', '.join(columns) or 'none'}"
            )
        found.append(col)
    pairs = []
    for line, row in rows:
        for col in found:
            if row.get(col) in (None, ""):
                raise WorkloadError(f"{path}:{line}: no value for {col!r}")
        pairs.append(
            (whole(path, line, found[0], row[found[0]]), whole(path, line, found[1], row[found[1]]))
        )
    return tuple(pairs)
