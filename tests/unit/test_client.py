"""probes.client: the SSE reader on scripted streams, then the load client on a real fake server."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import math
import random
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import orjson
import pytest

from probes.client import (
    SEGMENT_SEED_STEP,
    LoadClient,
    arrival_offsets,
    consume_stream,
    normalize_base_url,
    run_load,
)
from probes.metrics import judge, summarize
from probes.records import RequestRecord
from probes.sequential import shortfall
from probes.server_metrics import delta, fetch_snapshot
from probes.slo import parse_slos
from probes.workload import FileItem, FileWorkload, PreparedRequest, prepare_requests
from tests.fakes.openai_server import FakeOpenAIServer

# ---------------------------------------------------------------------------- scripted streams


class VirtualClock:
    """The time is what the fake stream last set; the reader may read it any number of times."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def scripted_lines(
    clock: VirtualClock, timed_lines: Sequence[tuple[float, bytes]]
) -> AsyncIterator[bytes]:
    """Yield each line at its scripted arrival time (the clock jumps there first)."""
    for t, line in timed_lines:
        clock.now = t
        yield line


def data(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n"


def text_chunk(text: str, finish: str | None = None) -> bytes:
    return data({"choices": [{"index": 0, "text": text, "finish_reason": finish}]})


def delta_chunk(**delta: Any) -> bytes:
    return data({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})


def usage_chunk(completion: int, prompt: int = 11) -> bytes:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return data({"choices": [], "usage": usage})


DONE = b"data: [DONE]\n"


def read(timed_lines: Sequence[tuple[float, bytes]], chat: bool = False) -> RequestRecord:
    clock = VirtualClock()
    rec = RequestRecord(index=0, t_sched=0.0)
    asyncio.run(consume_stream(rec, scripted_lines(clock, timed_lines), clock, chat))
    return rec


def test_completion_stream_times_only_content_chunks() -> None:
    rec = read(
        [
            (1.0, text_chunk("")),  # empty text: not content
            (1.2, b"\n"),  # SSE separator
            (1.5, text_chunk("Hel")),
            (1.6, b": keep-alive\n"),  # comment line
            (2.0, text_chunk("lo")),
            (2.1, text_chunk("", finish="length")),  # finish chunk without text
            (2.2, usage_chunk(completion=7)),  # choices empty: not content
            (2.3, DONE),
        ]
    )
    assert rec.error is None
    assert rec.t_first == 1.5
    assert rec.t_last == 2.0
    assert rec.chunk_times == [1.5, 2.0]


def test_n_out_comes_from_usage_when_the_server_sends_it() -> None:
    rec = read([(1.0, text_chunk("a")), (1.1, text_chunk("b")), (1.2, usage_chunk(7, 11))])
    assert rec.n_out == 7
    assert rec.n_out_from_usage is True
    assert rec.n_prompt == 11


def test_n_out_falls_back_to_the_chunk_count() -> None:
    rec = read([(1.0, text_chunk("a")), (1.1, text_chunk("b")), (1.2, text_chunk("c")), (2, DONE)])
    assert rec.n_out == 3
    assert rec.n_out_from_usage is False
    assert rec.n_prompt is None


def test_usage_null_in_every_chunk_is_not_usage() -> None:
    chunk = {"choices": [{"index": 0, "text": "a"}], "usage": None}
    rec = read([(1.0, data(chunk)), (1.1, data(chunk)), (2.0, DONE)])
    assert (rec.n_out, rec.n_out_from_usage) == (2, False)


def test_chat_role_only_and_empty_deltas_are_not_content() -> None:
    rec = read(
        [
            (0.5, delta_chunk(role="assistant")),  # role only
            (0.7, delta_chunk(role="assistant", content="")),  # empty content
            (1.0, delta_chunk(content="Hi")),
            (1.4, delta_chunk(content=" there")),
            (1.5, data({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
            (1.6, usage_chunk(2)),
            (1.7, DONE),
        ],
        chat=True,
    )
    assert rec.error is None
    assert rec.chunk_times == [1.0, 1.4]
    assert (rec.t_first, rec.t_last) == (1.0, 1.4)
    assert (rec.n_out, rec.n_out_from_usage) == (2, True)


def test_chat_reasoning_deltas_are_content() -> None:
    rec = read(
        [(1.0, delta_chunk(reasoning_content="hmm")), (1.2, delta_chunk(content="yes"))],
        chat=True,
    )
    assert rec.chunk_times == [1.0, 1.2]


def test_chat_deltas_read_as_completions_are_not_content() -> None:
    # A completion reader must look at "text", not at deltas.
    rec = read([(1.0, delta_chunk(content="Hi")), (2.0, DONE)], chat=False)
    assert rec.chunk_times == []
    assert rec.error == "stream ended without content"


def test_lines_after_done_are_ignored() -> None:
    rec = read([(1.0, text_chunk("a")), (1.1, DONE), (5.0, text_chunk("late"))])
    assert rec.chunk_times == [1.0]


def test_a_server_error_chunk_becomes_the_records_error() -> None:
    rec = read(
        [
            (1.0, text_chunk("a")),
            (1.1, data({"error": {"message": "engine died", "code": 500}})),
            (1.2, text_chunk("b")),
        ]
    )
    assert rec.error == "server error: engine died"
    assert not rec.ok


def test_a_string_error_chunk_becomes_the_records_error() -> None:
    rec = read([(1.0, data({"error": "overloaded"}))])
    assert rec.error == "server error: overloaded"


def test_a_stream_without_content_is_an_error() -> None:
    rec = read([(1.0, text_chunk("")), (1.1, usage_chunk(0)), (1.2, DONE)])
    assert rec.error == "stream ended without content"
    assert not rec.ok


def test_an_empty_stream_is_an_error() -> None:
    assert read([]).error == "stream ended without content"


def test_bad_json_is_an_error() -> None:
    rec = read([(1.0, b"data: {not json\n")])
    assert rec.error is not None and rec.error.startswith("bad SSE data")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000",
        "http://127.0.0.1:8000/",
        "http://127.0.0.1:8000/v1",
        "http://127.0.0.1:8000/v1/",
        "  http://127.0.0.1:8000/v1  ",
    ],
)
def test_normalize_base_url(url: str) -> None:
    assert normalize_base_url(url) == "http://127.0.0.1:8000"


def test_normalize_base_url_keeps_https_and_paths() -> None:
    assert normalize_base_url("https://h.example/api/v1/") == "https://h.example/api"


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://h:1", "ws://h:1/v1", ""])
def test_normalize_base_url_rejects_other_schemes(url: str) -> None:
    with pytest.raises(ValueError, match="must start with http:// or https://"):
        normalize_base_url(url)


# ---------------------------------------------------------------------------- the fake server

MODEL = "fake-model"


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(ttft_ms=10, itl_ms=2) as srv:
        yield srv


def file_requests(n: int, *items: FileItem) -> list[PreparedRequest]:
    wl = FileWorkload(path="inline.jsonl", items=items or (FileItem(prompt="a b c", max_tokens=4),))
    return prepare_requests(wl, n, model=MODEL, tokenizer=None, seed=0)


def max_overlap(records: Sequence[RequestRecord]) -> int:
    """The most requests in flight at once, from the client's own send and end times."""
    events = sorted([(r.t_send, 1) for r in records] + [(r.t_end, -1) for r in records])
    level = peak = 0
    for _, step in events:  # an end sorts before a send at the same instant
        level += step
        peak = max(peak, level)
    return peak


@pytest.mark.timeout(60)
def test_closed_loop_respects_concurrency(server: FakeOpenAIServer) -> None:
    reqs = file_requests(24)
    result = run_load(LoadClient(server.base_url), reqs, concurrency=4)
    assert [r.index for r in result.records] == list(range(24))
    assert all(r.ok for r in result.records), [r.error for r in result.records]
    assert server.stats.n_requests == 24
    assert server.stats.max_in_flight == 4  # all four slots used, never a fifth
    assert max_overlap(result.records) <= 4


@pytest.mark.timeout(60)
def test_closed_loop_schedules_each_request_when_a_slot_frees(server: FakeOpenAIServer) -> None:
    result = run_load(LoadClient(server.base_url), file_requests(9), concurrency=3)
    recs = result.records
    t0 = min(r.t_sched for r in recs)
    firsts = [r for r in recs if r.t_sched == t0]
    assert len(firsts) == 3  # the first N start together
    ends = {r.t_end for r in recs}
    for r in recs:
        if r not in firsts:
            assert r.t_sched in ends  # a later request is due when its slot's request ended
        assert r.t_send >= r.t_sched


@pytest.mark.timeout(60)
def test_closed_loop_figures_come_from_usage(server: FakeOpenAIServer) -> None:
    result = run_load(
        LoadClient(server.base_url),
        file_requests(3, FileItem(prompt="one two three four five", max_tokens=6)),
        concurrency=1,
    )
    for r in result.records:
        assert r.ok
        assert (r.n_out, r.n_out_from_usage) == (6, True)
        assert len(r.chunk_times) == 6
        assert r.n_prompt == 6  # the fake counts words: the salted prefix, then five
        assert r.t_sched <= r.t_send < r.t_first <= r.t_last <= r.t_end
        assert r.e2e_s - r.ttft_s == pytest.approx(sum(r.itl_s()))


def poisson_offsets(n: int, rate_rps: float, seed: int) -> list[float]:
    """Exponential gaps from the seed, scaled to add up to n / rate."""
    rng = random.Random(seed)
    gaps = [rng.expovariate(rate_rps) for _ in range(n)]
    k = n / rate_rps / sum(gaps)
    return [k * sum(gaps[:i]) for i in range(n)]


def test_open_loop_arrivals_offer_exactly_the_rate_they_are_judged_at() -> None:
    """505 arrivals at 3.72/s: unscaled, the span varies by sqrt(505)/3.72 = 6 s (4.4 %) from
    seed to seed; scaled, every seed's 505 gaps fill 505 / 3.72 s, so the last arrival lands
    one gap (exponential, of mean 1 / 3.72 s) before that."""
    n, rate = 505, 3.72
    raw_last, last = [], []
    for seed in range(40):
        rng = random.Random(seed)
        raw_last.append(sum(rng.expovariate(rate) for _ in range(n - 1)))
        last.append(arrival_offsets(n, rate, seed)[-1])
    assert max(raw_last) - min(raw_last) > 0.08 * n / rate  # what the scaling removes
    assert all(n / rate - 12 / rate < x < n / rate for x in last)
    assert arrival_offsets(n, rate, 3) == pytest.approx(poisson_offsets(n, rate, 3))
    assert arrival_offsets(1, rate, 3) == [0.0]


def open_loop_offsets(base_url: str, n: int, rate_rps: float, seed: int) -> list[float]:
    result = run_load(LoadClient(base_url), file_requests(n), rate_rps=rate_rps, seed=seed)
    assert all(r.ok for r in result.records), [r.error for r in result.records]
    t0 = result.records[0].t_sched
    return [r.t_sched - t0 for r in result.records]


@pytest.mark.timeout(60)
def test_open_loop_follows_the_seeded_poisson_schedule_whatever_the_server() -> None:
    n, rate, seed = 10, 40.0, 7
    expected = poisson_offsets(n, rate, seed)
    with FakeOpenAIServer(ttft_ms=1, itl_ms=0) as fast:
        fast_offsets = open_loop_offsets(fast.base_url, n, rate, seed)
    # One request at a time and slow: requests queue at the server, the schedule must not move.
    with FakeOpenAIServer(ttft_ms=60, itl_ms=5, max_concurrent=1) as slow:
        slow_offsets = open_loop_offsets(slow.base_url, n, rate, seed)
        assert slow.stats.max_running == 1
    assert fast_offsets == pytest.approx(expected, abs=1e-9)
    assert slow_offsets == pytest.approx(expected, abs=1e-9)


@pytest.mark.timeout(60)
def test_open_loop_counts_server_queueing_in_ttft() -> None:
    with FakeOpenAIServer(ttft_ms=40, itl_ms=1, max_concurrent=1) as slow:
        # 6 requests due within a few ms: the last waits behind the other five.
        result = run_load(LoadClient(slow.base_url), file_requests(6), rate_rps=1000.0, seed=1)
    recs = result.records
    assert all(r.ok for r in recs)
    # TTFT runs from the schedule, so the queue shows: TTFT grows request after request.
    assert recs[-1].ttft_s > recs[0].ttft_s


UVLOOP = importlib.util.find_spec("uvloop") is not None


@pytest.mark.timeout(60)
def test_open_loop_never_sends_before_the_schedule(server: FakeOpenAIServer) -> None:
    result = run_load(LoadClient(server.base_url), file_requests(60), rate_rps=300.0, seed=3)
    early = [r.t_sched - r.t_send for r in result.records if r.t_send < r.t_sched]
    assert early == []


@pytest.mark.timeout(60)
def test_open_loop_seed_changes_the_schedule(server: FakeOpenAIServer) -> None:
    a = open_loop_offsets(server.base_url, 5, 100.0, seed=1)
    b = open_loop_offsets(server.base_url, 5, 100.0, seed=2)
    assert a != pytest.approx(b, abs=1e-9)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("load", [{"concurrency": 2}, {"rate_rps": 200.0}])
def test_warmup_requests_are_sent_and_left_out(
    server: FakeOpenAIServer, load: dict[str, Any]
) -> None:
    result = run_load(LoadClient(server.base_url), file_requests(8), warmup=3, **load)
    assert server.stats.n_requests == 8  # warm-up requests were really sent
    assert [r.index for r in result.warmup] == [0, 1, 2]
    assert [r.index for r in result.records] == [3, 4, 5, 6, 7]
    assert all(r.ok for r in result.warmup + result.records)
    assert summarize(result.records).n_requests == 5
    # the measured window starts after the warm-up ended
    assert min(r.t_send for r in result.records) >= max(r.t_end for r in result.warmup)


@pytest.mark.timeout(60)
def test_open_loop_warmup_arrives_at_the_rate_not_all_at_once(server: FakeOpenAIServer) -> None:
    result = run_load(LoadClient(server.base_url), file_requests(9), warmup=6, rate_rps=50.0)
    sched = [r.t_sched for r in result.warmup]
    assert all(b > a for a, b in itertools.pairwise(sched))  # a Poisson schedule, spread out
    assert all(r.t_send >= r.t_sched for r in result.warmup)


@pytest.mark.timeout(60)
def test_http_500_becomes_a_failed_record(server: FakeOpenAIServer) -> None:
    items = (
        FileItem(prompt="fine words", max_tokens=2),
        FileItem(prompt="FAIL this", max_tokens=2),
    )
    result = run_load(LoadClient(server.base_url), file_requests(4, *items), concurrency=2)
    ok = [r for r in result.records if r.ok]
    failed = [r for r in result.records if not r.ok]
    assert [r.index for r in failed] == [1, 3]
    for r in failed:
        assert r.error is not None
        assert r.error.startswith("HTTP 500")
        assert "injected failure" in r.error
        assert r.t_end >= r.t_send
    assert len(ok) == 2
    m = summarize(result.records)
    assert (m.n_failed, m.error_rate) == (2, 0.5)


@pytest.mark.timeout(60)
def test_chat_requests_go_to_chat_completions(server: FakeOpenAIServer) -> None:
    item = FileItem(messages=[{"role": "user", "content": "hello there you"}], max_tokens=3)
    result = run_load(LoadClient(server.base_url + "/v1"), file_requests(2, item), concurrency=1)
    for r in result.records:
        assert r.ok, r.error
        assert (r.n_out, r.n_prompt) == (3, 4)  # the salted prefix is one more word
        assert len(r.chunk_times) == 3  # the role-only chunk is not one
    assert all("messages" in b for b in server.stats.bodies)


@pytest.mark.timeout(60)
def test_prompt_tokens_are_checked_against_usage(server: FakeOpenAIServer) -> None:
    def req(prompt: str, expected: int) -> PreparedRequest:
        body = {
            "model": MODEL,
            "prompt": prompt,
            "max_tokens": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        return PreparedRequest("/v1/completions", orjson.dumps(body), False, expected, 2)

    reqs = [req("one two three", 3), req("one two three", 4)]
    result = run_load(LoadClient(server.base_url), reqs, concurrency=1)
    assert [(r.n_prompt, r.n_prompt_expected) for r in result.records] == [(3, 3), (3, 4)]
    assert summarize(result.records).prompt_token_mismatches == 1


@pytest.mark.timeout(60)
def test_a_request_over_the_timeout_is_a_failed_record() -> None:
    with FakeOpenAIServer(ttft_ms=2000, itl_ms=1) as slow:
        result = run_load(LoadClient(slow.base_url, timeout_s=0.2), file_requests(1), concurrency=1)
    (r,) = result.records
    assert r.error == "timeout after 0.2 s"
    assert not r.ok


@pytest.mark.timeout(60)
def test_an_unreachable_server_gives_failed_records() -> None:
    from tuner.engines.base import free_port

    url = f"http://127.0.0.1:{free_port()}"
    result = run_load(LoadClient(url, timeout_s=5), file_requests(3), concurrency=2)
    assert len(result.records) == 3
    assert all(not r.ok and r.error for r in result.records)
    assert summarize(result.records).error_rate == 1.0


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({}, "exactly one"),
        ({"concurrency": 2, "rate_rps": 1.0}, "exactly one"),
        ({"concurrency": 0}, "concurrency must be >= 1"),
        ({"rate_rps": 0.0}, "rate must be > 0"),
    ],
)
def test_run_rejects_a_bad_load(kw: dict[str, Any], needle: str) -> None:
    client = LoadClient("http://127.0.0.1:9")
    with pytest.raises(ValueError, match=needle):
        asyncio.run(client.run(file_requests(1), **kw))


@pytest.mark.timeout(60)
def test_server_metrics_snapshot_and_delta(server: FakeOpenAIServer) -> None:
    before = fetch_snapshot(server.base_url)
    run_load(LoadClient(server.base_url), file_requests(3), concurrency=3)
    after = fetch_snapshot(server.base_url)
    assert "vllm:num_requests_running" in after
    d = delta(before, after)
    assert d["vllm:request_prefill_time_seconds_count"] == 3


# ---------------------------------------------------------------------------- a point that grows


@pytest.mark.timeout(60)
def test_open_loop_grows_as_more_asks_and_keeps_one_poisson_process(
    server: FakeOpenAIServer,
) -> None:
    """10 arrivals, then 5 more when asked, then none: the second batch's arrivals are the
    seeded schedule of 5 at the same rate, starting where the first batch's 10 gaps end."""
    asked: list[tuple[int, float]] = []

    def more(records: list[RequestRecord], now: float) -> int:
        asked.append((len(records), now - records[-1].t_sched))
        return 5 if len(asked) == 1 else 0

    rate, seed = 50.0, 4
    result = run_load(
        LoadClient(server.base_url), file_requests(30), rate_rps=rate, seed=seed, base=10, more=more
    )
    recs = result.records
    assert [r.index for r in recs] == list(range(15))
    assert all(r.ok for r in recs) and server.stats.n_requests == 15
    assert [n for n, _ in asked] == [10, 15]
    assert all(late >= 0 for _, late in asked)  # asked once the last arrival was due
    t0 = recs[0].t_sched
    first = [r.t_sched - t0 for r in recs[:10]]
    second = [r.t_sched - t0 - 10 / rate for r in recs[10:]]
    assert first == pytest.approx(poisson_offsets(10, rate, seed), abs=1e-9)
    assert second == pytest.approx(poisson_offsets(5, rate, seed + SEGMENT_SEED_STEP), abs=1e-9)


@pytest.mark.timeout(60)
def test_a_point_grows_no_further_than_its_prepared_requests(server: FakeOpenAIServer) -> None:
    calls = []

    def more(records: list[RequestRecord], now: float) -> int:
        calls.append(len(records))
        return 100

    result = run_load(
        LoadClient(server.base_url), file_requests(12), rate_rps=200.0, base=8, more=more
    )
    assert len(result.records) == 12 and server.stats.n_requests == 12
    assert calls == [8]  # nothing left to ask for after that


@pytest.mark.timeout(60)
def test_closed_loop_grows_when_its_requests_run_out(server: FakeOpenAIServer) -> None:
    answers = iter([3, 0])
    calls = []

    def more(records: list[RequestRecord], now: float) -> int:
        calls.append(len(records))
        return next(answers)

    result = run_load(
        LoadClient(server.base_url), file_requests(20), concurrency=4, base=10, more=more
    )
    assert [r.index for r in result.records] == list(range(13))
    assert server.stats.n_requests == 13
    assert calls == [10, 13]  # asked once per time they ran out, not once per idle slot
    assert server.stats.max_in_flight <= 4


@pytest.mark.timeout(60)
def test_a_point_grows_until_the_early_stopping_rule_is_met() -> None:
    """p90 TTFT <= 150 ms needs 44 requests with none over, 64 with one, 81 with two. Requests
    5 and 45 are slow (600 ms): 44 sent, one over, so 20 more; 64 sent, two over, 17 more;
    81 sent, two over: enough. The usual verdict on all 81 is not provisional."""
    slos = parse_slos(["ttft@p90=150ms"])
    items = [FileItem(prompt="a b c", max_tokens=2)] * 40
    items[5] = FileItem(prompt="SLOW a b", max_tokens=2)
    asked: list[int] = []

    def more(records: list[RequestRecord], now: float) -> int:
        asked.append(len(records))
        return shortfall(records, slos, now)

    with FakeOpenAIServer(ttft_ms=2, itl_ms=1, slow_ms=600) as srv:
        result = run_load(
            LoadClient(srv.base_url), file_requests(200, *items), rate_rps=20.0, seed=2,
            base=44, more=more,
        )  # fmt: skip
    recs = result.records
    assert asked == [44, 64, 81]
    assert len(recs) == 81
    assert sum(r.ttft_s > 0.15 for r in recs) == 2
    verdict = judge(summarize(recs, slos), slos, max_error_rate=0.01)
    assert verdict.holds and not verdict.provisional
    assert verdict.checks[0].n_over == 2 and verdict.checks[0].n_needed == 81


def _slow_after(k: int, limit_s: float) -> Callable[[list[RequestRecord], float], bool]:
    """Decided once ``k`` requests had their first token (or still wait) past ``limit_s``."""

    def decided(records: list[RequestRecord], now: float) -> bool:
        late = 0
        for r in records:
            if math.isnan(r.t_first):
                late += not math.isnan(r.t_send) and now - r.t_sched > limit_s
            else:
                late += r.t_first - r.t_sched > limit_s
        return late >= k

    return decided


@pytest.mark.timeout(60)
@pytest.mark.parametrize("load", [{"concurrency": 8}, {"rate_rps": 100.0, "seed": 4}])
def test_a_decided_point_stops_sending_and_keeps_whole_requests(load: dict[str, Any]) -> None:
    """One request served at a time, 40 ms each: far over a 50 ms TTFT from the third
    request on. Decided there, the point stops sending; what it sent runs to its end."""
    n = 120
    with FakeOpenAIServer(ttft_ms=40, itl_ms=1, max_concurrent=1) as slow:
        result = run_load(
            LoadClient(slow.base_url), file_requests(n), decided=_slow_after(3, 0.05), **load
        )
        sent = slow.stats.n_requests
    recs = result.records
    assert 3 <= len(recs) < n / 2
    assert all(r.ok for r in recs), [r.error for r in recs]  # whole requests, none cut off
    assert sent == len(recs)  # the dropped ones never reached the server
    assert [r.index for r in recs] == list(range(len(recs)))


@pytest.mark.timeout(60)
def test_an_undecided_point_sends_everything() -> None:
    with FakeOpenAIServer(ttft_ms=1, itl_ms=0) as fast:
        result = run_load(
            LoadClient(fast.base_url),
            file_requests(30),
            rate_rps=300.0,
            seed=2,
            decided=lambda records, now: False,
        )
    assert len(result.records) == 30 and all(r.ok for r in result.records)


def test_a_point_runs_with_the_heap_before_it_frozen_and_unfrozen_after() -> None:
    import gc

    from probes.client import LoadResult, run_load

    seen: list[int] = []

    class Client:
        async def run(self, requests: Sequence[PreparedRequest], **kw: object) -> LoadResult:
            seen.append(gc.get_freeze_count())
            return LoadResult(records=[], warmup=[], client_cpu_pct=0.0, wall_s=0.0)

    keep = [[] for _ in range(1000)]  # alive before the point (tracked): frozen while it runs
    assert gc.get_freeze_count() == 0
    run_load(Client(), [])  # type: ignore[arg-type]
    assert seen and seen[0] >= len(keep)
    assert gc.get_freeze_count() == 0  # the collector sees them again afterwards
