"""The load client: async, streaming, OpenAI-compatible; the measurer owns clock and schedule.

- Closed loop (``concurrency=N``): N slots; a request's ``t_sched`` is when its slot freed up
  (the start, for the first N). This is what ``vllm bench serve --max-concurrency N`` does.
- Open loop (``rate_rps=R``): arrival times drawn up front from a Poisson process with the given
  seed, conditioned on its N arrivals filling N/R seconds (``arrival_offsets``); a request's
  ``t_sched`` is its place in that schedule, so a slow client or server cannot hide queueing
  (no coordinated omission). A workload with its own arrival process (gamma gaps, a trace's
  own times) gives it as a ``schedule`` (probes.arrivals.Schedule), drawn up front the same way.
- Warm-up requests are sent first, at the same load (the same concurrency, or open-loop
  arrivals at the same rate: never all at once), and thrown away.
- A point may stop sending once its verdict is decided (``decided``, probes/sequential.py):
  the requests not sent yet are dropped, those sent run to their end, so what is kept is a
  shorter point of whole requests.

It must stay lean: on two cores it competes with the engine it measures. Bodies are serialised
before the clock starts; per chunk the client stores one timestamp and decodes one small JSON
object. The process's own CPU use over the window is reported with the figures.
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import AsyncIterable, Callable, Sequence
from dataclasses import dataclass

import aiohttp
import orjson

from probes.arrivals import Schedule, poisson_offsets
from probes.records import RequestRecord
from probes.workload import PreparedRequest

Clock = Callable[[], float]
# Asked when a point's requests run out: how many more to send, given its records so far and
# the clock's reading (probes/sequential.py's shortfall).
More = Callable[[list[RequestRecord], float], int]
# Asked every DECIDE_EVERY_S while a point runs: whether its verdict is already decided, so
# the requests not sent yet need not be (probes/sequential.py's decided).
Decided = Callable[[list[RequestRecord], float], bool]
DECIDE_EVERY_S = 0.25
# A grown point's k-th further batch of arrivals draws its gaps from seed + k x this: apart
# from the warm-up's (seed + 1) and from the next point's seeds.
SEGMENT_SEED_STEP = 1_000_003


def _content(chunk: dict, chat: bool) -> tuple[bool, dict | None]:
    """Whether a decoded SSE chunk carries content, and its usage if it has one."""
    usage = chunk.get("usage")
    choices = chunk.get("choices") or ()
    for c in choices:
        if chat:
            delta = c.get("delta") or {}
            if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"):
                return True, usage
        elif c.get("text"):
            return True, usage
    return False, usage


async def consume_stream(
    rec: RequestRecord, lines: AsyncIterable[bytes], clock: Clock, chat: bool
) -> None:
    """Read an SSE stream into ``rec``: content-chunk times, usage, errors.

    A chunk with empty content, a role-only chunk, the usage chunk and ``[DONE]`` do not count
    as content (MEASUREMENT.md). ``n_out`` comes from the server's usage where it sends one,
    else from the number of content chunks.
    """
    n_chunks = 0
    usage = None
    async for raw in lines:
        now = clock()
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            rec.error = f"bad SSE data: {data[:80]!r}"
            return
        if "error" in chunk and not chunk.get("choices"):
            err = chunk["error"]
            rec.error = f"server error: {err.get('message', err) if isinstance(err, dict) else err}"
            return
        has_content, u = _content(chunk, chat)
        if u:
            usage = u
        if has_content:
            if n_chunks == 0:
                rec.t_first = now
            rec.t_last = now
            rec.chunk_times.append(now)
            n_chunks += 1
    if usage and usage.get("completion_tokens") is not None:
        rec.n_out = int(usage["completion_tokens"])
        rec.n_out_from_usage = True
        if usage.get("prompt_tokens") is not None:
            rec.n_prompt = int(usage["prompt_tokens"])
    else:
        rec.n_out = n_chunks
    if n_chunks == 0 and rec.error is None:
        rec.error = "stream ended without content"


class _Pool:
    """Which of a point's prepared requests may be sent: the first ``base`` (all, where None),
    then as many more as ``more`` asks for each time those run out, up to all of them."""

    def __init__(self, total: int, base: int | None, more: More | None) -> None:
        self.total = total
        self.available = total if base is None or more is None else max(0, min(base, total))
        self.more = more
        self.taken = 0
        self._asked_at = -1  # ``available`` when ``more`` last said how many more

    @property
    def can_grow(self) -> bool:
        return self.more is not None and self.available < self.total

    def grow(self, records: list[RequestRecord], now: float) -> None:
        """Ask ``more`` once per time the available requests run out."""
        if not self.can_grow or self._asked_at == self.available:
            return
        assert self.more is not None
        self._asked_at = self.available
        self.available = min(self.total, self.available + max(0, self.more(records, now)))

    def take(self, records: list[RequestRecord], now: float) -> int | None:
        """The next request's index, growing the pool when it has run out; None when done."""
        if self.taken >= self.available:
            self.grow(records, now)
        if self.taken >= self.available:
            return None
        self.taken += 1
        return self.taken - 1


