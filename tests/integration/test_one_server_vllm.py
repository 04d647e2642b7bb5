"""Checks on one vLLM server with the embedded default, started once for them all (module
scope: a start costs CI 50-90 s): the CI space's baseline (eager, a 1 GiB KV cache, prefix
caching on as by default) from the tuner's own launch builder, stopped by its process group
after the last test, nothing of its session left.

1. **The exactness check, where the answer is known in advance** (first, on the fresh server).
   The check compares a configuration's greedy outputs with a reference configuration's, token
   by token (tuner/run/gates.py ``ExactnessGate``, over probes/exactness.py). The reference is
   this server; the two configurations checked against it, each started for the check, are
   chosen for their known answer:
   - the same model and numerics with a front-end knob changed (``--stream-interval 8``: how
     often tokens are streamed, not what is computed): the outputs must be identical;
   - float32 compute instead of bf16: other numerics, which change a greedy token within the
     eight 32-token continuations (bf16 rounds every activation to 8 bits of mantissa), so the
     check must report a divergence with its position.
   An exactness check that always says "identical" fails the second; one that always says
   "diverged" fails the first.
2. **Prefix groups (issue 32)**: the sharing a workload describes is the sharing the engine's
   prefix cache finds. Two points of 16 requests one at a time: prompts of 300 tokens each
   behind a distinct salt (nothing to reuse), then 300-token prompts in two groups whose first
   256 tokens are a shared system prompt. vLLM counts the prompt tokens it looked up in its
   prefix cache (``vllm:prefix_cache_queries``) and those it found (``vllm:prefix_cache_hits``);
   the share found must be the workload's described prefix share (probes.describe). 256 tokens
   are whole blocks of the cache, so every shared token can be found.
3. **``--engine endpoint``**: nothing launched; a short tuning attached to this server.
4. **It dies mid-measurement** (last: its API server SIGKILLed while a load point runs): the
   point sees it go, the engine error is the one a trial records, and no process of the
   engine's session is left (found by the run marker in the environment, which vLLM's renamed
   engine-core children inherit; never by name). The other engine faults are in
   test_faults_vllm.py.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from probes.client import LoadClient, run_load
from probes.describe import describe
from probes.exactness import EXACT_TOKENS
from probes.quality import greedy_continuations
from probes.server_metrics import delta, fetch_snapshot
from probes.workload import parse_workload, prepare_requests
from tests.endpoint import tune_attached
from tuner.engines.base import EngineDied, ServerProcess, free_port, raise_if_died
from tuner.engines.hardware import detect_hardware, template_context
from tuner.engines.lifetime import leftovers
from tuner.engines.models import resolve_model
from tuner.engines.vllm import VLLMEngine
from tuner.run.gates import ExactnessGate, rejection
from tuner.spaces.launch import launch_settings
from tuner.spaces.space import load_space

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CI_SPACE = ROOT / "tests" / "data" / "vllm-cpu-ci.yaml"
QUERIES = "vllm:prefix_cache_queries_total"  # prompt tokens looked up in the prefix cache
HITS = "vllm:prefix_cache_hits_total"  # ... and found there
SMALL = dict(
    load_model="concurrency",
    start_concurrency=2,
    max_concurrency=8,
    search_min_requests=8,
    search_requests_per_slot=2,
    confirm_requests=16,
)


def _server(log: Path, extra: list[str], run_id: str | None = None) -> ServerProcess:
    engine = VLLMEngine()
    model = resolve_model("smollm2-135m").path
    args, env = launch_settings(load_space(CI_SPACE), {}, template_context(detect_hardware()))
    return ServerProcess(
        engine.launch_spec(model, [*args, *extra], env, free_port()),
        log,
        startup_timeout_s=300,
        classify=engine.classify_failure,
        run_id=run_id,
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    run_id = f"one-server-{secrets.token_hex(3)}"
    srv = _server(tmp_path_factory.mktemp("server") / "server.log", [], run_id)
    with srv:
        srv.wait_ready(served_model=resolve_model("smollm2-135m").path)
        yield srv
    deadline = time.monotonic() + 30
    while leftovers(run_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not leftovers(run_id), "processes of the engine's session were left"


# The greedy outputs with more time than a tuning run gives them (GREEDY_BUDGET_S): float32 on
# a slow box took over 60 s for the eight continuations, and what is checked here is the
# check's verdict, not its budget.
OUTPUTS_BUDGET_S = 300.0


def _greedy(gate: ExactnessGate, base_url: str) -> list:
    model = resolve_model("smollm2-135m").path
    return greedy_continuations(
        base_url, model, gate.prompts, EXACT_TOKENS, budget_s=OUTPUTS_BUDGET_S
    )


def _outputs(gate: ExactnessGate, tmp: Path, name: str, extra: list[str]) -> list:
    with _server(tmp / f"{name}.log", extra) as srv:
        srv.wait_ready(served_model=resolve_model("smollm2-135m").path)
        return _greedy(gate, srv.base_url)


@pytest.mark.timeout(900)
def test_the_exactness_check_says_identical_and_diverged_where_each_is_known(
    server: ServerProcess, tmp_path: Path
) -> None:
    gate = ExactnessGate()
    gate.keep(0, _greedy(gate, server.base_url))
    gate.reference = 0

    same = gate.compare(_outputs(gate, tmp_path, "stream-interval", ["--stream-interval", "8"]))
    assert same.checked is True and same.reference_trial == 0
    assert same.identical is True, same.first_divergence
    assert same.prompts == 8 and same.tokens_compared >= 8 * 16
    assert same.divergent_prompts == 0 and same.first_divergence is None
    assert rejection(same, accept_divergence=False) is None

    other = gate.compare(_outputs(gate, tmp_path, "float32", ["--dtype", "float32"]))
    assert other.checked is True and other.identical is False
    assert other.divergent_prompts >= 1
    d = other.first_divergence
    assert d is not None and d.position >= 0 and d.expected != d.got
    assert 0 <= d.prompt_index < 8
    assert d.reference_margin is not None and d.reference_margin >= 0
    why = rejection(other, accept_divergence=False)
    assert why is not None and "changed the greedy outputs" in why
    assert rejection(other, accept_divergence=True) is None


@pytest.mark.timeout(300)
def test_prefix_groups_are_found_by_vllms_prefix_cache_as_described(server: ServerProcess) -> None:
    from transformers import AutoTokenizer

    model = resolve_model("smollm2-135m").path
    tok = AutoTokenizer.from_pretrained(model)
    found: dict[str, tuple[float, float]] = {}  # spec -> (hit rate, described prefix share)
    for seed, spec in enumerate(
        [
            "synthetic:input=300,output=2",
            "synthetic:input=300,output=2,prefix_groups=2,prefix_len=256",
        ]
    ):
        wl = parse_workload(spec)
        reqs = prepare_requests(wl, 16, model=model, tokenizer=tok, seed=seed)
        before = fetch_snapshot(server.base_url)
        res = run_load(LoadClient(server.base_url, timeout_s=120), reqs, concurrency=1)
        d = delta(before, fetch_snapshot(server.base_url))
        assert all(r.ok and r.n_prompt == 300 for r in res.records), res.records[0]
        assert d[QUERIES] >= 16 * 300 * 0.99  # every prompt token was looked up
        found[spec] = (d[HITS] / d[QUERIES], describe(wl, reqs)["sent"]["prefix_share"])
    (alone_hits, alone_share), (grouped_hits, grouped_share) = found.values()
    assert alone_share == 0.0 and alone_hits < 0.01
    # 14 or 15 of 16 requests start with their group's 256 tokens: 0.75-0.8 of the tokens.
    assert 0.7 < grouped_share < 0.85
    assert grouped_hits == pytest.approx(grouped_share, abs=0.03)


@pytest.mark.timeout(600)
def test_endpoint_attached_to_a_server_started_by_hand(
    server: ServerProcess, tmp_path: Path
) -> None:
    tune_attached(server.base_url, tmp_path, SMALL)


@pytest.mark.timeout(300)
def test_vllm_dying_mid_measurement_is_seen_and_leaves_nothing(server: ServerProcess) -> None:
    """The server's last test: it ends it (the fixture then checks nothing is left)."""
    from transformers import AutoTokenizer

    model = resolve_model("smollm2-135m").path
    tok = AutoTokenizer.from_pretrained(model)
    reqs = prepare_requests(
        parse_workload("synthetic:input=64,output=64"), 60, model=model, tokenizer=tok, seed=1
    )
    assert server.died() is None
    assert server.proc is not None
    (vllm,) = psutil.Process(server.proc.pid).children()  # the supervisor's one child
    killer = threading.Timer(3.0, vllm.kill)  # SIGKILL of vLLM's API server, mid-point
    killer.start()
    try:
        res = run_load(LoadClient(server.base_url, timeout_s=60), reqs, concurrency=4)
    finally:
        killer.cancel()
    assert any(not r.ok for r in res.records)  # the point saw the engine go
    with pytest.raises(EngineDied):
        raise_if_died(server, "while measured", failures=True)
