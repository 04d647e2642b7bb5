"""benchmarks/sample_rule.py: MLPerf's sample-size rule on vLLM's client results, and the
capacity search measuring a provisional point again (benchmarks/sweep.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import sample_rule
from bench_client import LOAD_MODELS
from sweep import SweepOptions, capacity

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
    # TPOT = (latency - TTFT) / (tokens - 1) = 50 ms: every one over 40 ms, none over 60.
    assert counts["tpot@p99"]["over"] == 460
    tpot60 = sample_rule.count(raw, [{**tpot, "limit_ms": 60.0}])
    assert tpot60["tpot@p99"]["over"] == 0 and tpot60["tpot@p99"]["n"] == 460
    # ITL: the pooled gaps, 63 a request.
    assert counts["itl@p99"]["n"] == 460 * 63 and counts["itl@p99"]["requests"] == 460
    assert counts["itl@p99"]["over"] == 0


def test_one_token_answers_give_no_time_per_token() -> None:
    raw = detailed([0.1] * 10, out=1)
    counts = sample_rule.count(raw, [{"metric": "tpot", "percentile": 50, "limit_ms": 10.0}])
    assert counts["tpot@p50"]["n"] == 0 and counts["tpot@p50"]["requests"] == 0
    assert sample_rule.prompts_for(counts, 10, 10, 1200) is None  # nothing to size it from


def test_a_result_without_per_request_lists_gives_no_counts() -> None:
    assert sample_rule.count({"p99_ttft_ms": 900.0}, [TTFT]) == {}
    assert sample_rule.provisional({}) == []


def test_provisional_with_one_over_and_not_with_none() -> None:
    none_over = sample_rule.count(detailed([0.5] * 460), [TTFT])
    assert sample_rule.provisional(none_over) == []
    assert sample_rule.prompts_for(none_over, 460, 460, 1200) == 0
    one_over = sample_rule.count(detailed([0.5] * 459 + [2.1]), [TTFT])
    assert sample_rule.provisional(one_over) == [
        "ttft@p99 provisional: 1 of 460 over the limit, the rule asks for 662"
    ]


def test_the_call_is_sized_for_the_share_over_seen() -> None:
    """1 over of 460: 838 in all (1.8 over expected, two allowed), so 378 more; a call is
    never shorter than the point (a short one starts from an empty server)."""
    counts = sample_rule.count(detailed([0.5] * 459 + [2.1]), [TTFT])
    assert sample_rule.prompts_for(counts, 460, 0, 1200) == 838 - 460
    assert sample_rule.prompts_for(counts, 460, 460, 1200) == 460
    # Where no such size exists under the cap (3 of 460 is 0.65 %), the cap is tried ...
    three = sample_rule.count(detailed([0.5] * 457 + [2.1] * 3), [TTFT])
    assert sample_rule.prompts_for(three, 460, 460, 1200) == 1200
    # ... but not where even the count seen needs more than the cap (1001 with 3 over).
    assert sample_rule.prompts_for(three, 460, 460, 500) is None


def test_failed_requests_make_the_call_longer() -> None:
    """Half the prompts failed: the samples a prompt gives are half, so twice the prompts."""
    counts = sample_rule.count(detailed([0.5] * 459 + [2.1], failed=460), [TTFT])
    assert counts["ttft@p99"]["n"] == 460
    assert sample_rule.prompts_for(counts, 920, 0, 5000) == 2 * (838 - 460)


def test_pooled_calls_keep_the_requests_over_the_limit() -> None:
    first = sample_rule.count(detailed([0.5] * 458 + [2.1] * 2), [TTFT])
    again = sample_rule.count(detailed([0.5] * 837 + [2.1]), [TTFT])
    both = sample_rule.pool([first, again])
    assert both["ttft@p99"] == {"n": 1298, "over": 3, "requests": 1298, "needed": 1001}
    assert sample_rule.provisional(both) == []
    assert sample_rule.provisional(sample_rule.pool([first])) != []


def test_itl_is_sized_in_prompts_from_its_gaps() -> None:
    itl = {"metric": "itl", "percentile": 99, "limit_ms": 100.0}
    raw = detailed([0.5] * 100, out=4)  # 3 gaps a request, 300 gaps
    raw["itls"][0][0] = 0.2  # one gap over
    counts = sample_rule.count(raw, [itl])
    assert counts["itl@p99"] == {"n": 300, "over": 1, "requests": 100, "needed": 662}
    # 1 of 300 over: 1,157 gaps in all (4 over expected, 4 allowed), 3 a prompt.
    assert sample_rule.prompts_for(counts, 100, 0, 100_000) == math.ceil((1157 - 300) / 3)


class Client:
    """vLLM's client at a rate: each call's TTFTs are scripted as counts over the limit, a list
    per rate (one count per call, in order); the rest of the requests are fast. A call's
    throughput is its rate x 60 plus its size in thousandths, so which call scored shows."""

    def __init__(self, over: dict[float, list[int]]) -> None:
        self.over = over
        self.calls: list[tuple[float, int]] = []

    def run(self, url: str, model: str, load: dict, n: int, d: Path, name: str) -> dict:
        x = float(load["rate_rps"])
        k = self.over[x][sum(1 for c in self.calls if c[0] == x)]
        self.calls.append((x, n))
        ttfts = [0.5] * (n - k) + [2.5] * k
        p99 = float(np.percentile(ttfts, 99)) * 1000  # as vLLM takes it
        return {
            "completed": n, "failed": 0, "p99_ttft_ms": p99,
            "output_throughput": 60.0 * x + n / 1000,
            "samples": sample_rule.count(detailed(ttfts), [TTFT]),
        }  # fmt: skip

    def verdict(self, res: dict) -> list[str]:
        return [] if res["p99_ttft_ms"] <= 2000 else [f"p99 {res['p99_ttft_ms']:.0f}"]


def search(
    client: Client, tmp_path: Path, rule: bool = True, max_calls: int = 3, max_prompts: int = 1200
) -> dict:
    opts = SweepOptions(
        ladder=[4.0, 4.5, 5.0], min_prompts=460, prompts_per_load=0, bisect_steps=0,
        sample_rule=rule, max_calls=max_calls, max_prompts=max_prompts,
    )  # fmt: skip
    return capacity(client, "http://x", "m", RATE, opts, tmp_path)  # type: ignore[arg-type]


def test_a_provisional_point_is_measured_again_and_holds_on_all_its_samples(
    tmp_path: Path,
) -> None:
    """4.5: one over of 460, then one of 460 more: 2 of 920 meets the rule (838 needed)."""
    client = Client({4.0: [0], 4.5: [1, 1], 5.0: [9]})
    found = search(client, tmp_path)
    assert client.calls == [(4.0, 460), (4.5, 460), (4.5, 460), (5.0, 460)]
    assert found["capacity"] == 4.5 and found["broke"] == 5.0
    point = found["points"][1]
    assert point["phase"] == "ladder" and point["held"]
    assert [c["completed"] for c in point["calls"]] == [460, 460]
    assert found["score_tokens_per_s"] == pytest.approx(60.0 * 4.5 + 0.46)  # the last call


def test_the_calls_pool_their_samples_over_the_limit(tmp_path: Path) -> None:
    """4.5: 3 over of 460 (the cap, 1,200, is called for), then 8 of 1,200: 11 of 1,660
    needs 2,144, so a third call; with at most two calls it has not held."""
    client = Client({4.0: [0], 4.5: [3, 8, 0], 5.0: [9]})
    found = search(client, tmp_path, max_calls=2)
    assert client.calls == [(4.0, 460), (4.5, 460), (4.5, 1200)]
    assert found["capacity"] == 4.0 and found["broke"] == 4.5
    broken = found["points"][1]["broken"]
    assert "11 of 1660 over the limit, the rule asks for 2144" in broken[0]
    assert broken[-1] == "not measured again: 2 calls made"
    # Each call alone: 8 of 1,200 would have needed 1,736; the pool is what decides.
    assert found["percentile_only"] == 4.5  # vLLM's percentile held on its first call


def test_a_point_the_cap_cannot_settle_is_not_measured_again_and_has_not_held(
    tmp_path: Path,
) -> None:
    """4.5: 4 of 460 over (p99 under the limit): the rule asks for 1,157, 697 more than these,
    beyond a cap of 600, so no second call, and 4.5 has not held."""
    client = Client({4.0: [0], 4.5: [4]})
    found = search(client, tmp_path, max_prompts=600)
    assert client.calls == [(4.0, 460), (4.5, 460)]
    assert found["capacity"] == 4.0 and found["broke"] == 4.5
    assert found["points"][1]["broken"] == [
        "ttft@p99 provisional: 4 of 460 over the limit, the rule asks for 1157",
        "not measured again: the rule needs more than 600 prompts more",
    ]
    assert found["percentile_only"] == 4.5
    assert found["percentile_only_tokens_per_s"] == pytest.approx(60.0 * 4.5 + 0.46)


def test_a_call_measured_again_that_breaks_the_percentile_breaks_the_point(
    tmp_path: Path,
) -> None:
    # 2 of 460 over: 1,596 in all at that share, 1,136 more; 20 of them over: p99 over 2 s.
    client = Client({4.0: [0], 4.5: [2, 20]})
    found = search(client, tmp_path)
    assert client.calls == [(4.0, 460), (4.5, 460), (4.5, 1596 - 460)]
    assert found["capacity"] == 4.0
    assert found["points"][1]["broken"] == ["p99 2500"]


def test_without_the_rule_the_percentile_alone_decides(tmp_path: Path) -> None:
    client = Client({4.0: [0], 4.5: [4], 5.0: [4]})
    found = search(client, tmp_path, rule=False)
    assert client.calls == [(4.0, 460), (4.5, 460), (5.0, 460)]  # none measured again
    assert found["capacity"] == 5.0 and found["broke"] is None
