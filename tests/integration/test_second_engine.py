"""The second engine and the endpoint mode on the embedded default, on real servers.

- ``transformers serve``: a short tuning whose batching stage measures continuous against
  static batching (the contrast figure).
- ``--engine endpoint``: nothing launched; against a transformers server started here by hand,
  which has not served a request before autotune attaches (vLLM's case:
  test_one_server_vllm.py).
Kept small for CI; it asserts no times.
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from probes.slo import parse_slos
from probes.workload import parse_workload
from tests.endpoint import tune_attached
from tuner import api
from tuner.engines import get_engine
from tuner.engines.base import ServerProcess, free_port
from tuner.engines.models import resolve_model
from tuner.options import TuneOptions

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SMALL = dict(
    load_model="concurrency",
    confirm_baseline=False,  # a static transformers baseline serves ~0.3 requests/s
    start_concurrency=2,
    max_concurrency=8,
    search_min_requests=8,
    search_requests_per_slot=2,
    confirm_requests=16,
    startup_timeout_s=400,
)


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.mark.timeout(900)
def test_transformers_continuous_over_static(tmp_path: Path) -> None:
    before = _children()
    report, folder = api.tune(
        TuneOptions(
            model="smollm2-135m",
            engine="transformers",
            slos=parse_slos(["ttft=10s"]),
            workload=parse_workload("synthetic:input=32,output=16"),
            trials=1,
            output_dir=tmp_path,
            stages=["batching"],
            probe=False,
            **SMALL,
        )
    )
    data = json.loads((folder / "report.json").read_text())
    assert data["status"] == "complete" == report.status, data.get("error")
    assert data["engine"] == "transformers"
    base = data["baseline"]
    assert base["status"] == "ok", base
    assert "--no-continuous-batching" not in base["launch_command"]
    (trial,) = data["trials"]
    assert trial["params"]["continuous_batching"] is True
    assert "--continuous-batching" in trial["launch_command"]
    stage = data["stages"][0]
    c = stage["contrast"]
    assert c is not None and c["knob"] == "continuous_batching"
    assert trial["status"] == "ok", trial
    assert c["factor"] == pytest.approx(c["on_score"] / c["off_score"])
    assert c["off_trial"] == 0 and c["on_trial"] == trial["number"]
    for t in (base, trial):
        for p in t["points"]:
            assert p["metrics"]["n_out_source"] == "usage"  # no ignore_eos: real lengths
    assert "continuous-over-static" in (folder / "report.md").read_text()
    assert _children() <= before


@pytest.mark.timeout(900)
def test_endpoint_against_a_transformers_server_started_by_hand(tmp_path: Path) -> None:
    """(vLLM's endpoint case shares a server with other checks: test_one_server_vllm.py.)"""
    model = resolve_model("smollm2-135m").path
    engine = get_engine("transformers")
    # continuous batching, whose first request is slow (warm-up)
    spec = engine.launch_spec(model, ["--device", "cpu", "--continuous-batching"], {}, free_port())
    with ServerProcess(spec, tmp_path / "server.log", startup_timeout_s=400) as srv:
        _wait_health(srv)  # up, but no request served yet: autotune's attach is the first
        # transformers serve does not list the model it serves: it has to be named.
        tune_attached(srv.base_url, tmp_path, SMALL, served_model=model)


def _wait_health(srv: ServerProcess, timeout_s: float = 400) -> None:
    import time

    from probes.http import request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert srv.proc is not None and srv.proc.poll() is None, "the server died"
        try:
            status, _ = request("GET", srv.base_url + "/health", timeout_s=5)
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail("the server never answered /health")
