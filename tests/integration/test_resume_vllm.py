"""SIGKILL of the tuner mid-run on a real vLLM with the embedded default, then ``--resume``.

The tuner is killed while trial 1's engine runs, after the baseline's checkpoint was written.
No process of its engine may outlive it (the engine's supervisor ends the whole group, vLLM's
engine core included), and the resumed run must keep the baseline as measured (no second start
of it), measure trial 1 once from the start, and end with a complete report. It asserts no
times (the wait for the engine to go is bounded, not measured). The serving model is off: its
guide may rightly decide that no trial 1 is worth an engine start, and this test needs one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tuner.engines.lifetime import leftovers

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CI_SPACE = ROOT / "tests" / "data" / "vllm-cpu-ci.yaml"
SCRIPT = """
import sys
from pathlib import Path
from probes.slo import parse_slos
from probes.workload import parse_workload
from tuner import api
from tuner.run import stop
from tuner.options import TuneOptions

stop.install()
api.tune(TuneOptions(
    model="smollm2-135m", slos=parse_slos(["ttft=20s"]),
    workload=parse_workload("synthetic:input=64,output=16"), trials=1,
    output_dir=Path(sys.argv[1]), space_file=Path(sys.argv[2]), stages=["batching"],
    probe=False, side_by_side=False, load_model="concurrency", start_concurrency=4,
    max_concurrency=8,
    search_min_requests=12, search_requests_per_slot=2, confirm_requests=24,
    startup_timeout_s=400, serving_model=False,
), progress=lambda m: print(m, flush=True))
"""


@pytest.mark.timeout(900)
def test_sigkill_mid_trial_then_resume_keeps_every_finished_trial_once(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path), str(CI_SPACE)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "trial 1 (batching): ready" in line:
                break
        else:
            pytest.fail("trial 1 never started:\n" + "".join(lines[-20:]))
        time.sleep(2)  # inside trial 1's first point
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (folder,) = [p for p in tmp_path.iterdir() if (p / "run.json").is_file()]
    run_id = folder.name
    before = json.loads((folder / "checkpoints" / "000.json").read_text())["trial"]
    assert not (folder / "checkpoints" / "001.json").exists()
    # Its engine died with it, vLLM's engine core and workers too (its supervisor ends the
    # whole group when the tuner dies).
    deadline = time.monotonic() + 30
    while leftovers(run_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not leftovers(run_id), "engine processes outlived the SIGKILLed tuner"

    res = subprocess.run(
        [sys.executable, "-m", "tuner.cli.main", "--resume", str(folder)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=800,
    )
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert not leftovers(run_id), "engine processes of the run left running"
    data = json.loads((folder / "report.json").read_text())
    assert data["status"] == "complete"
    assert data["run_id"] == run_id
    # The baseline is the one measured before the kill, not measured again (a side-by-side
    # repeat with trial 1 may have added points to it since).
    base = data["baseline"]
    assert [p for p in base["points"] if not p["side_by_side"]] == before["points"]
    assert (base["startup_s"], base["launch_command"]) == (
        before["startup_s"],
        before["launch_command"],
    )
    assert "trial 0: ok, as measured before the resume" in out
    assert out.count("baseline: starting") == 0
    # Trial 1 measured once, from the start, after the resume.
    assert [t["number"] for t in data["trials"]] == [1]
    assert data["trials"][0]["status"] in ("ok", "infeasible", "abandoned")
    assert out.count("trial 1 (batching): starting") == 1
    assert data["recommended"] is not None
    assert (folder / "trials" / "001.stale-1").is_dir()  # the killed attempt, kept aside
