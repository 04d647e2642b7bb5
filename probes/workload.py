"""Workloads: what requests the load client sends, and when (``--workload``).

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

Workloads with the shape of real traffic (probes.spec parses them), each prompt exact in its
tokens like the above:

=================================================  ==========================================
``...,in_p99=4096`` / ``...,out_p99=1024``         that length lognormal, of mean ``input``
                                                   (``output``) and this p99 (probes.lengths),
                                                   clipped to ``in_min``..``in_max``: by
                                                   default 32 (plus ``prefix_len``) and 4 x
                                                   p99; ``out_min`` 1. ``dist=fixed|uniform|
                                                   lognormal`` may say it too; not with spread
``...,prefix_groups=4,prefix_len=256``             4 system prompts of exactly 256 tokens;
``[,prefix_share=0.8]``                            80 % of requests (default all) start with
                                                   one, drawn at random (probes.prefixes);
                                                   the input counts it and must exceed it
``...,turns=3[,sessions=8]``                       3-turn sessions: a later turn's prompt is
                                                   the earlier one's, a stand-in answer of its
                                                   output's length and a new ``input``-long
                                                   part; 8 sessions side by side
``...,arrivals=gamma,cv=2`` (or ``burstiness=``)   gamma gaps of coefficient of variation 2
                                                   (vLLM's ``--burstiness`` = 1/cv²) instead
                                                   of Poisson (probes.arrivals)
``pairs:FILE[,order=sample]``                      lengths from a CSV/JSONL of (input, output)
                                                   token pairs, cycled or drawn at random; it
                                                   takes the prefix, turns and arrivals keys
``trace:FILE[,scale=1.0][,block=512]``             a trace replayed at its own times (Azure's
                                                   or Mooncake's columns; probes.trace),
                                                   ``scale`` times as fast; Mooncake's
                                                   ``hash_ids`` become shared prefix blocks
=================================================  ==========================================

A workload's arrivals at a load: ``arrival_schedule`` (the load is a rate in requests/s, or a
trace's time scale: ``load_axis``). The load client and the tuner keep one axis, a rate, for
every workload: ``rate_schedule`` is the workload's own process at a rate (a trace replayed at
time scale rate / its own mean rate: ``trace_scale``), or None for Poisson, the client's own.
``probes.describe`` describes a workload and what it sent for report.json.

Request bodies are serialised once, before the clock starts, to keep the client lean.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Literal

import orjson

from probes import spec as specs
from probes.arrivals import Schedule, gamma_schedule, offsets, trace_offsets, trace_schedule
from probes.compose import prepare_generated, prepare_trace
from probes.kinds import (
    FileItem,
    FileWorkload,
    Generated,
    PairsWorkload,
    PreparedRequest,
    SyntheticWorkload,
    Workload,
)
from probes.prefixes import PrefixGroups
from probes.prompts import PromptBuilder, Tokenizer, WorkloadError, synthetic_prompt
from probes.tables import file_lines
from probes.trace import TraceWorkload

__all__ = [
    "FileItem",
    "FileWorkload",
    "PairsWorkload",
    "PreparedRequest",
    "SyntheticWorkload",
    "Tokenizer",
    "TraceWorkload",
    "Workload",
    "WorkloadError",
    "arrival_schedule",
    "check_buildable",
    "load_axis",
    "needs_tokenizer",
    "parse_workload",
    "prepare_requests",
    "rate_schedule",
    "synthetic_prompt",
    "trace_scale",
]

DEFAULT_FILE_MAX_TOKENS = 128


def parse_workload(spec: str) -> Workload:
    """Parse ``--workload``: ``synthetic:...``, ``pairs:FILE...``, ``trace:FILE...`` or a path
    to a JSONL file.

    Raises:
        WorkloadError: naming the bad spec, key or line number.
    """
    if spec == "synthetic" or spec.startswith("synthetic:"):
        return specs.parse_synthetic(spec)
    if spec.startswith("pairs:"):
        return specs.parse_pairs(spec)
    if spec.startswith("trace:"):
        return specs.parse_trace(spec)
    return load_file_workload(Path(spec))


def load_file_workload(path: Path) -> FileWorkload:
    lines = file_lines(
        path,
        "workload",
        missing=f"workload {str(path)!r} is neither synthetic:input=N,output=M "
        "nor an existing file",
        hint=" (one JSON object a line)",
    )
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


def check_buildable(workload: Workload, tokenizer: Tokenizer | None) -> None:
    """Whether the workload's shortest prompt can be built with this tokenizer, before any
    engine starts (a request's salt and the special tokens take some of its tokens).

    Raises:
        WorkloadError: the prompts cannot be built, with the shortest input that can.
    """
    if isinstance(workload, FileWorkload):
        return
    if tokenizer is None:
        raise WorkloadError(f"a {workload.kind} workload needs the model's tokenizer")
    if isinstance(workload, TraceWorkload):
        return  # a row too short for its salt is sent without it: any length builds
    if workload.prefix is not None:
        _check_prefixed(workload, workload.prefix, tokenizer)
        return
    if isinstance(workload, PairsWorkload):
        return  # like a trace's rows
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


def _check_prefixed(workload: Generated, prefix: PrefixGroups, tokenizer: Tokenizer) -> None:
    """Whether a prefix group's prompt of the shortest input builds: its shared prefix, then
    at least one token of its own.

    Raises:
        WorkloadError: with the shortest input that can be built.
    """
    builder = PromptBuilder(tokenizer, random.Random(0))
    try:
        head = builder.shared([("ffffffff:g0", prefix.length)])
    except WorkloadError:
        tag = len(tokenizer.encode("[ffffffff:g0] ", add_special_tokens=False))
        raise WorkloadError(
            f"workload {workload.label}: a shared prefix of {prefix.length} tokens cannot be "
            f"built with this model's tokenizer (each group's prefix starts with a tag of {tag} "
            f"tokens that keeps it apart from other runs'); give prefix_len above {tag}"
        ) from None
    n = workload.shortest_input
    try:
        builder.extend(head, n - len(head.ids), "[ffffffff-99999] ")
    except WorkloadError:
        specials = len(head.ids) - prefix.length
        with_specials = f" and {specials} special token(s)" if specials else ""
        raise WorkloadError(
            f"workload {workload.label}: a prompt of {n} tokens (its shortest) leaves no room "
            f"after its {prefix.length}-token shared prefix{with_specials} for a part "
            f"of its own; the shortest that can is {len(head.ids) + 1} tokens"
        ) from None


def needs_tokenizer(workload: Workload) -> bool:
    """Whether the workload's prompts are built to token counts with the model's tokenizer
    (every kind but a file of written prompts)."""
    return not isinstance(workload, FileWorkload)


def trace_scale(workload: TraceWorkload, rate_rps: float) -> float:
    """The time scale a trace is replayed at for a rate: rate / the trace's own mean rate.

    Raises:
        WorkloadError: a trace whose requests all arrive at once has no rate to scale.
    """
    own = workload.rate_rps
    if own is None:
        raise WorkloadError(
            f"trace {workload.path}: all its {len(workload.rows)} requests arrive at once, so it "
            "has no rate to replay it at; give its requests their times"
        )
    return rate_rps / own


def rate_schedule(workload: Workload, rate_rps: float) -> Schedule | None:
    """The open loop's arrivals at ``rate_rps`` where the workload has its own process: gamma
    gaps (``arrivals=gamma``), or a trace's own times at time scale ``trace_scale``; None
    where it has Poisson's (the load client's own schedule, unchanged).

    Raises:
        WorkloadError: a trace with no rate (``trace_scale``).
        ValueError: a rate that is not above 0.
    """
    if isinstance(workload, TraceWorkload):
        return trace_schedule(workload.times_s, trace_scale(workload, rate_rps))
    process = None if isinstance(workload, FileWorkload) else workload.arrivals
    return None if process is None else gamma_schedule(rate_rps, process.cv)


def load_axis(workload: Workload) -> Literal["rate_rps", "time_scale"]:
    """What ``arrival_schedule``'s load means for this workload: a rate in requests/s, or a
    trace's time scale (1 = its own times, 2 = twice as fast)."""
    return "time_scale" if isinstance(workload, TraceWorkload) else "rate_rps"


