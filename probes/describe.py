"""A workload described for report.json: what it is, and the lengths it actually sent.

``describe`` gives the kind, the spec (which parses back to the same workload), its parameters
and, from the prepared requests, what was sent: the number of requests, the mean, p50 and p99
of their prompt tokens and of the output tokens they asked for (``max_tokens``: with
``ignore_eos``, what the server generates), and the prefix share: the fraction of all prompt
tokens that an earlier request of the set starts with too (a prefix group's system prompt, a
session's earlier turns, a trace's shared blocks), what a prefix cache holding everything sent
before could reuse. Percentiles interpolate linearly (numpy's default, as everywhere).

What was sent is read from the prepared requests, or from the records of the requests a run
sent (``sent``: each record keeps its request's prompt tokens, output asked and shared tokens),
so a tuning run describes every request its points sent, from its records on disk.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from probes.kinds import PairsWorkload, SyntheticWorkload, Workload
from probes.records import RequestRecord
from probes.trace import TraceWorkload


class SentRequest(Protocol):
    """What a request sent, as a prepared request (probes.kinds.PreparedRequest) says it."""

    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def shared_tokens(self) -> int: ...


class Sent(NamedTuple):
    """What a request sent, from its record."""

    prompt_tokens: int | None
    max_tokens: int
    shared_tokens: int


def sent(records: Iterable[RequestRecord]) -> list[Sent]:
    """What the recorded requests sent: every record that was sent (a failed request was
    sent too) and keeps its request's figures (records written before they were kept do not)."""
    return [
        Sent(r.n_prompt_expected, r.max_tokens, r.n_prompt_shared or 0)
        for r in records
        if r.max_tokens is not None and not math.isnan(r.t_send)
    ]


def describe(workload: Workload, requests: Sequence[SentRequest]) -> dict[str, Any]:
    """The workload and what its ``requests`` send (prepared, or ``sent`` from records),
    JSON-ready.

    The input statistics and the prefix share are None where the prompts' tokens were not
    counted (a file of prompts, sent without a tokenizer).
    """
    ins = [r.prompt_tokens for r in requests if r.prompt_tokens is not None]
    counted = bool(requests) and len(ins) == len(requests)
    total_in = sum(ins)
    share = sum(r.shared_tokens for r in requests) / total_in if counted and total_in else None
    return {
        "kind": workload.kind,
        "spec": workload.label,
        "parameters": parameters(workload),
        "sent": {
            "requests": len(requests),
            "input_tokens": _stats(ins) if counted else None,
            "output_tokens": _stats([r.max_tokens for r in requests]),
            "prefix_share": share,
        },
    }


def parameters(workload: Workload) -> dict[str, Any]:
    """The workload's parameters; a file's, by the file and how many entries it has."""
    if isinstance(workload, SyntheticWorkload):
        return workload.model_dump(exclude={"kind"})
    if isinstance(workload, PairsWorkload):
        return {
            "path": workload.path,
            "pairs": len(workload.pairs),
            **workload.model_dump(include={"order", "prefix", "sessions", "arrivals"}),
        }
    if isinstance(workload, TraceWorkload):
        return {
            "path": workload.path,
            "format": workload.format,
            "rows": len(workload.rows),
            "scale": workload.scale,
            "block": workload.block,
            "duration_s": workload.duration_s,
            "rate_rps": workload.rate_rps,
        }
    return {"path": workload.path, "items": len(workload.items)}


def _stats(values: Sequence[int]) -> dict[str, float] | None:
    if not values:
        return None
    p50, p99 = np.percentile(values, [50, 99])
    return {"mean": float(np.mean(values)), "p50": float(p50), "p99": float(p99)}
