"""tuner.run.reach: a configuration that no load can bring under a latency SLO, from one request."""

from __future__ import annotations

from probes.diagnose import Diagnosis, SweepPoint
from probes.slo import parse_slos
from probes.verdict import decide
from tuner.run.reach import unreachable
from tuner.scoring.estimate import constraints


def diagnosis(ttft_ms: float, tpot_ms: float, n_out: int = 64) -> Diagnosis:
    one = SweepPoint(
        prompt_tokens=128, output_tokens=n_out, concurrency=1, n_requests=4,
        ttft_ms_p50=ttft_ms, tpot_ms_p50=tpot_ms, e2e_ms_p50=ttft_ms + (n_out - 1) * tpot_ms,
        output_tokens_per_s=n_out / ((ttft_ms + (n_out - 1) * tpot_ms) / 1000),
    )  # fmt: skip
    four = one.model_copy(update={"concurrency": 4, "ttft_ms_p50": 3 * ttft_ms})
    verdict = decide(
        prefill_share=0.5, split_source="client", tpot_c1_ms=tpot_ms, weight_bytes=None,
        bandwidth_gbps=None, llc_bytes=None, batching_gain=1.1, tpot_growth=3.0,
    )  # fmt: skip
    return Diagnosis(
        prefill_sweep=[], prefill_rate_tokens_per_s=None, decode_sweep=[one, four],
        load_concurrency=4, load_metrics=None, client_prefill_share=None,
        server_prefill_share=None, server_split_s=None, device=None, model=None,
        llc_bytes=None, verdict=verdict,
    )  # fmt: skip


def cons(*slos: str):  # type: ignore[no-untyped-def]
    return constraints(parse_slos(list(slos)), 0.01)


def test_one_request_over_the_limit_by_a_clear_factor_is_unreachable() -> None:
    # AVX2-only AMD EPYC, vLLM's bf16 defaults: 3.08 s to the first token of one prompt.
    why = unreachable(diagnosis(3084.0, 41.9), cons("ttft=2s"))
    assert why is not None
    assert "p99 TTFT" in why and "3.08 s" in why and "concurrency 1" in why


def test_within_the_factor_or_under_the_limit_a_search_is_still_worth_it() -> None:
    assert unreachable(diagnosis(2400.0, 41.9), cons("ttft=2s")) is None  # 1.2x: the edge
    assert unreachable(diagnosis(87.0, 44.0), cons("ttft=2s")) is None


def test_every_latency_slo_is_checked_and_the_first_miss_is_named() -> None:
    why = unreachable(diagnosis(87.0, 44.0), cons("ttft=2s", "tpot@p90=30ms"))
    assert why is not None and "p90 TPOT" in why
    e2e = unreachable(diagnosis(87.0, 44.0), cons("e2e=2s"))  # 87 + 63 x 44 ms = 2.86 s
    assert e2e is not None and "E2E" in e2e


def test_without_a_probe_or_its_concurrency_1_point_nothing_is_concluded() -> None:
    assert unreachable(None, cons("ttft=2s")) is None
    d = diagnosis(3084.0, 41.9)
    d.decode_sweep = d.decode_sweep[1:]
    assert unreachable(d, cons("ttft=2s")) is None
