"""Engine faults on a real vLLM with the embedded default, as the tuner's engine layer meets them.

Two faults at start-up, each on a real vLLM started from the tuner's own launch builder (the CI
space, eager mode): it exits at start-up (a value vLLM refuses), and it does not become ready
within the start-up timeout (a hang, as the tuner sees one); the third, dying mid-measurement,
ends the shared server of test_one_server_vllm.py. Each must end as the engine error the trial
records, and leave no process of the engine's session behind (found by the run marker in the
environment, which vLLM's renamed engine-core children inherit; never by name). The same faults
at the level of a whole tuning run are in tests/unit/test_faults.py, on the fake engine.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from tuner.engines.base import EngineDied, EngineStartError, ServerProcess, free_port
from tuner.engines.hardware import detect_hardware, template_context
from tuner.engines.lifetime import leftovers
from tuner.engines.models import resolve_model
from tuner.engines.vllm import VLLMEngine
from tuner.spaces.launch import launch_settings
from tuner.spaces.space import load_space

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CI_SPACE = ROOT / "tests" / "data" / "vllm-cpu-ci.yaml"


def _server(tmp: Path, extra: list[str], timeout_s: float) -> tuple[ServerProcess, str]:
    engine = VLLMEngine()
    model = resolve_model("smollm2-135m").path
    args, env = launch_settings(load_space(CI_SPACE), {}, template_context(detect_hardware()))
    spec = engine.launch_spec(model, [*args, *extra], env, free_port())
    run_id = f"fault-{secrets.token_hex(3)}"
    srv = ServerProcess(
        spec,
        tmp / "server.log",
        startup_timeout_s=timeout_s,
        classify=engine.classify_failure,
        run_id=run_id,
    )
    return srv, run_id


def _gone(run_id: str, within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while leftovers(run_id) and time.monotonic() < deadline:
        time.sleep(0.5)
    return not leftovers(run_id)


@pytest.mark.timeout(300)
def test_real_vllm_exiting_at_start_up_is_a_start_error_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    # Longer than the model's 8,192 positions: vLLM refuses it while it starts.
    srv, run_id = _server(tmp_path, ["--max-model-len", "10000000"], timeout_s=240)
    with pytest.raises(EngineStartError) as err, srv:
        srv.wait_ready()
    assert not isinstance(err.value, EngineDied) and "exit code" in str(err.value)
    assert "max_model_len" in (tmp_path / "server.log").read_text()  # vLLM's own reason
    assert _gone(run_id), "processes of the engine's session were left"


@pytest.mark.timeout(300)
def test_real_vllm_not_ready_within_the_start_up_timeout_is_stopped(tmp_path: Path) -> None:
    srv, run_id = _server(tmp_path, [], timeout_s=6)  # vLLM takes far longer to start here
    with pytest.raises(EngineStartError, match="start-up timeout") as err, srv:
        srv.wait_ready()
    assert not isinstance(err.value, EngineDied)
    assert _gone(run_id), "processes of the engine's session were left"
