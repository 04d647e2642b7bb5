"""probes.slo: parsing --slo text, the margin sign rule, requests a verdict needs."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from scipy.stats import binom

from probes.slo import (
    PERCENTILES,
    REQUESTS_FOR_VERDICT,
    LatencySLO,
    QualitySLO,
    SLOError,
    margin,
    parse_slo_item,
    parse_slos,
    requests_needed,
)


def test_latency_slo_defaults_to_p99() -> None:
    slo = parse_slo_item("ttft=200ms")
    assert slo == LatencySLO(metric="ttft", percentile=99, limit_ms=200.0)


def test_percentile_override() -> None:
    slo = parse_slo_item("tpot@p95=50ms")
    assert isinstance(slo, LatencySLO)
    assert (slo.metric, slo.percentile, slo.limit_ms) == ("tpot", 95, 50.0)


@pytest.mark.parametrize(
    ("text", "limit_ms"),
    [("e2e=2s", 2000.0), ("e2e=1.5s", 1500.0), ("e2e=2000ms", 2000.0), ("itl=0.5ms", 0.5)],
)
def test_units_ms_and_s(text: str, limit_ms: float) -> None:
    slo = parse_slo_item(text)
    assert isinstance(slo, LatencySLO)
    assert slo.limit_ms == pytest.approx(limit_ms)


@pytest.mark.parametrize("metric", ["ttft", "tpot", "itl", "e2e"])
def test_every_latency_metric_is_known(metric: str) -> None:
    slo = parse_slo_item(f"{metric}@p50=10ms")
    assert isinstance(slo, LatencySLO)
    assert slo.metric == metric
    assert slo.percentile == 50


def test_case_and_spaces_are_tolerated() -> None:
    slo = parse_slo_item(" TTFT @ p90 = 200 MS ")
    assert slo == LatencySLO(metric="ttft", percentile=90, limit_ms=200.0)


def test_quality_has_no_percentile() -> None:
    slo = parse_slo_item("quality=1%")
    assert slo == QualitySLO(max_degradation_pct=1.0)
    assert parse_slo_item("quality=0.5%") == QualitySLO(max_degradation_pct=0.5)


def test_comma_separated_and_repeated_give_the_same_set() -> None:
    a = parse_slos(["ttft=200ms,tpot@p95=50ms", "quality=1%"])
    b = parse_slos(["ttft=200ms", "tpot@p95=50ms,quality=1%"])
    assert a == b
    assert [(s.metric, s.percentile) for s in a.latency] == [("ttft", 99), ("tpot", 95)]
    assert a.quality == QualitySLO(max_degradation_pct=1.0)


def test_empty_parts_between_commas_are_skipped() -> None:
    slos = parse_slos(["ttft=1s,, e2e=3s,"])
    assert [s.metric for s in slos.latency] == ["ttft", "e2e"]


def test_same_metric_at_two_percentiles_is_allowed() -> None:
    slos = parse_slos(["ttft@p50=100ms,ttft@p99=400ms"])
    assert [(s.percentile, s.limit_ms) for s in slos.latency] == [(50, 100.0), (99, 400.0)]


def test_labels() -> None:
    slos = parse_slos(["ttft=2s,quality=1%"])
    assert slos.labels == ["p99 TTFT <= 2000 ms", "quality degradation <= 1 %"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("foo=200ms", "metric 'foo' is unknown; known: ttft, tpot, itl, e2e"),
        ("ttft=200us", "malformed"),
        ("ttft=200", "malformed"),
        ("ttft@p42=200ms", "p42 is not supported; use one of p50, p90, p95, p99"),
        ("ttft=0ms", "above zero"),
        ("ttft=0s", "above zero"),
        ("ttft=-5ms", "malformed"),
        ("ttft<200ms", "malformed"),
        ("quality=1", "quality takes a percentage"),
        ("quality@p99=1%", "quality takes a percentage"),
        ("", "empty SLO"),
        ("   ", "empty SLO"),
    ],
)
def test_malformed_item_raises_a_helpful_error(text: str, needle: str) -> None:
    with pytest.raises(SLOError) as exc:
        parse_slo_item(text)
    assert needle in str(exc.value)


def test_malformed_message_names_the_text_and_the_forms() -> None:
    with pytest.raises(SLOError) as exc:
        parse_slo_item("ttft=fast")
    msg = str(exc.value)
    assert "'ttft=fast'" in msg
    assert "ttft=200ms" in msg  # an accepted form, to copy


@pytest.mark.parametrize(
    ("texts", "needle"),
    [
        (["ttft=1s,ttft=2s"], "p99 ttft given twice"),
        (["ttft=1s", "ttft@p99=2s"], "p99 ttft given twice"),
        (["quality=1%,quality=2%"], "quality SLO given twice"),
        ([], "no SLO given"),
        ([""], "no SLO given"),
        ([" , "], "no SLO given"),
        (["ttft=1s,bogus"], "'bogus'"),
    ],
)
def test_malformed_sets_raise(texts: list[str], needle: str) -> None:
    with pytest.raises(SLOError) as exc:
        parse_slos(texts)
    assert needle in str(exc.value)


def test_slo_error_is_a_value_error() -> None:
    # The CLI catches ValueError for every bad input; an SLOError must be one.
    assert issubclass(SLOError, ValueError)


@pytest.mark.parametrize(
    ("measured", "limit", "expected"),
    [(100.0, 200.0, -0.5), (200.0, 200.0, 0.0), (300.0, 200.0, 0.5), (0.0, 50.0, -1.0)],
)
def test_margin_is_measured_over_limit_minus_one(
    measured: float, limit: float, expected: float
) -> None:
    assert margin(measured, limit) == pytest.approx(expected)


def test_margin_sign_rule_non_positive_holds() -> None:
    # Optuna's rule: a constraint value <= 0 is feasible.
    assert margin(199.0, 200.0) < 0
    assert margin(200.0, 200.0) <= 0
    assert margin(201.0, 200.0) > 0


@pytest.mark.parametrize(("pct", "needed"), [(99, 459), (95, 90), (90, 44), (50, 7)])
def test_requests_needed_follows_mlperf_early_stopping(pct: int, needed: int) -> None:
    slo = parse_slo_item(f"ttft@p{pct}=1s")
    assert isinstance(slo, LatencySLO)
    assert slo.requests_needed == needed


@pytest.mark.parametrize(
    ("pct", "n_over", "needed"), [(99, 0, 459), (99, 1, 662), (95, 0, 90), (90, 0, 44), (50, 0, 7)]
)
def test_requests_needed_known_values(pct: int, n_over: int, needed: int) -> None:
    assert requests_needed(pct, n_over) == needed


def test_requests_needed_is_the_smallest_n_passing_the_binomial_test() -> None:
    for pct, n_over in [(99, 0), (99, 3), (95, 2), (90, 5), (50, 1)]:
        n = requests_needed(pct, n_over)
        q = 1 - pct / 100
        assert binom.cdf(n_over, n, q) <= 0.01 < binom.cdf(n_over, n - 1, q)


def test_requests_needed_with_a_lower_confidence_needs_fewer() -> None:
    assert requests_needed(99, 0, confidence=0.95) < requests_needed(99, 0)


@pytest.mark.parametrize("pct", [99, 95])
def test_requests_needed_grows_with_the_count_over_the_limit(pct: int) -> None:
    needed = [requests_needed(pct, k) for k in range(6)]
    assert all(a < b for a, b in itertools.pairwise(needed))


def test_verdict_table_is_computed_from_the_rule() -> None:
    assert {p: requests_needed(p) for p in PERCENTILES} == REQUESTS_FOR_VERDICT


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"percentile": 99, "n_over": -1}, "n_over -1"),
        ({"percentile": 0}, "percentile 0"),
        ({"percentile": 100}, "percentile 100"),
        ({"percentile": -5}, "percentile -5"),
        ({"percentile": 99, "confidence": 1.0}, "confidence 1.0"),
        ({"percentile": 99, "confidence": 0.0}, "confidence 0.0"),
    ],
)
def test_requests_needed_rejects_bad_input(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        requests_needed(**kwargs)


def test_set_needs_the_most_any_slo_needs() -> None:
    assert parse_slos(["ttft@p50=1s,e2e@p95=5s"]).requests_needed == 90
    assert parse_slos(["ttft@p50=1s,e2e=5s"]).requests_needed == 459
    assert parse_slos(["quality=1%"]).requests_needed == 7  # no latency SLO
