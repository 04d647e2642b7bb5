"""probes.records and probes.metrics: the formulas of MEASUREMENT.md on hand-made records.

Every time below is chosen by hand (a scripted clock, in seconds), so each expected figure can be
worked out on paper.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import numpy as np
import pytest

from probes.metrics import LoadMetrics, dist_ms, judge, summarize
from probes.records import RequestRecord
from probes.slo import parse_slos


def rec(
    index: int = 0,
    *,
    t_sched: float = 0.0,
    t_send: float | None = None,
    chunks: Sequence[float] = (),
    n_out: int | None = None,
    t_end: float | None = None,
    error: str | None = None,
    from_usage: bool = True,
    n_prompt: int | None = None,
    n_prompt_expected: int | None = None,
) -> RequestRecord:
    """A record as the client would fill it: content-chunk times give t_first and t_last."""
    r = RequestRecord(index=index, t_sched=t_sched)
    r.t_send = t_sched if t_send is None else t_send
    r.chunk_times = list(chunks)
    if chunks:
        r.t_first, r.t_last = chunks[0], chunks[-1]
    r.t_end = t_end if t_end is not None else (chunks[-1] if chunks else r.t_send)
    r.n_out = len(chunks) if n_out is None else n_out
    r.n_out_from_usage = from_usage
    r.error = error
    r.n_prompt = n_prompt
    r.n_prompt_expected = n_prompt_expected
    return r


# ---------------------------------------------------------------------------- one request


def test_ttft_counts_from_the_scheduled_time_not_the_send() -> None:
    r = rec(t_sched=10.0, t_send=10.5, chunks=[11.0, 11.5])
    assert r.ttft_s == pytest.approx(1.0)  # not 0.5: client queueing is latency too
    assert r.queue_s == pytest.approx(0.5)


def test_e2e_is_last_content_chunk_minus_scheduled_time() -> None:
    r = rec(t_sched=10.0, t_send=10.2, chunks=[11.0, 11.5, 12.0], t_end=12.3)
    assert r.e2e_s == pytest.approx(2.0)


def test_tpot_is_decode_time_over_n_out_minus_one() -> None:
    # TTFT 1 s, E2E 3 s, 5 output tokens: (3 - 1) / 4 = 0.5 s
    r = rec(t_sched=0.0, chunks=[1.0, 1.5, 2.0, 2.5, 3.0], n_out=5)
    assert r.tpot_s == pytest.approx(0.5)


def test_tpot_uses_n_out_not_the_chunk_count() -> None:
    # Two chunks carrying 9 tokens (speculative decoding, or a server that batches deltas).
    r = rec(t_sched=0.0, chunks=[1.0, 3.0], n_out=9)
    assert r.tpot_s == pytest.approx(2.0 / 8)


@pytest.mark.parametrize("n_out", [0, 1])
def test_tpot_is_none_for_at_most_one_token(n_out: int) -> None:
    assert rec(chunks=[1.0], n_out=n_out).tpot_s is None


def test_itl_is_the_gaps_between_content_chunks() -> None:
    r = rec(chunks=[1.0, 1.25, 1.75, 2.0])
    assert r.itl_s() == pytest.approx([0.25, 0.5, 0.25])
    assert rec(chunks=[1.0]).itl_s() == []


def test_e2e_minus_ttft_equals_the_sum_of_itl_gaps() -> None:
    # vLLM's benchmark pins this invariant: latency - ttft == sum(itl).
    r = rec(t_sched=3.0, t_send=3.1, chunks=[3.4, 3.45, 3.61, 3.62, 4.0, 4.33])
    assert r.e2e_s - r.ttft_s == pytest.approx(sum(r.itl_s()))


def test_a_failed_request_is_not_ok() -> None:
    assert rec(chunks=[1.0]).ok
    assert not rec(chunks=[1.0], error="HTTP 500: boom").ok
    assert not rec(chunks=[]).ok  # no content at all


def test_to_json_turns_nan_into_none() -> None:
    d = RequestRecord(index=3, t_sched=1.0).to_json()
    assert d["index"] == 3
    assert d["t_sched"] == 1.0
    assert d["t_first"] is None and d["t_end"] is None


# ---------------------------------------------------------------------------- one window


def three_requests() -> list[RequestRecord]:
    """Three completed requests; the window runs from 0.0 (first send) to 4.0 (last end)."""
    return [
        rec(0, t_sched=0.0, chunks=[0.5, 1.0, 1.5], n_out=3, t_end=1.6),  # TTFT .5, E2E 1.5
        rec(1, t_sched=0.5, t_send=1.0, chunks=[2.0, 2.5], n_out=2),  # TTFT 1.5, E2E 2.0
        rec(2, t_sched=1.0, chunks=[1.5, 2.0, 3.0, 4.0], n_out=5),  # TTFT .5, E2E 3.0
    ]


def test_window_runs_from_first_send_to_last_end() -> None:
    m = summarize(three_requests())
    assert m.duration_s == pytest.approx(4.0)


def test_window_ignores_a_late_schedule_and_uses_the_send() -> None:
    rs = [rec(0, t_sched=0.0, t_send=2.0, chunks=[3.0], t_end=6.0)]
    assert summarize(rs).duration_s == pytest.approx(4.0)


def test_throughput_is_tokens_and_requests_over_the_window() -> None:
    m = summarize(three_requests())
    assert m.output_tokens_per_s == pytest.approx((3 + 2 + 5) / 4.0)
    assert m.requests_per_s == pytest.approx(3 / 4.0)
    assert m.mean_output_tokens == pytest.approx(10 / 3)


def test_latency_distributions_in_ms() -> None:
    m = summarize(three_requests())
    assert m.ttft_ms.n == 3
    assert m.ttft_ms.mean == pytest.approx((500 + 1500 + 500) / 3)
    assert m.e2e_ms.mean == pytest.approx((1500 + 2000 + 3000) / 3)
    # TPOT per request: (1.5-.5)/2 = .5, (2.0-1.5)/1 = .5, (3.0-.5)/4 = .625
    assert m.tpot_ms.n == 3
    assert m.tpot_ms.mean == pytest.approx((500 + 500 + 625) / 3)
    assert m.queue_ms.mean == pytest.approx((0 + 500 + 0) / 3)


def test_itl_is_pooled_over_requests() -> None:
    m = summarize(three_requests())
    gaps = [0.5, 0.5, 0.5, 0.5, 1.0, 1.0]  # requests 0, 1 and 2 pooled
    assert m.itl_ms.n == len(gaps)
    assert m.itl_ms.mean == pytest.approx(1000 * sum(gaps) / len(gaps))


def test_tpot_skips_single_token_requests() -> None:
    rs = [rec(0, chunks=[1.0], n_out=1), rec(1, chunks=[1.0, 2.0], n_out=2)]
    m = summarize(rs)
    assert m.tpot_ms.n == 1
    assert m.tpot_ms.mean == pytest.approx(1000.0)


def test_failed_requests_are_counted_and_left_out_of_latency() -> None:
    rs = [
        *three_requests(),
        rec(3, t_sched=0.2, chunks=[], error="HTTP 500: boom", t_end=0.3),
        # content arrived but the stream broke: still failed, its fast TTFT must not count
        rec(4, t_sched=0.2, chunks=[0.21], n_out=1, error="ClientPayloadError: x", t_end=0.25),
    ]
    m = summarize(rs)
    assert (m.n_requests, m.n_completed, m.n_failed) == (5, 3, 2)
    assert m.error_rate == pytest.approx(2 / 5)
    assert m.ttft_ms.n == 3
    assert m.ttft_ms.mean == pytest.approx((500 + 1500 + 500) / 3)
    assert m.output_tokens_per_s == pytest.approx(10 / 4.0)  # failed tokens do not count
    assert m.errors == {"HTTP 500: boom": 1, "ClientPayloadError: x": 1}


def test_a_late_timeout_does_not_stretch_the_window() -> None:
    # The completed requests end by 4.0; a request sent at 0.2 times out at 180.2.
    rs = [
        *three_requests(),
        rec(3, t_sched=0.2, chunks=[], error="timeout after 180 s", t_end=180.2),
    ]
    m = summarize(rs)
    assert m.duration_s == pytest.approx(4.0)
    assert m.output_tokens_per_s == pytest.approx((3 + 2 + 5) / 4.0)
    assert m.requests_per_s == pytest.approx(3 / 4.0)
    assert (m.n_requests, m.n_completed, m.n_failed) == (4, 3, 1)
    assert m.error_rate == pytest.approx(1 / 4)
    assert m.errors == {"timeout after 180 s": 1}
    # Busy time inside the window only: 1.6 + 1.5 + 3.0 from the completed, 3.8 from the timeout
    assert m.mean_in_flight == pytest.approx((1.6 + 1.5 + 3.0 + 3.8) / 4.0)


def test_window_uses_every_end_when_nothing_completed() -> None:
    rs = [
        rec(0, t_sched=0.0, chunks=[], error="HTTP 500: x", t_end=1.0),
        rec(1, t_sched=0.5, chunks=[], error="timeout after 3 s", t_end=3.5),
    ]
    m = summarize(rs)
    assert m.duration_s == pytest.approx(3.5)
    assert m.error_rate == 1.0


def test_over_limit_counts_samples_over_each_slo() -> None:
    # TTFTs .5, 1.5, .5 s; E2Es 1.5, 2.0, 3.0 s; TPOTs .5, .5, .625 s;
    # pooled ITL gaps .5, .5, .5, .5, 1.0, 1.0 s.
    slos = parse_slos(["ttft=1s,e2e@p95=1.5s,tpot@p50=0.5s,itl@p90=0.6s,ttft@p50=0.4s"])
    rs = [*three_requests(), rec(3, t_sched=0.2, chunks=[], error="timeout", t_end=9.0)]
    m = summarize(rs, slos)
    assert m.over_limit == {
        "ttft@p99": 1,
        "e2e@p95": 2,  # 1.5 is at the limit, not over it
        "tpot@p50": 1,
        "itl@p90": 2,
        "ttft@p50": 3,
    }
    assert summarize(three_requests()).over_limit == {}


def test_no_records_at_all() -> None:
    m = summarize([])
    assert (m.n_requests, m.duration_s, m.error_rate, m.output_tokens_per_s) == (0, 0.0, 0.0, 0.0)
    assert m.ttft_ms.p99 is None
    assert m.n_out_source == "none"


def test_goodput_counts_only_requests_meeting_every_slo() -> None:
    # TTFTs: .5, 1.5, .5 s; E2Es: 1.5, 2.0, 3.0 s. With TTFT <= 1 s and E2E <= 2.5 s only
    # request 0 is good.
    slos = parse_slos(["ttft=1s,e2e=2.5s"])
    m = summarize(three_requests(), slos)
    assert m.goodput_rps == pytest.approx(1 / 4.0)
    assert m.token_goodput_per_s == pytest.approx(3 / 4.0)
    assert m.slo_attainment == pytest.approx(1 / 3)


def test_failed_requests_count_against_slo_attainment() -> None:
    rs = [*three_requests(), rec(3, chunks=[], error="timeout after 1 s", t_end=1.0)]
    m = summarize(rs, parse_slos(["ttft=10s"]))
    assert m.goodput_rps == pytest.approx(3 / 4.0)
    assert m.slo_attainment == pytest.approx(3 / 4)


def test_slo_attainment_is_none_without_latency_slos() -> None:
    assert summarize(three_requests()).slo_attainment is None


def test_goodput_under_a_tpot_slo() -> None:
    # TPOTs: .5, .5, .625 s
    m = summarize(three_requests(), parse_slos(["tpot=0.5s"]))
    assert m.goodput_rps == pytest.approx(2 / 4.0)
    assert m.token_goodput_per_s == pytest.approx((3 + 2) / 4.0)


def test_goodput_under_an_itl_slo_uses_each_requests_own_gaps() -> None:
    # request 2's gaps are .5, 1.0, 1.0: its p50 is 1.0 s; the others' gaps are all .5 s
    m = summarize(three_requests(), parse_slos(["itl@p50=0.6s"]))
    assert m.goodput_rps == pytest.approx(2 / 4.0)


def test_n_out_source() -> None:
    assert summarize([rec(chunks=[1.0], from_usage=True)]).n_out_source == "usage"
    assert summarize([rec(chunks=[1.0], from_usage=False)]).n_out_source == "chunks"
    mixed = [rec(0, chunks=[1.0], from_usage=True), rec(1, chunks=[1.0], from_usage=False)]
    assert summarize(mixed).n_out_source == "mixed"


def test_prompt_token_mismatches() -> None:
    rs = [
        rec(0, chunks=[1.0], n_prompt=128, n_prompt_expected=128),
        rec(1, chunks=[1.0], n_prompt=129, n_prompt_expected=128),
        rec(2, chunks=[1.0], n_prompt=None, n_prompt_expected=128),  # no usage: not compared
    ]
    assert summarize(rs).prompt_token_mismatches == 1


def test_mean_in_flight_is_busy_time_over_the_window() -> None:
    # Two requests, each in flight 2 s, in a 2 s window: two in flight on average.
    rs = [rec(0, chunks=[1.0, 2.0]), rec(1, chunks=[1.5, 2.0])]
    assert summarize(rs).mean_in_flight == pytest.approx(2.0)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 459])
def test_percentiles_match_numpy_linear_interpolation(n: int) -> None:
    rng = random.Random(n)
    samples = [rng.lognormvariate(-2.0, 0.7) for _ in range(n)]
    d = dist_ms(samples)
    ms = np.asarray(samples) * 1000.0
    for p in (50, 90, 95, 99):
        assert d.at(p) == pytest.approx(float(np.percentile(ms, p, method="linear")))
    assert d.mean == pytest.approx(float(ms.mean()))
    assert d.n == n


def test_percentile_by_hand() -> None:
    # 0, 10, 20, 30 ms: p50 = 15, p90 = 27, p99 = 29.7 under linear interpolation
    d = dist_ms([0.0, 0.010, 0.020, 0.030])
    assert (d.p50, d.p90, d.p99) == pytest.approx((15.0, 27.0, 29.7))


# ---------------------------------------------------------------------------- verdicts


def uniform(n: int, *, ttft_s: float = 0.1, n_failed: int = 0) -> LoadMetrics:
    """n requests with the same TTFT (and 4 tokens each), the last n_failed of them failed."""
    rs = []
    for i in range(n):
        t0 = i * 0.01
        if i >= n - n_failed:
            rs.append(rec(i, t_sched=t0, chunks=[], error="HTTP 500: x", t_end=t0 + 0.01))
        else:
            rs.append(rec(i, t_sched=t0, chunks=[t0 + ttft_s + 0.01 * k for k in range(4)]))
    return summarize(rs)


def test_p99_verdict_is_provisional_below_459_requests() -> None:
    slos = parse_slos(["ttft=1s"])
    v = judge(uniform(458), slos, max_error_rate=0.01)
    assert v.holds and v.provisional
    check = v.checks[0]
    assert (check.n, check.n_needed, check.provisional) == (458, 459, True)
    v = judge(uniform(459), slos, max_error_rate=0.01)
    assert v.holds and not v.provisional


def with_ttfts(n: int, n_over: int) -> LoadMetrics:
    """n completed requests judged on p99 TTFT <= 1 s: n_over of them at 2 s, the rest 0.1 s."""
    rs = []
    for i in range(n):
        ttft = 2.0 if i < n_over else 0.1
        rs.append(rec(i, t_sched=i * 0.01, chunks=[i * 0.01 + ttft]))
    return summarize(rs, parse_slos(["ttft=1s"]))


@pytest.mark.parametrize(
    ("n", "n_over", "provisional", "n_needed"),
    [(459, 1, True, 662), (662, 1, False, 662), (459, 0, False, 459)],
)
def test_provisional_counts_the_samples_over_the_limit(
    n: int, n_over: int, provisional: bool, n_needed: int
) -> None:
    v = judge(with_ttfts(n, n_over), parse_slos(["ttft=1s"]), max_error_rate=0.01)
    check = v.checks[0]
    assert (check.n, check.n_over, check.n_needed) == (n, n_over, n_needed)
    assert check.provisional is provisional
    assert v.provisional is provisional
    assert check.holds  # p99 is still 100 ms


def test_check_n_is_the_metrics_sample_count() -> None:
    # 10 requests, 3 of them with one token: TPOT has 7 samples, ITL 7 gaps, TTFT 10.
    rs = [
        rec(i, t_sched=float(i), chunks=[i + 0.1, i + 0.2][: 1 if i < 3 else 2]) for i in range(10)
    ]
    slos = parse_slos(["ttft@p50=1s,tpot@p50=1s,itl@p50=1s"])
    v = judge(summarize(rs, slos), slos, max_error_rate=0.01)
    n = {c.metric: c.n for c in v.checks}
    assert (n["ttft"], n["tpot"], n["itl"]) == (10, 7, 7)
    assert n["error_rate"] == 10


def test_p50_verdict_needs_only_7_requests() -> None:
    slos = parse_slos(["ttft@p50=1s"])
    assert judge(uniform(6), slos, 0.01).provisional
    assert not judge(uniform(7), slos, 0.01).provisional


def test_latency_check_margin_and_holds() -> None:
    m = uniform(20, ttft_s=0.3)  # p99 TTFT = 300 ms
    v = judge(m, parse_slos(["ttft=200ms"]), 0.01)
    check = v.checks[0]
    assert check.measured_ms == pytest.approx(300.0)
    assert check.margin == pytest.approx(0.5)
    assert not check.holds and not v.holds
    v = judge(m, parse_slos(["ttft=600ms"]), 0.01)
    assert v.checks[0].margin == pytest.approx(-0.5)
    assert v.holds


def test_error_rate_is_a_constraint_of_its_own() -> None:
    slos = parse_slos(["ttft=10s"])
    m = uniform(100, n_failed=2)  # 2 % errors, latency fine
    v = judge(m, slos, max_error_rate=0.01)
    err = next(c for c in v.checks if c.metric == "error_rate")
    assert err.margin == pytest.approx(1.0)  # 0.02 / 0.01 - 1
    assert not err.holds and not v.holds
    assert v.checks[0].holds  # the latency SLO itself held
    assert judge(m, slos, max_error_rate=0.05).holds


def test_error_rate_at_the_limit_holds() -> None:
    v = judge(uniform(100, n_failed=1), parse_slos(["ttft=10s"]), max_error_rate=0.01)
    assert v.holds


def test_zero_error_limit() -> None:
    slos = parse_slos(["ttft=10s"])
    clean = judge(uniform(50), slos, max_error_rate=0.0)
    assert clean.holds
    assert next(c for c in clean.checks if c.metric == "error_rate").margin <= 0
    broken = judge(uniform(50, n_failed=1), slos, max_error_rate=0.0)
    assert not broken.holds
    assert math.isinf(broken.worst_margin) and broken.worst_margin > 0


def test_worst_margin_is_the_largest_margin() -> None:
    m = uniform(100, ttft_s=0.1)  # TTFT 100 ms, E2E 130 ms
    v = judge(m, parse_slos(["ttft=400ms,e2e=200ms"]), max_error_rate=0.01)
    margins = {c.metric: c.margin for c in v.checks}
    assert margins["ttft"] == pytest.approx(-0.75)
    assert margins["e2e"] == pytest.approx(130 / 200 - 1)
    assert margins["error_rate"] == pytest.approx(-1.0)
    assert v.worst_margin == pytest.approx(130 / 200 - 1)


def test_no_completed_request_fails_every_latency_slo() -> None:
    m = uniform(5, n_failed=5)
    v = judge(m, parse_slos(["ttft=10s"]), max_error_rate=1.0 - 1e-9)
    assert not v.checks[0].holds
    assert v.checks[0].measured_ms is None
    assert not v.holds


def test_a_metric_with_no_samples_does_not_hold() -> None:
    # One-token outputs have no TPOT: nothing shows the TPOT SLO holds, so the verdict fails.
    rs = [rec(i, t_sched=float(i), chunks=[i + 0.1], n_out=1) for i in range(10)]
    slos = parse_slos(["tpot@p50=50ms"])
    m = summarize(rs, slos)
    assert m.slo_attainment == 1.0  # per request, nothing broke the SLO
    v = judge(m, slos, max_error_rate=0.01)
    check = v.checks[0]
    assert (check.n, check.measured_ms, check.holds, check.provisional) == (0, None, False, True)
    assert math.isinf(check.margin) and check.margin > 0
    assert not v.holds and v.provisional
