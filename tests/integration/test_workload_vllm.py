"""Prefix groups on a real vLLM with the embedded default (issue 32): the sharing the workload
describes is the sharing the engine's prefix cache finds.

One vLLM started from the tuner's own launch builder (the CI space, eager mode; prefix caching
is on by default, also on the CPU), two points of 16 requests one at a time: prompts of 300
tokens each behind a distinct salt (nothing to reuse), then 300-token prompts in two groups
whose first 256 tokens are a shared system prompt. vLLM counts the prompt tokens it looked up
in its prefix cache (``vllm:prefix_cache_queries``) and those it found
(``vllm:prefix_cache_hits``); the share found must be the workload's described prefix share
(probes.describe). 256 tokens are whole blocks of the cache, so every shared token can be
found. The engine is stopped by its process group and nothing of its session is left.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from probes.client import LoadClient, run_load
from probes.describe import describe
from probes.server_metrics import delta, fetch_snapshot
from probes.workload import parse_workload, prepare_requests
from tuner.engines.base import ServerProcess, free_port
from tuner.engines.hardware import detect_hardware, template_context
from tuner.engines.lifetime import leftovers
from tuner.engines.models import resolve_model
from tuner.engines.vllm import VLLMEngine
from tuner.spaces.launch import launch_settings
from tuner.spaces.space import load_space

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CI_SPACE = ROOT / "tests" / "data" / "vllm-cpu-ci.yaml"
QUERIES = "vllm:prefix_cache_queries_total"  # prompt tokens looked up in the prefix cache
HITS = "vllm:prefix_cache_hits_total"  # ... and found there


@pytest.mark.timeout(300)
def test_prefix_groups_are_found_by_vllms_prefix_cache_as_described(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    engine = VLLMEngine()
    model = resolve_model("smollm2-135m").path
    tok = AutoTokenizer.from_pretrained(model)
    args, env = launch_settings(load_space(CI_SPACE), {}, template_context(detect_hardware()))
    run_id = f"prefix-{secrets.token_hex(3)}"
    srv = ServerProcess(
        engine.launch_spec(model, args, env, free_port()),
        tmp_path / "server.log",
        startup_timeout_s=240,
        classify=engine.classify_failure,
        run_id=run_id,
    )
    found: dict[str, tuple[float, float]] = {}  # spec -> (hit rate, described prefix share)
    with srv:
        srv.wait_ready(served_model=model)
        for seed, spec in enumerate(
            [
                "synthetic:input=300,output=2",
                "synthetic:input=300,output=2,prefix_groups=2,prefix_len=256",
            ]
        ):
            wl = parse_workload(spec)
            reqs = prepare_requests(wl, 16, model=model, tokenizer=tok, seed=seed)
            before = fetch_snapshot(srv.base_url)
            res = run_load(LoadClient(srv.base_url, timeout_s=120), reqs, concurrency=1)
            d = delta(before, fetch_snapshot(srv.base_url))
            assert all(r.ok and r.n_prompt == 300 for r in res.records), res.records[0]
            assert d[QUERIES] >= 16 * 300 * 0.99  # every prompt token was looked up
            found[spec] = (d[HITS] / d[QUERIES], describe(wl, reqs)["sent"]["prefix_share"])
    (alone_hits, alone_share), (grouped_hits, grouped_share) = found.values()
    assert alone_share == 0.0 and alone_hits < 0.01
    # 14 or 15 of 16 requests start with their group's 256 tokens: 0.75-0.8 of the tokens.
    assert 0.7 < grouped_share < 0.85
    assert grouped_hits == pytest.approx(grouped_share, abs=0.03)
    deadline = time.monotonic() + 30
    while leftovers(run_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not leftovers(run_id), "processes of the engine's session were left"
