"""A discrete-event simulation of vLLM's continuous-batching scheduler (v1, FCFS).

Each step, as vLLM 0.32's ``Scheduler.schedule`` does it:

1. **Running requests first**, in the order they were admitted: each asks for the tokens it has
   not computed yet (one for a decoding sequence; the rest of its prompt for one still
   prefilling), capped by the step's token budget (``max_num_batched_tokens``) and by
   ``long_prefill_threshold`` where set (unless the request is the only one running or
   waiting, as vLLM does). Its KV blocks (``block_size`` tokens each) must cover
   its computed tokens plus the new ones; where the cache has too few free blocks the most
   recently admitted running request is preempted (recompute: its blocks are freed, its
   computed tokens forgotten, and it goes back to the front of the waiting queue), until the
   request fits or is itself the one preempted.
2. **Then waiting requests**, first come first served, while the budget lasts, the batch holds
   fewer than ``max_num_seqs`` sequences and no request was preempted in this step. A prompt
   larger than the budget that is left is split (chunked prefill) or, with chunked prefill off,
   waits for a step with budget enough for all of it (and stops admission behind it). With the
   prefix cache on, a hit skips the request's cached tokens (whole blocks of its shared prefix).
3. The step takes ``StepModel.step_s`` of what it computed. At its end every request whose
   computed tokens reach its length (prompt plus outputs so far) samples one token; one that
   has all its output tokens finishes and frees its blocks.

A request reaches the engine ``overhead_s`` after it is sent (the step model's constant, which
stands for the front end's part of TTFT), and later by ``admit_per_seq_s`` for each request
running when it arrives: the front end that tokenises it and hands it to the engine is the one
that processes every running sequence's outputs, on the same cores, so under load a request can
miss the step it would have joined (tuner/servemodel/admission.py fits the delay). Tokens
reach the client in chunks of ``stream_interval`` (the first at once, the last when the
request finishes), as vLLM streams them. The result is a list of
``probes.records.RequestRecord``, the records the load client writes, so a simulated point is
summarised and judged exactly like a measured one.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from probes.records import RequestRecord
from tuner.servemodel.steptime import StepModel, attention_pairs


@dataclass(frozen=True)
class Knobs:
    """The scheduler knobs as the engine takes them (vLLM's names)."""

    max_num_seqs: int
    max_num_batched_tokens: int
    enable_chunked_prefill: bool = True
    kv_blocks: int | None = None  # None: the cache never runs out
    block_size: int = 128  # vLLM's CPU backend default
    stream_interval: int = 1
    long_prefill_threshold: int = 0  # 0: no cap per request per step
    prefix_caching: bool = False  # shared prompt prefixes are computed once (whole blocks)

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be at least 1")
        if self.block_size < 1 or self.stream_interval < 1:
            raise ValueError("block_size and stream_interval must be at least 1")


@dataclass(frozen=True)
class Arrival:
    """One request as the workload sends it."""

    t_s: float
    n_in: int
    n_out: int
    cached_tokens: int = 0  # prompt tokens a prefix cache would hold (shared prefixes)


@dataclass(slots=True)
class _Req:
    index: int
    t_sched: float
    n_in: int
    n_out: int
    cached: int
    shared: int = 0  # prompt tokens shared with other requests (its record says so)
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    last_sent: int = 0
    preempted: int = 0
    t_first: float = math.nan
    chunks: list[float] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.n_in + self.generated


# A source of arrivals: the open loop gives all of them up front; a closed loop sends the next
# request when one finishes. ``on_finish(t)`` returns the arrivals a finish at ``t`` causes.
OnFinish = Callable[[float], Iterable[Arrival]]


class SimulationError(RuntimeError):
    """The configuration can never serve a request (a KV cache smaller than one request)."""


@dataclass
class StepTrace:
    """What the simulation did, for checks and calibration: one entry per step."""

    t_end: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    seqs: list[int] = field(default_factory=list)
    preemptions: int = 0
    # per request, in the order of the arrivals: the requests running when it arrived
    running_at_arrival: dict[int, int] = field(default_factory=dict)


def simulate(
    arrivals: Sequence[Arrival],
    knobs: Knobs,
    step: StepModel,
    *,
    on_finish: OnFinish | None = None,
    trace: StepTrace | None = None,
    max_steps: int = 2_000_000,
    fast: bool = True,
) -> list[RequestRecord]:
    """Serve ``arrivals`` (and what ``on_finish`` adds) with ``knobs``; per-request records.

    ``fast``: where every running request is decoding and nothing can join the batch, the
    steps until the next arrival or finish are taken at once (``_fast_forward``); the result
    is the same as stepping one at a time.

    Raises:
        SimulationError: a request that could never be scheduled (its prompt needs more KV
            blocks than the cache has, or more tokens than the budget with chunking off).
    """
    # (when it reaches the engine, arrival order, the arrival, whether its admission delay
    # is already counted)
    pending: list[tuple[float, int, Arrival, bool]] = []
    count = 0
    admit = step.admit_per_seq_s

    def push(a: Arrival) -> None:
        nonlocal count
        heapq.heappush(pending, (a.t_s + step.overhead_s, count, a, admit <= 0))
        count += 1

    for a in arrivals:
        push(a)
    reqs: list[_Req] = []
    waiting: deque[_Req] = deque()
    running: list[_Req] = []
    free = knobs.kv_blocks if knobs.kv_blocks is not None else math.inf
    bs = knobs.block_size
    t = 0.0
    steps = 0
    while pending or waiting or running:
        if not waiting and not running:
            t = max(t, pending[0][0])
        while pending and pending[0][0] <= t:
            at, order, a, admitted = heapq.heappop(pending)
            if a.n_in < 1 or a.n_out < 1:
                raise ValueError(f"a request needs n_in >= 1 and n_out >= 1; got {a}")
            if trace is not None and order not in trace.running_at_arrival:
                trace.running_at_arrival[order] = len(running)
            if not admitted:  # the front end hands it over later, the busier the batch
                heapq.heappush(pending, (at + admit * len(running), order, a, True))
                continue
            cached = min(a.cached_tokens, a.n_in - 1) if knobs.prefix_caching else 0
            r = _Req(order, a.t_s, a.n_in, a.n_out, cached, a.cached_tokens)
            reqs.append(r)
            waiting.append(r)
        if fast and running and not (waiting and len(running) < knobs.max_num_seqs):
            next_arrival = pending[0][0] if pending and len(running) < knobs.max_num_seqs else None
            done = _fast_forward(running, knobs, step, t, next_arrival, free, trace)
            if done is not None:
                t, free, finished = done
                steps += 1
                for r in finished:
                    running.remove(r)
                    if on_finish is not None:
                        for a in on_finish(t):
                            push(a)
                continue
        scheduled: list[tuple[_Req, int]] = []
        budget = knobs.max_num_batched_tokens
        preempted = False
        # vLLM's cap on a long prefill, except for a request alone: it has nobody to starve.
        cap = knobs.long_prefill_threshold if len(running) + len(waiting) > 1 else 0
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            new = r.n_in + r.generated - r.computed
            if new > 1:  # a prefill still going on (a decode asks for exactly one token)
                if 0 < cap < new:
                    new = cap
                new = min(new, budget)
            need = -(-(r.computed + new) // bs) - r.blocks
            fits = True
            while need > free:
                victim = running.pop()
                free += victim.blocks
                victim.blocks = victim.computed = 0
                victim.preempted += 1
                waiting.appendleft(victim)
                preempted = True
                if trace is not None:
                    trace.preemptions += 1
                if victim is r:
                    fits = False
                    break
                for k, (s, n) in enumerate(scheduled):
                    if s is victim:
                        budget += n
                        del scheduled[k]
                        break
            if not fits:
                break
            free -= need
            r.blocks += need
            scheduled.append((r, new))
            budget -= new
            i += 1
        if not preempted:
            while waiting and budget > 0 and len(running) < knobs.max_num_seqs:
                r = waiting[0]
                if r.computed == 0 and r.cached and not r.preempted:
                    r.computed = (r.cached // bs) * bs
                new = r.length - r.computed
                if 0 < cap < new:
                    new = cap
                if not knobs.enable_chunked_prefill and new > budget:
                    if new > knobs.max_num_batched_tokens:
                        raise SimulationError(
                            f"a {r.length}-token prompt exceeds max_num_batched_tokens "
                            f"{knobs.max_num_batched_tokens} with chunked prefill off"
                        )
                    break
                new = min(new, budget)
                need = _blocks(r.computed + new, bs) - r.blocks
                if need > free:
                    if not running and not scheduled:
                        raise SimulationError(
                            f"a {r.length}-token request needs {need} KV blocks of {bs} "
                            f"tokens; the cache has {knobs.kv_blocks}"
                        )
                    break
                waiting.popleft()
                free -= need
                r.blocks += need
                running.append(r)
                scheduled.append((r, new))
                budget -= new
        if not scheduled:
            if not pending:
                raise SimulationError("nothing can be scheduled and nothing more arrives")
            t = max(t, pending[0][0])
            continue
        tokens = sum(n for _, n in scheduled)
        t += _step_s(step, scheduled)
        steps += 1
        if steps > max_steps:
            raise SimulationError(f"the simulation ran past {max_steps} steps")
        if trace is not None:
            trace.t_end.append(t)
            trace.tokens.append(tokens)
            trace.seqs.append(len(scheduled))
        si = knobs.stream_interval
        for r, n in scheduled:
            r.computed += n
            if r.computed < r.n_in + r.generated:
                continue  # a prefill chunk: no token yet
            r.generated += 1
            if r.generated == 1 and math.isnan(r.t_first):
                r.t_first = t
                r.chunks.append(t)
                r.last_sent = 1
            elif r.generated == r.n_out or r.generated - r.last_sent >= si:
                r.chunks.append(t)
                r.last_sent = r.generated
            if r.generated >= r.n_out:
                free += r.blocks
                r.blocks = 0
                running.remove(r)
                if on_finish is not None:
                    for a in on_finish(t):
                        push(a)
    return [_record(r) for r in sorted(reqs, key=lambda r: r.index)]


def _step_s(step: StepModel, scheduled: list[tuple[_Req, int]]) -> float:
    """One step's time: a request asking for one token after its outputs began is decoding
    (it reads its whole context); anything else is a prefill chunk."""
    prefill = decodes = 0
    ctx = kpairs = 0.0
    for r, n in scheduled:
        if n == 1 and r.generated >= 1 and r.computed == r.n_in + r.generated - 1:
            decodes += 1
            ctx += r.computed + 1
        else:
            prefill += n
            kpairs += attention_pairs(r.computed, n)
    return step.step_s(prefill, decodes, ctx / 1000.0, kpairs / 1000.0)


def _fast_forward(
    running: list[_Req],
    knobs: Knobs,
    step: StepModel,
    t: float,
    next_arrival: float | None,
    free: float,
    trace: StepTrace | None,
) -> tuple[float, float, list[_Req]] | None:
    """Decode-only steps of an unchanging batch, taken together: from ``t`` until the first
    request finishes or, where one could join, the step that starts after ``next_arrival``.
    Returns the time after them, the free KV blocks, and the requests that finished; None
    where this batch cannot be fast-forwarded (a prefill in it, the budget too small, the
    cache too small for two more steps)."""
    n = len(running)
    if n > knobs.max_num_batched_tokens:
        return None
    if any(r.computed != r.length - 1 or r.generated < 1 for r in running):
        return None
    k = min(r.n_out - r.generated for r in running)
    if k < 2:
        return None
    ctx = sum(r.computed + 1 for r in running)  # attention pairs of the first step
    ends: list[float] = []
    now = t
    fixed = step.base_s + step.per_decode_s * n
    for j in range(k):
        if next_arrival is not None and now >= next_arrival:
            break
        now += fixed + step.per_ctx_ktoken_s * (ctx + j * n) / 1000.0
        ends.append(now)
    k = len(ends)
    if k < 2:
        return None
    need = sum(_blocks(r.computed + k, knobs.block_size) - r.blocks for r in running)
    if need > free:
        return None
    free -= need
    finished: list[_Req] = []
    si = knobs.stream_interval
    for r in running:
        r.blocks = _blocks(r.computed + k, knobs.block_size)
        g0 = r.generated
        r.computed += k
        r.generated += k
        # the chunks sent in these steps: every stream_interval tokens, and the last one
        nxt = r.last_sent + si
        while nxt <= r.generated:
            r.chunks.append(ends[nxt - g0 - 1])
            r.last_sent = nxt
            nxt += si
        if r.generated >= r.n_out:
            if r.last_sent != r.generated:
                r.chunks.append(ends[-1])
                r.last_sent = r.generated
            free += r.blocks
            r.blocks = 0
            finished.append(r)
    if trace is not None:
        trace.t_end += ends
        trace.tokens += [n] * k
        trace.seqs += [n] * k
    return now, free, finished


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def _record(r: _Req) -> RequestRecord:
    t_last = r.chunks[-1] if r.chunks else math.nan
    return RequestRecord(
        index=r.index,
        t_sched=r.t_sched,
        t_send=r.t_sched,
        t_first=r.t_first,
        t_last=t_last,
        t_end=t_last,
        n_out=r.generated,
        n_out_from_usage=True,
        n_prompt=r.n_in,
        n_prompt_expected=r.n_in,
        n_prompt_shared=r.shared or None,
        chunk_times=list(r.chunks),
    )
