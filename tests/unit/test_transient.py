"""A point disturbed at its start: a stall the load did not cause is told from an overload."""

from __future__ import annotations

from probes.slo import parse_slos
from probes.transient import MIN_AFTER, disturbed_at_start
from tests.unit.test_drift import open_loop

SLOS = parse_slos(["ttft=2s"])


def _records(ttfts: list[float], rate: float = 8.0, failed: tuple[int, ...] = ()):
    """Open-loop records, one every 1/rate s, with the given TTFTs (s), decoding at 100 ms a
    token."""
    return open_loop(ttfts, rate, gap_s=0.1, failed=failed)


def test_a_stall_as_the_point_began_is_told_from_the_load():
    # Seed 123 on the Xeon (2026-12-05): the first 14 of 122 requests at 1.5-2.7 s, then
    # the backlog drained and every later request stayed under 1 s.
    stall = [2.44, 2.29, 2.72, 2.49, 2.24, 2.11, 2.1, 2.03, 1.89, 1.76, 1.71, 1.62, 1.57, 1.48]
    recs = _records(stall + [0.3] * 108)
    assert disturbed_at_start(recs, SLOS)


def test_an_overload_breaks_late_and_is_not_a_stall():
    # The queue grows with the arrivals: the requests over the limit are the last ones.
    recs = _records([0.2 + 0.03 * i for i in range(122)])
    assert not disturbed_at_start(recs, SLOS)


def test_requests_over_the_limit_later_in_the_point_are_not_a_stall():
    ttfts = [2.5] * 5 + [0.3] * 100 + [2.5] + [0.3] * 16
    assert not disturbed_at_start(_records(ttfts), SLOS)


def test_a_point_within_every_limit_is_not_disturbed():
    assert not disturbed_at_start(_records([0.3] * 100), SLOS)


def test_a_failed_request_is_an_error_not_a_stall():
    recs = _records([2.5] * 5 + [0.3] * 100, failed=(50,))
    assert not disturbed_at_start(recs, SLOS)


def test_a_stall_needs_enough_requests_after_it_to_be_told():
    # A point that is nearly all stall says nothing of the load after it.
    short = _records([2.5] * 2 + [0.3] * (MIN_AFTER - 1))
    assert not disturbed_at_start(short, SLOS)
    enough = _records([2.5] * 2 + [0.3] * (MIN_AFTER + 20))
    assert disturbed_at_start(enough, SLOS)


def test_other_latency_slos_count_too():
    # A stall shows in time per output token as well: a TPOT SLO's requests over it, early.
    slos = parse_slos(["ttft=2s", "tpot=200ms"])  # the rest decode at 100 ms a token
    recs = _records([0.3] * 120)
    for r in recs[:5]:  # slow decoding in the first requests only
        r.t_last = r.t_first + 3.0  # 429 ms a token
        r.t_end = r.t_last
        r.chunk_times = [r.t_first, r.t_last]
    assert disturbed_at_start(recs, slos)
    assert not disturbed_at_start(recs, SLOS)


def test_with_headroom_the_limit_is_the_one_less_the_headroom():
    # A confirmation try judged with 10 % headroom: 1.9 s is over 1.8 s, though under 2 s.
    recs = _records([1.9] * 5 + [0.3] * 100)
    assert not disturbed_at_start(recs, SLOS)
    assert disturbed_at_start(recs, SLOS, headroom=0.1)
    late = _records([0.3] * 100 + [1.9] * 5)  # the same requests, late: an overload
    assert not disturbed_at_start(late, SLOS, headroom=0.1)


def test_a_try_grown_for_its_stall_is_judged_on_the_span_it_was_planned_with():
    # 100 requests planned, the first 25 over the limit: a quarter of the span, not a stall.
    # Grown by 60 more for them, the stall is under a fifth of the grown span: still none.
    recs = _records([2.5] * 25 + [0.3] * 135)
    assert not disturbed_at_start(recs, SLOS, planned=100)
    assert disturbed_at_start(recs, SLOS)  # what the grown span alone would have said
    assert disturbed_at_start(_records([2.5] * 15 + [0.3] * 145), SLOS, planned=100)
