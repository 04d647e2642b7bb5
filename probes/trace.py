"""Trace replay: a file of requests with their arrival times and token counts.

Two public formats, told apart by their columns (CSV with a header, or JSONL):

- Azure's LLM inference trace (AzurePublicDataset, 2023 and 2024): ``TIMESTAMP`` (a date and
  time, ``2023-11-16 18:15:46.6805900``, with any number of decimals and an optional UTC
  offset; or a number of seconds), ``ContextTokens``, ``GeneratedTokens``.
- Mooncake's (FAST '25): ``timestamp`` (milliseconds), ``input_length``, ``output_length`` and
  optionally ``hash_ids``, the ids of the prompt's prefix blocks of ``block`` tokens (512 in
  Mooncake's traces): two requests whose lists start with the same ids share those blocks.

Rows are replayed in time order; a request's arrival is its time from the trace's first,
divided by the time scale (probes.arrivals): the spec's ``scale`` is the one a run that fixes
its load replays at; a capacity search sweeps it. The prompt has exactly the row's input
tokens, the request asks for exactly its output tokens (at least one: a request cannot ask
for none, so a row's 0 is sent as 1). A row's prefix blocks become shared texts of exactly
``block`` tokens each, one per id and run (salted per run, like every prompt), followed by
the request's own part; a last partial block is the request's own.
"""

from __future__ import annotations

import calendar
import re
from pathlib import Path
from typing import Any, Literal, NamedTuple

import orjson
from pydantic import BaseModel, ConfigDict, Field

from probes.prompts import WorkloadError
from probes.tables import number, read_table, whole

AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE = ("timestamp", "input_length", "output_length")
DEFAULT_BLOCK = 512
_DATETIME = re.compile(
    r"\s*(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:\.(\d+))?\s*(Z|[+-]\d\d:?\d\d)?\s*"
)


class TraceRow(NamedTuple):
    t_s: float  # from the trace's first arrival
    input: int
    output: int
    hash_ids: tuple[int, ...] = ()


class TraceWorkload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["trace"] = "trace"
    path: str
    format: Literal["azure", "mooncake"]
    rows: tuple[TraceRow, ...] = Field(min_length=1)
    scale: float = Field(default=1.0, gt=0)  # the time scale a run at one load replays at
    block: int = Field(default=DEFAULT_BLOCK, gt=0)  # tokens per hash id

    @property
    def label(self) -> str:
        scale = f",scale={self.scale:g}" if self.scale != 1.0 else ""
        block = f",block={self.block}" if self.block != DEFAULT_BLOCK else ""
        return f"trace:{self.path}{scale}{block}"

    @property
    def items(self) -> tuple[TraceRow, ...]:
        """The file's entries (as a file workload's ``items``)."""
        return self.rows

    @property
    def times_s(self) -> list[float]:
        return [r.t_s for r in self.rows]

    @property
    def duration_s(self) -> float:
        return self.rows[-1].t_s - self.rows[0].t_s

    @property
    def rate_rps(self) -> float | None:
        """The trace's own mean rate (arrivals after the first over its span); None for a
        trace whose requests all arrive at once."""
        span = self.duration_s
        return (len(self.rows) - 1) / span if span > 0 else None


def load_trace(path: Path, *, scale: float = 1.0, block: int = DEFAULT_BLOCK) -> TraceWorkload:
    """Read an Azure or Mooncake trace.

    Raises:
        WorkloadError: naming the file and the missing column, or the line and the bad value.
    """
    rows, columns = read_table(path, "trace")
    if any(c in columns for c in AZURE):
        fmt: Literal["azure", "mooncake"] = "azure"
        names = AZURE
    elif any(c in columns for c in MOONCAKE):
        fmt, names = "mooncake", MOONCAKE
    else:
        raise WorkloadError(
            f"trace {path}: neither Azure's columns ({', '.join(AZURE)}) nor Mooncake's "
            f"({', '.join(MOONCAKE)}[, hash_ids]); it has: {', '.join(columns) or 'none'}"
        )
    for c in names:
        if c not in columns:
            which = "Azure's" if fmt == "azure" else "Mooncake's"
            raise WorkloadError(
                f"trace {path}: no column {c!r} ({which} trace has {', '.join(names)})"
            )
    stamps: list[tuple[int, float]] = []  # (whole seconds, fraction): exact to the ns
    out: list[tuple[int, int, tuple[int, ...]]] = []
    for line, row in rows:
        for c in names:
            if row.get(c) in (None, ""):
                raise WorkloadError(f"{path}:{line}: no value for {c!r}")
        t, n_in, n_out = (row[c] for c in names)
        if fmt == "azure":
            stamps.append(_azure_time(path, line, t))
        else:
            ms = number(path, line, names[0], t)
            stamps.append((int(ms // 1000), (ms % 1000) / 1000))
        hashes = _hash_ids(path, line, row.get("hash_ids")) if fmt == "mooncake" else ()
        out.append(
            (
                whole(path, line, names[1], n_in),
                max(1, whole(path, line, names[2], n_out, least=0)),
                hashes,
            )
        )
    first = min(stamps)
    times = [(s - first[0]) + (f - first[1]) for s, f in stamps]
    order = sorted(range(len(out)), key=times.__getitem__)  # stable: ties keep the file's order
    return TraceWorkload(
        path=str(path),
        format=fmt,
        rows=tuple(TraceRow(times[i], *out[i]) for i in order),
        scale=scale,
        block=block,
    )


def _azure_time(path: Path, line: int, value: Any) -> tuple[int, float]:
    """Azure's TIMESTAMP as (whole seconds since the epoch, fraction), or a number of
    seconds."""
    m = _DATETIME.fullmatch(value) if isinstance(value, str) else None
    if m is None:
        seconds = number(path, line, "TIMESTAMP", value)
        return int(seconds // 1), seconds % 1
    y, mo, d, h, mi, s = (int(m[k]) for k in range(1, 7))
    whole_s = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    if m[8] and m[8] != "Z":
        sign = -1 if m[8][0] == "-" else 1
        digits = m[8][1:].replace(":", "")
        whole_s -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return whole_s, float(f"0.{m[7]}") if m[7] else 0.0


def _hash_ids(path: Path, line: int, value: Any) -> tuple[int, ...]:
    """A row's hash_ids: a JSON list (in JSONL, or as a CSV cell's text); none where absent."""
    if value in (None, ""):
        return ()
    ids = value
    if isinstance(value, str):
        try:
            ids = orjson.loads(value)
        except orjson.JSONDecodeError:
            ids = None
    if not isinstance(ids, list):
        raise WorkloadError(f"{path}:{line}: hash_ids must be a list of ids, got {value!r}")
    return tuple(whole(path, line, "hash_ids", v, least=0) for v in ids)
