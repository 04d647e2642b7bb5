"""Two workers on one study through a real PostgreSQL server, on real vLLM with the embedded
default and the small CI space; the first worker to measure a stage trial is SIGKILLed in it.
The other must take the dead worker's trial over once its heartbeat stops, finish the stage and
the confirmation, and ``autotune report --storage ... --study NAME`` must rebuild the report
(tests/unit/test_shared.py has the checks; this is the same on the real engine). It asserts no
times.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_shared import two_workers_one_killed

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
WORKER = f"""
import sys
from pathlib import Path
from probes.slo import parse_slos
from probes.workload import parse_workload
from tuner import api
from tuner.run import stop
from tuner.options import TuneOptions
from tuner.run.runner import Runner

tmp, url, study = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
stop.install()
opts = TuneOptions(
    model="smollm2-135m", slos=parse_slos(["ttft=20s"]),
    workload=parse_workload("synthetic:input=64,output=16"), trials=2,
    output_dir=tmp / "results", space_file=Path({str(ROOT / "tests/data/vllm-cpu-ci.yaml")!r}),
    stages=["batching"], probe=False, load_model="concurrency", start_concurrency=4,
    max_concurrency=8, search_min_requests=12, search_requests_per_slot=2, confirm_requests=24,
    startup_timeout_s=400, storage=url, study=study, shared_heartbeat_s=2, shared_grace_s=8,
    command=["autotune", "--storage", url],
)
runner = Runner(opts, lambda m: print(m, flush=True))
print("RUN", runner.run_id, flush=True)
sys.exit(0 if runner.run().status == "complete" else 1)
"""


@pytest.mark.timeout(1200)
def test_two_vllm_workers_on_postgresql_one_killed_mid_trial(
    tmp_path: Path, postgres_url: str
) -> None:
    two_workers_one_killed(tmp_path, postgres_url, WORKER, n_trials=2, wait_s=300)
