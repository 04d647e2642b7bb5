"""benchmarks/sample_rule.py: MLPerf's sample-size rule on vLLM's client results, and the
capacity search measuring a provisional point again (benchmarks/sweep.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import sample_rule
from sweep import LOAD_MODELS, SweepOptions, capacity

from probes.slo import requests_needed

TTFT = {"metric": "ttft", "percentile": 99, "limit_ms": 2000.0}
RATE = LOAD_MODELS["rate"]


def detailed(ttfts: list[float], *, failed: int = 0, out: int = 64) -> dict[str, Any]:
    """vLLM's --save-detailed lists for requests with these TTFTs (s), plus ``failed`` failed
    requests (vLLM gives them TTFT 0, no tokens and an error text)."""
    n = len(ttfts)
    return {
        "ttfts": [*ttfts, *([0.0] * failed)],
        "latencies": [t + 0.05 * (out - 1) for t in ttfts] + [0.0] * failed,
        "output_lens": [out] * n + [0] * failed,
        "itls": [[0.05] * (out - 1) for _ in ttfts] + [[] for _ in range(failed)],
        "errors": [""] * n + ["timed out"] * failed,
    }


def test_counts_samples_and_those_over_the_limit_as_the_tuner_does() -> None:
    raw = detailed([0.5] * 458 + [2.5, 3.0], failed=3)  # a failed request gives no sample
    tpot = {"metric": "tpot", "percentile": 99, "limit_ms": 40.0}
    itl = {"metric": "itl", "percentile": 99, "limit_ms": 100.0}
    counts = sample_rule.count(raw, [TTFT, tpot, itl])
    assert counts["ttft@p99"] == {"n": 460, "over": 2, "requests": 460, "needed": 838}
    # TPOT = (latency - TTFT) / (tokens - 1) = 50 ms: every one over 40 ms.
    assert counts["tpot@p99"]["over"] == 460
    # ITL: the pooled gaps, 63 a request.
    assert counts["itl@p99"]["n"] == 460 * 63 and counts["itl@p99"]["requests"] == 460
    assert counts["itl@p99"]["over"] == 0


def test_one_token_answers_give_no_time_per_token() -> None:
    raw = detailed([0.1] * 10, out=1)
    counts = sample_rule.count(raw, [{"metric": "tpot", "percentile": 50, "limit_ms": 10.0}])
    assert counts["tpot@p50"]["n"] == 0 and counts["tpot@p50"]["requests"] == 0
    assert sample_rule.prompts_for(counts, 10, 1200) is None  # nothing to size it from


def test_a_result_without_per_request_lists_gives_no_counts() -> None:
    assert sample_rule.count({"p99_ttft_ms": 900.0}, [TTFT]) == {}
    assert sample_rule.provisional({}) == []


def test_provisional_with_one_over_and_not_with_none() -> None:
    none_over = sample_rule.count(detailed([0.5] * 460), [TTFT])
    assert sample_rule.provisional(none_over) == []
    assert sample_rule.prompts_for(none_over, 460, 1200) == 0
    one_over = sample_rule.count(detailed([0.5] * 459 + [2.1]), [TTFT])
    assert sample_rule.provisional(one_over) == [
        "ttft@p99 provisional: 1 of 460 over the limit, the rule asks for 662"
    ]


def test_the_call_is_sized_for_the_share_over_seen() -> None:
    """1 over of 460: 662 would expect 1.4 over, so 838 (which expects 1.8, two allowed)."""
    counts = sample_rule.count(detailed([0.5] * 459 + [2.1]), [TTFT])
    m = sample_rule.prompts_for(counts, 460, 1200)
    assert m == 838
    assert m >= requests_needed(99, math.ceil(m / 460))  # the rule, with the count expected over
    # Where no such size exists under the cap (3 of 460 is 0.65 %), the cap is tried ...
    three = sample_rule.count(detailed([0.5] * 457 + [2.1] * 3), [TTFT])
    assert sample_rule.prompts_for(three, 460, 1200) == 1200
    # ... but not where even the count seen needs more than the cap (1001 with 3 over).
    assert sample_rule.prompts_for(three, 460, 1000) is None


def test_itl_is_sized_in_requests_from_its_gaps() -> None:
    itl = {"metric": "itl", "percentile": 99, "limit_ms": 100.0}
    raw = detailed([0.5] * 100, out=4)  # 3 gaps a request, 300 gaps
    raw["itls"][0][0] = 0.2  # one gap over
    counts = sample_rule.count(raw, [itl])
    assert counts["itl@p99"] == {"n": 300, "over": 1, "requests": 100, "needed": 662}
    # 1 of 300 over: 1,157 gaps (4 over expected, 4 allowed), 3 a request.
    assert sample_rule.prompts_for(counts, 100, 100_000) == math.ceil(1157 / 3)


class Client:
    """vLLM's client at a load: each call's TTFTs are scripted, a list of counts over the limit
    per call (one of them per load value, in order); the rest of the requests are fast."""

    def __init__(self, over: dict[float, list[int]]) -> None:
        self.over = over
        self.calls: list[tuple[float, int]] = []

    def run(self, url: str, model: str, load: dict, n: int, d: Path, name: str) -> dict:
        x = float(load["rate_rps"])
        k = self.over[x][sum(1 for c in self.calls if c[0] == x)]
        self.calls.append((x, n))
        ttfts = [0.5] * (n - k) + [2.5] * k
        p99 = sorted(ttfts)[int(0.99 * (n - 1))] * 1000
        return {
            "completed": n, "failed": 0, "p99_ttft_ms": p99, "output_throughput": 60.0 * x,
            "samples": sample_rule.count(detailed(ttfts), [TTFT]),
        }  # fmt: skip

    def verdict(self, res: dict) -> list[str]:
        return [] if res["p99_ttft_ms"] <= 2000 else [f"p99 {res['p99_ttft_ms']:.0f}"]


def search(client: Client, tmp_path: Path, rule: bool = True) -> dict:
    opts = SweepOptions(
        ladder=[4.0, 4.5, 5.0], min_prompts=460, prompts_per_load=0, bisect_steps=0,
        sample_rule=rule,
    )  # fmt: skip
    return capacity(client, "http://x", "m", RATE, opts, tmp_path)  # type: ignore[arg-type]


def test_a_provisional_point_is_measured_again_and_holds_on_enough_samples(
    tmp_path: Path,
) -> None:
    client = Client({4.0: [0], 4.5: [1, 1], 5.0: [9]})
    found = search(client, tmp_path)
    assert client.calls == [(4.0, 460), (4.5, 460), (4.5, 838), (5.0, 460)]
    assert found["capacity"] == 4.5 and found["broke"] == 5.0
    assert found["score_tokens_per_s"] == pytest.approx(60.0 * 4.5)
    point = found["points"][1]
    assert point["prompts"] == 838 and [c["completed"] for c in point["calls"]] == [460, 838]


def test_a_point_that_stays_provisional_has_not_held(tmp_path: Path) -> None:
    """vLLM's p99 held on both calls (4 of 460, 6 of 1,200 over: p99 under the limit), but
    1,200 with 6 over is short of the 1,453 the rule asks for."""
    client = Client({4.0: [0], 4.5: [4, 6]})
    found = search(client, tmp_path)
    assert client.calls == [(4.0, 460), (4.5, 460), (4.5, 1200)]
    assert found["capacity"] == 4.0 and found["broke"] == 4.5
    assert "provisional: 6 of 1200" in found["points"][1]["broken"][0]
    # Beside it, what vLLM's percentiles alone would have kept: 4.5, on its first call.
    assert found["percentile_only"] == 4.5
    assert found["percentile_only_tokens_per_s"] == pytest.approx(60.0 * 4.5)


def test_without_the_rule_the_percentile_alone_decides(tmp_path: Path) -> None:
    client = Client({4.0: [0], 4.5: [4], 5.0: [4]})
    found = search(client, tmp_path, rule=False)
    assert client.calls == [(4.0, 460), (4.5, 460), (5.0, 460)]  # none measured again
    assert found["capacity"] == 5.0 and found["broke"] is None
