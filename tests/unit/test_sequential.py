"""probes.sequential: what a growing point still needs, from made-up records."""

from __future__ import annotations

import math

import numpy as np
import pytest

from probes.records import RequestRecord
from probes.sequential import decided, known_over, over_needed, shortfall
from probes.slo import parse_slos, requests_needed

TTFT = parse_slos(["ttft=2s"])  # p99


def rec(
    i: int, ttft: float | None = 0.5, e2e: float | None = 3.0, n_out: int = 64
) -> RequestRecord:
    """Request i, due at i / 10 s; its first and last chunk ``ttft`` and ``e2e`` seconds
    later (None: not yet)."""
    r = RequestRecord(index=i, t_sched=i / 10, t_send=i / 10)
    if ttft is not None:
        r.t_first = r.t_sched + ttft
        r.chunk_times = [r.t_first]
    if e2e is not None and ttft is not None:
        r.t_last = r.t_end = r.t_sched + e2e
        r.n_out = n_out
        step = (e2e - ttft) / (n_out - 1)
        r.chunk_times = [r.t_first + k * step for k in range(n_out)]
    return r


def test_a_first_token_after_the_limit_is_over_and_one_before_it_is_not() -> None:
    slo = TTFT.latency[0]
    assert known_over(rec(0, ttft=2.5), slo, now=100.0) == 1
    assert known_over(rec(0, ttft=1.9), slo, now=100.0) == 0


def test_a_request_still_waiting_counts_once_its_limit_has_passed() -> None:
    slo = TTFT.latency[0]
    waiting = rec(10, ttft=None, e2e=None)  # due at 1.0 s
    assert known_over(waiting, slo, now=2.9) == 0  # may still come in time
    assert known_over(waiting, slo, now=3.1) == 1  # cannot


def test_a_failed_request_is_an_error_not_a_slow_sample() -> None:
    r = rec(0, ttft=None, e2e=None)
    r.error = "HTTP 500: boom"
    r.t_end = 5.0
    assert known_over(r, TTFT.latency[0], now=100.0) == 0


def test_time_per_token_is_known_only_once_a_request_has_finished() -> None:
    slo = parse_slos(["tpot=50ms"]).latency[0]
    slow = rec(0, ttft=0.5, e2e=0.5 + 63 * 0.08)  # 80 ms a token
    assert known_over(slow, slo, now=100.0) == 1
    running = rec(0, ttft=0.5, e2e=None)
    assert known_over(running, slo, now=100.0) == 0


def test_itl_counts_gaps() -> None:
    slo = parse_slos(["itl@p90=50ms"]).latency[0]
    r = rec(0, ttft=0.1, e2e=None)
    r.chunk_times = [0.1, 0.12, 0.2, 0.21, 0.3]  # gaps 20, 80, 10, 90 ms
    r.t_last = r.t_end = 0.3
    r.n_out = 5
    assert known_over(r, slo, now=1.0) == 2


def test_none_over_needs_nothing_more_at_459() -> None:
    recs = [rec(i) for i in range(459)]
    assert shortfall(recs, TTFT, now=1000.0) == 0


def test_a_point_sized_short_on_purpose_is_not_grown() -> None:
    """16 requests for a p99 (`autotune probe --requests 16 --slo ttft=20s`): provisional by
    design, with or without a slow one; growing it would not give a verdict."""
    assert shortfall([rec(i) for i in range(400)], TTFT, now=1000.0) == 0
    recs = [rec(i, ttft=2.5 if i == 3 else 0.5) for i in range(16)]
    assert shortfall(recs, TTFT, now=1000.0) == 0


def test_one_over_in_505_asks_for_what_662_needs() -> None:
    """The README command's confirmation on a slow AMD EPYC: 505 requests, one over 2 s."""
    recs = [rec(i, ttft=2.4 if i == 200 else 0.5) for i in range(505)]
    assert shortfall(recs, TTFT, now=1000.0) == requests_needed(99, 1) - 505 == 157


def test_requests_in_flight_at_the_end_count_only_once_late() -> None:
    recs = [rec(i) for i in range(503)] + [rec(503, None, None), rec(504, None, None)]
    # due at 50.3 and 50.4 s: at 51 s both are inside 2 s, at 52.35 one is past it
    assert shortfall(recs, TTFT, now=51.0) == 0
    assert shortfall(recs, TTFT, now=52.35) == 157


def test_the_slo_that_needs_most_decides() -> None:
    slos = parse_slos(["ttft@p90=1s", "e2e@p99=10s"])
    recs = [rec(i, ttft=1.5 if i < 9 else 0.2, e2e=12.0 if i == 5 else 3.0) for i in range(500)]
    # p90 of TTFT: 9 over in 500 needs far fewer; p99 of E2E: one over, 662
    assert shortfall(recs, slos, now=1000.0) == requests_needed(99, 1) - 500
    recs[5].t_last = recs[5].t_end = recs[5].t_sched + 3.0
    assert shortfall(recs, slos, now=1000.0) == 0