@dataclass
class LoadResult:
    records: list[RequestRecord]
    warmup: list[RequestRecord]
    client_cpu_pct: float  # the client process's CPU time over the window, % of one core
    wall_s: float


class LoadClient:
    """Sends prepared requests to one server.

    Args:
        base_url: the server's root (``http://host:port``); a trailing ``/v1`` is tolerated.
        timeout_s: per-request limit; a request over it is a failed record.
        clock: the monotonic clock (injectable for tests).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout_s: float = 300.0,
        clock: Clock = time.perf_counter,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.timeout_s = timeout_s
        self.clock = clock
        self.headers = {"Content-Type": "application/json", **(headers or {})}

    async def _one(
        self, session: aiohttp.ClientSession, req: PreparedRequest, rec: RequestRecord
    ) -> None:
        rec.n_prompt_expected = req.prompt_tokens
        rec.max_tokens = req.max_tokens
        rec.n_prompt_shared = req.shared_tokens
        rec.t_send = self.clock()
        try:
            async with session.post(
                self.base_url + req.path, data=req.body, headers=self.headers
            ) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:200]
                    rec.error = f"HTTP {resp.status}: {text}"
                else:
                    await consume_stream(rec, resp.content, self.clock, req.chat)
        except asyncio.TimeoutError:
            rec.error = f"timeout after {self.timeout_s:g} s"
        except aiohttp.ClientError as exc:
            rec.error = f"{type(exc).__name__}: {exc}"
        finally:
            rec.t_end = self.clock()

    async def _closed(
        self,
        session: aiohttp.ClientSession,
        reqs: Sequence[PreparedRequest],
        concurrency: int,
        first_index: int,
        base: int | None = None,
        more: More | None = None,
        decided: Decided | None = None,
    ) -> list[RequestRecord]:
        records: list[RequestRecord] = []
        pool = _Pool(len(reqs), base, more)
        t0 = self.clock()
        asked = [t0]  # when ``decided`` was last asked

        def done_early(now: float) -> bool:
            if decided is None or now - asked[0] < DECIDE_EVERY_S:
                return False
            asked[0] = now
            return decided(records, now)

        async def slot() -> None:
            t_free = t0
            while (
                not done_early(self.clock()) and (i := pool.take(records, self.clock())) is not None
            ):
                rec = RequestRecord(index=first_index + i, t_sched=t_free)
                records.append(rec)
                await self._one(session, reqs[i], rec)
                t_free = rec.t_end

        await asyncio.gather(*(slot() for _ in range(min(concurrency, pool.available))))
        records.sort(key=lambda r: r.index)
        return records

    async def _open(
        self,
        session: aiohttp.ClientSession,
        reqs: Sequence[PreparedRequest],
        rate_rps: float,
        seed: int,
        first_index: int,
        base: int | None = None,
        more: More | None = None,
        decided: Decided | None = None,
        schedule: Schedule | None = None,
    ) -> list[RequestRecord]:
        """Arrivals in segments: the first ``base`` (all, where None), then while ``more``
        asks for more (called when the last arrival of a segment is due), another segment of
        that many, right after it: each segment's n gaps span n/R (``arrival_offsets``), the
        last of them the gap before the next segment's first arrival, so the arrivals stay
        one process at rate R. With a ``schedule``, each segment's times are its (from the
        point's first request, by the requests' indices ``first_index`` on) instead of
        Poisson's. Once ``decided`` says so, the arrivals not sent yet are dropped."""
        pool = _Pool(len(reqs), base, more)
        records: list[RequestRecord] = []
        tasks: list[asyncio.Task[None]] = []
        cut = asyncio.Event()

        async def watch() -> None:
            assert decided is not None
            while not decided(records, self.clock()):
                await asyncio.sleep(DECIDE_EVERY_S)
            cut.set()
            for task, rec in zip(tasks, records, strict=True):
                if math.isnan(rec.t_send):  # not sent yet (sending sets it before any wait)
                    task.cancel()

        watcher = asyncio.ensure_future(watch()) if decided is not None else None

        async def fire(req: PreparedRequest, rec: RequestRecord) -> None:
            # Timers may wake a little early: never send before the scheduled time.
            while (delay := rec.t_sched - self.clock()) > 0:
                await asyncio.sleep(delay)
            await self._one(session, req, rec)

        t0, start, k = self.clock(), 0.0, 0
        origin: float | None = None  # the schedule's time of the point's first request
        while (n := pool.available - len(records)) > 0:
            segment_seed = seed + SEGMENT_SEED_STEP * k
            if schedule is None:
                due = [t0 + start + o for o in arrival_offsets(n, rate_rps, segment_seed)]
            else:
                times = schedule(first_index + len(records), n, segment_seed)
                origin = times[0] if origin is None else origin
                due = [t0 + (t - origin) for t in times]
            for t_sched in due:
                i = len(records)
                rec = RequestRecord(index=first_index + i, t_sched=t_sched)
                records.append(rec)
                tasks.append(asyncio.ensure_future(fire(reqs[i], rec)))
            start += n / rate_rps
            k += 1
            if not pool.can_grow:
                break
            while (delay := records[-1].t_sched - self.clock()) > 0 and not cut.is_set():
                await asyncio.sleep(min(delay, DECIDE_EVERY_S))
            if cut.is_set():
                break
            pool.grow(records, self.clock())
        try:
            ends = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            if watcher is not None:
                watcher.cancel()
        for end in ends:
            if isinstance(end, BaseException) and not isinstance(end, asyncio.CancelledError):
                raise end
        return [r for r in records if not math.isnan(r.t_send)] if cut.is_set() else records

    async def run(
        self,
        requests: Sequence[PreparedRequest],
        *,
        concurrency: int | None = None,
        rate_rps: float | None = None,
        warmup: int = 0,
        seed: int = 0,
        base: int | None = None,
        more: More | None = None,
        decided: Decided | None = None,
        schedule: Schedule | None = None,
    ) -> LoadResult:
        """Send ``warmup`` requests (discarded), then the rest, at one load.

        Exactly one of ``concurrency`` and ``rate_rps`` is given. An open loop's arrivals are
        Poisson at ``rate_rps``, or the ``schedule``'s (the workload's own process bound to
        that rate: probes.workload.rate_schedule), for the warm-up too. With ``base``, the point
        sends that many of the rest, then asks ``more(records so far, now)`` how many of the
        others to send on at the same load (once the last of them is due or handed to a
        slot; again after each further batch), until it says 0 or none are left: a point
        that grows until its sample suffices (probes/sequential.py). With ``decided``, asked
        every ``DECIDE_EVERY_S`` with the records so far, the point stops sending once it says
        the verdict is decided (the requests already sent run to their end).
        """
        if (concurrency is None) == (rate_rps is None):
            raise ValueError("give exactly one of concurrency and rate_rps")
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if rate_rps is not None and rate_rps <= 0:
            raise ValueError(f"rate must be > 0 requests/s, got {rate_rps}")
        if schedule is not None and rate_rps is None:
            raise ValueError("an arrival schedule is for an open loop (rate_rps)")
        warm_reqs, measured = requests[:warmup], requests[warmup:]
        connector = aiohttp.TCPConnector(limit=0, force_close=False)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            warm: list[RequestRecord] = []
            if warm_reqs and concurrency is not None:
                warm = await self._closed(session, warm_reqs, concurrency, 0)
            elif warm_reqs:
                assert rate_rps is not None
                warm = await self._open(
                    session, warm_reqs, rate_rps, seed + 1, 0, schedule=schedule
                )
            cpu0, wall0 = time.process_time(), time.perf_counter()
            if concurrency is not None:
                recs = await self._closed(
                    session, measured, concurrency, warmup, base=base, more=more, decided=decided
                )
            else:
                assert rate_rps is not None
                recs = await self._open(
                    session,
                    measured,
                    rate_rps,
                    seed,
                    warmup,
                    base=base,
                    more=more,
                    decided=decided,
                    schedule=schedule,
                )
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        return LoadResult(recs, warm, 100.0 * cpu / wall if wall > 0 else 0.0, wall)