def arrival_schedule(workload: Workload, n: int, load: float, seed: int) -> list[float]:
    """The open-loop arrival times of ``n`` requests at ``load``, in seconds from the first.

    A trace replays its own times divided by ``load`` (its time scale: ``load_axis``), request
    i at its row i (as ``prepare_requests`` builds them; its spec's ``scale`` is the load for
    a run that does not sweep it); every other workload arrives at
    ``load`` requests/s, by its own ``arrivals`` process (gamma) or Poisson, which is exactly
    ``probes.client.arrival_offsets`` for the same seed.

    Raises:
        ValueError: a load that is not above 0.
    """
    if isinstance(workload, TraceWorkload):
        return trace_offsets(workload.times_s, n, load)
    process = None if isinstance(workload, FileWorkload) else workload.arrivals
    return offsets(process, n, load, seed)


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
    """Build ``n`` requests (a file workload is cycled, a trace in time order) with a salt
    drawn from ``seed``; prefixes are shared only where the workload asks (probes.compose).

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
    if isinstance(workload, SyntheticWorkload) and not workload.shares_prefixes:
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
    if not isinstance(workload, FileWorkload):
        if tokenizer is None:
            raise WorkloadError(f"a {workload.kind} workload needs the model's tokenizer")

        def emit(prompt: str, n_in: int, n_out: int, shared: int) -> PreparedRequest:
            body = {**common, "prompt": prompt, "max_tokens": n_out}
            if ignore_eos:
                body["ignore_eos"] = True
            return PreparedRequest(
                "/v1/completions", orjson.dumps(body), False, n_in, n_out, shared
            )

        builder = PromptBuilder(tokenizer, rng)
        if isinstance(workload, TraceWorkload):
            return prepare_trace(workload, n, builder, run_salt, emit)
        return prepare_generated(workload, n, builder, run_salt, emit)
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