def test_itl_needs_are_counted_in_gaps_and_asked_in_requests() -> None:
    slos = parse_slos(["itl@p99=50ms"])
    recs = [rec(i, ttft=0.1, e2e=0.1 + 3 * 0.01, n_out=4) for i in range(160)]  # 3 gaps each
    recs[0].chunk_times[-1] += 0.2  # one gap of 210 ms
    # 480 gaps, one over: 662 needed, 182 more gaps, 3 a request
    assert shortfall(recs, slos, now=1000.0) == math.ceil((requests_needed(99, 1) - 480) / 3)


@pytest.mark.parametrize("n_over", [0, 1, 2, 5])
def test_once_grown_by_the_shortfall_none_is_left(n_over: int) -> None:
    n = 505
    recs = [rec(i, ttft=3.0 if i < n_over else 0.5) for i in range(n)]
    more = shortfall(recs, TTFT, now=1000.0)
    recs += [rec(n + i) for i in range(more)]
    assert shortfall(recs, TTFT, now=1000.0) == 0
    assert len(recs) == max(n, requests_needed(99, n_over))


def test_failed_requests_give_no_samples() -> None:
    """505 sent, 2 failed (HTTP 500s, within the error limit), one over: the verdict counts
    503 TTFT samples against the 662 it needs, so 159 more, not 157."""
    recs = [rec(i, ttft=2.4 if i == 200 else 0.5) for i in range(505)]
    for r in recs[10:12]:
        r.t_first = r.t_last = math.nan
        r.error = "HTTP 500: boom"
    assert shortfall(recs, TTFT, now=1000.0) == requests_needed(99, 1) - 503


def test_one_token_answers_give_no_time_per_token() -> None:
    slos = parse_slos(["tpot@p99=50ms"])
    recs = [rec(i, ttft=0.5, e2e=0.5 + 63 * 0.08 if i == 0 else 2.0) for i in range(480)]
    for r in recs[1:21]:  # 20 answers of one token: no TPOT
        r.n_out, r.chunk_times, r.t_last = 1, [r.t_first], r.t_first
    assert shortfall(recs, slos, now=1000.0) == requests_needed(99, 1) - 460


@pytest.mark.parametrize("n", [40, 100, 200, 505, 581])
def test_over_needed_puts_the_percentile_over_whatever_the_rest_are(n: int) -> None:
    k = over_needed(99, n)
    worst_case = np.array([0.0] * (n - k) + [1.0] * k)  # the rest at no latency at all
    assert np.percentile(worst_case, 99) > 0.5
    # and the fewest that do: with one fewer, the percentile's lower neighbour is a sample the
    # rest chose, which may be under the limit
    one_fewer = np.sort(np.array([0.0] * (n - k + 1) + [1.0] * (k - 1)))
    assert one_fewer[math.floor(0.99 * (n - 1))] == 0.0
    assert over_needed(99, 581) == 7  # the README command's 11.7 req/s point: 36 over


def test_a_point_is_decided_once_its_known_overs_break_it_for_all_planned() -> None:
    planned = 200  # p99 of 200: three over whatever the other 197 are
    assert over_needed(99, planned) == 3
    fast = [rec(i) for i in range(20)]
    two = [*fast, rec(20, ttft=2.5), rec(21, ttft=3.0)]
    assert not decided(TTFT, planned, two, now=100.0)
    # a third: finished late, or still waiting once its limit has passed
    assert decided(TTFT, planned, [*two, rec(22, ttft=2.2)], now=100.0)
    waiting = rec(22, ttft=None)
    assert not decided(TTFT, planned, [*two, waiting], now=waiting.t_sched + 1.0)
    assert decided(TTFT, planned, [*two, waiting], now=waiting.t_sched + 2.5)
    # more sent than planned (a point that grew): judged over all of them
    grown = [rec(i) for i in range(200)] + [rec(200, ttft=2.5), rec(201, ttft=3.0)]
    assert over_needed(99, 10) == 2 and over_needed(99, len(grown)) == 4
    assert not decided(TTFT, 10, grown, now=100.0)


def test_itl_never_decides_a_point_early() -> None:
    itl = parse_slos(["itl=10ms"])
    slow = [rec(i, ttft=0.5, e2e=30.0) for i in range(50)]  # every gap about 470 ms
    assert shortfall(slow, itl, now=100.0) > 0  # over, and counted as gaps
    assert not decided(itl, 50, slow, now=100.0)


def test_the_first_requests_skipped_do_not_decide_a_point() -> None:
    planned = 200  # three over decide it
    slow_first = [rec(i, ttft=2.5) for i in range(3)] + [rec(i) for i in range(3, 60)]
    assert decided(TTFT, planned, slow_first, now=100.0)
    assert not decided(TTFT, planned, slow_first, now=100.0, skip_first=40)
    slow_late = [*slow_first, rec(60, ttft=2.5), rec(61, ttft=2.5), rec(62, ttft=3.0)]
    assert decided(TTFT, planned, slow_late, now=100.0, skip_first=40)