def normalize_base_url(url: str) -> str:
    """``http://h:p``, ``http://h:p/`` and ``http://h:p/v1`` all mean the server's root."""
    url = url.strip().rstrip("/")
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"endpoint {url!r} must start with http:// or https://")
    return url


def run_load(client: LoadClient, requests: Sequence[PreparedRequest], **kw: object) -> LoadResult:
    """Synchronous wrapper: one event loop per load point (uvloop where installed).

    The objects alive before the point are collected once and frozen (``gc.freeze``) while it
    runs, so that no full collection of a large heap pauses the loop mid-point: in a process
    that had imported the whole test suite, one paused it about 150 ms as a trace's first
    requests were due, and each went out that late (a slow AMD box, 2026-12-06)."""
    gc.collect()
    gc.freeze()
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(client.run(requests, **kw))  # type: ignore[arg-type]
        return uvloop.run(client.run(requests, **kw))  # type: ignore[arg-type]
    finally:
        gc.unfreeze()


def arrival_offsets(n: int, rate_rps: float, seed: int) -> list[float]:
    """N open-loop arrival times from 0: exponential gaps (Poisson arrivals), scaled so that
    the N gaps add up to exactly N/R. That is a Poisson process conditioned on N arrivals in
    N/R seconds, so the load offered is the load the point is judged at. Unscaled, 505
    arrivals at 3.72/s spanned 150 s in one confirmation (3.36/s offered; the span's standard
    deviation is sqrt(N)/R, 4.4 % of it there). vLLM's benchmark client scales the same way.
    (probes.arrivals.poisson_offsets, beside the other arrival processes.)"""
    return poisson_offsets(n, rate_rps, seed)
