"""Queue growth under open-loop arrivals: a rising TTFT is projected to the horizon, a flat one
is judged as measured."""

from __future__ import annotations

import random

import pytest

from probes.drift import HORIZON_S, MIN_RECORDS, project, queue_drift
from probes.metrics import summarize
from probes.records import RequestRecord


def open_loop(
    ttfts: list[float], rate: float, gap_s: float = 0.05, failed: tuple[int, ...] = ()
) -> list[RequestRecord]:
    """Open-loop records with the given TTFTs (s): arrivals every 1/rate s, 8 output tokens in
    8 chunks ``gap_s`` apart; the requests numbered in ``failed`` carry an error."""
    out = []
    for i, ttft in enumerate(ttfts):
        t = i / rate
        chunks = [t + ttft + gap_s * k for k in range(8)]
        out.append(
            RequestRecord(
                index=i,
                t_sched=t,
                t_send=t,
                t_first=chunks[0],
                t_last=chunks[-1],
                t_end=chunks[-1],
                n_out=8,
                chunk_times=chunks,
                error="HTTP 500" if i in failed else None,
            )
        )
    return out


def _records(n: int, rate: float, slope: float, noise: float = 0.02, seed: int = 1):
    """Open-loop records: arrivals every 1/rate s, TTFT = 0.1 s + slope x arrival + noise."""
    rng = random.Random(seed)
    return open_loop([0.1 + slope * (i / rate) + rng.uniform(0, noise) for i in range(n)], rate)


def test_a_growing_queue_is_projected_to_the_horizon():
    recs = _records(150, rate=10.0, slope=0.05)  # 14.9 s of arrivals, TTFT +50 ms per s
    d = queue_drift(recs)
    assert d.slope == pytest.approx(0.05, rel=0.05)
    assert d.low > 0 and d.growing
    assert d.shift_s == pytest.approx(d.slope * (HORIZON_S - d.span_s))
    measured = summarize(recs)
    judged = summarize(project(recs, d))
    shift_ms = d.shift_s * 1000
    assert judged.ttft_ms.p99 == pytest.approx(measured.ttft_ms.p99 + shift_ms)
    assert judged.e2e_ms.p50 == pytest.approx(measured.e2e_ms.p50 + shift_ms)
    # Only the wait grows: time per output token and the gaps between chunks are as measured.
    assert judged.tpot_ms.p99 == pytest.approx(measured.tpot_ms.p99)
    assert judged.itl_ms.p50 == pytest.approx(measured.itl_ms.p50)
    assert project(recs, d)[0] is not recs[0]  # copies: the measured records stay as they were
    assert recs[0].t_first == pytest.approx(0.1, abs=0.03)


def test_a_stable_queue_is_judged_as_measured():
    recs = _records(300, rate=10.0, slope=0.0, noise=0.3)
    d = queue_drift(recs)
    assert not d.growing and d.shift_s == 0
    assert project(recs, d) == recs


def test_a_falling_trend_is_never_credited():
    recs = _records(150, rate=10.0, slope=-0.02)
    d = queue_drift(recs)
    assert d.slope < 0 and d.shift_s == 0


def test_too_few_requests_or_a_point_past_the_horizon_are_not_projected():
    assert not queue_drift(_records(MIN_RECORDS - 1, rate=10.0, slope=0.1)).growing
    # A point that already lasted the horizon was measured for as long as it must hold.
    long = _records(300, rate=2.0, slope=0.05)  # 149.5 s of arrivals
    assert queue_drift(long, horizon_s=100.0).shift_s == 0


def test_failed_requests_are_left_alone():
    recs = _records(60, rate=10.0, slope=0.1)
    recs[5] = RequestRecord(index=5, t_sched=0.5, t_send=0.5, t_end=3.0, error="HTTP 500")
    d = queue_drift(recs)
    assert d.growing
    assert project(recs, d)[5] is recs[5]
