"""One short tuning attached to a server started by hand (``--engine endpoint``), and what its
report must say: shared by the real-engine tests of vLLM (test_one_server_vllm.py) and
transformers (test_second_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from probes.slo import parse_slos
from probes.workload import parse_workload
from tuner import api
from tuner.engines.models import resolve_model
from tuner.options import TuneOptions


def tune_attached(base_url: str, tmp_path: Path, small: dict[str, Any], **kw: Any) -> None:
    """Tune the endpoint at ``base_url`` (nothing launched) and check its report."""
    model = resolve_model("smollm2-135m").path
    report, folder = api.tune(
        TuneOptions(
            model="",
            engine="endpoint",
            endpoint=base_url,
            slos=parse_slos(["ttft=10s"]),
            workload=parse_workload("synthetic:input=32,output=16"),
            trials=2,
            tokenizer=model,
            output_dir=tmp_path,
            probe=False,
            **small,
            **kw,
        )
    )
    data = json.loads((folder / "report.json").read_text())
    assert data["status"] == "complete" == report.status, data.get("error")
    assert data["endpoint"] == base_url and data["engine"] == "endpoint"
    assert data["trials"] == [] and data["timing"]["engine_starts"] == 0
    assert 1 <= len(data["baseline"]["points"]) <= 2
    rec = data["recommended"]
    assert rec is not None and rec["launch_command"] is None
    assert all("not tuned" in s["reason"] for s in data["stages"])
    assert rec["metrics"]["n_out_source"] == "usage"
    # at most what was asked (an attached engine is not known to take ignore_eos)
    assert 0 < rec["metrics"]["mean_output_tokens"] <= 16
