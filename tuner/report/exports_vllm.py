"""vLLM's deployment files: its ``--config`` file and a Kubernetes Deployment and Service.

- ``recommended.vllm.yaml``: vLLM's ``--config`` file. Each engine argument is a key without
  its dashes: a flag alone is ``true``, its ``--no-`` form ``false`` (vLLM turns it back into
  that flag), a JSON argument a mapping, the model folder ``model``.
- ``k8s.yaml``: a Deployment and a Service for the same server: vLLM's image of the run's
  version, the same arguments and environment, the model folder mounted from the node, the
  run's GPUs (``nvidia.com/gpu``) or its cores and memory as requests equal to limits (so that
  a CPU binding to those cores holds under Kubernetes' static CPU manager).
- ``serve.sh``'s start line: vLLM's server reading that config file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tuner.report.export_common import PORT, comment, header
from tuner.report.schema import Report, TrialReport

CONFIG_FILE = "recommended.vllm.yaml"
K8S_FILE = "k8s.yaml"
VLLM_MODULE = "vllm.entrypoints.openai.api_server"
# vLLM's published images of a version (its docs' "Using Docker"); the CPU build has its own.
CUDA_IMAGE = "vllm/vllm-openai:v{version}"
CPU_IMAGE = "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v{version}"


def vllm_config(args: list[str], model: str) -> dict[str, Any]:
    """vLLM engine arguments as its ``--config`` mapping (``model`` first; a later ``--model``
    in ``args``, a pre-quantised checkpoint, replaces it)."""
    out: dict[str, Any] = {"model": model}
    i = 0
    while i < len(args):
        flag = args[i]
        if not flag.startswith("--"):
            raise ValueError(f"engine argument {flag!r} follows no flag")
        values = []
        i += 1
        while i < len(args) and not args[i].startswith("--"):
            values.append(args[i])
            i += 1
        key = flag[2:]
        if not values:
            if key.startswith("no-"):
                out[key[3:]] = False
            else:
                out[key] = True
        elif len(values) == 1:
            out[key] = _value(values[0])
        else:
            out[key] = [_value(v) for v in values]
    return out


def _value(text: str) -> Any:
    """A flag's value as YAML keeps it: a JSON object as a mapping, a number as a number."""
    if text.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if re.fullmatch(r"-?(\d+\.\d*|\.\d+)([eE]-?\d+)?", text):
        return float(text)
    return text


def config_text(report: Report, trial: TrialReport) -> str:
    body = yaml.safe_dump(vllm_config(trial.args, report.model_path), sort_keys=False)
    return comment(header(report, trial)) + body


def k8s_objects(report: Report, trial: TrialReport) -> list[dict[str, Any]]:
    """A Deployment and a Service running the recommended vLLM server."""
    name = _k8s_name(f"autotune-{report.model}")
    model_dir = f"/models/{Path(report.model_path).name}"
    version = report.engine_version.split()[-1]
    hw = report.hardware
    image = (CUDA_IMAGE if hw.gpus else CPU_IMAGE).format(version=version)
    labels = {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": name}
    # Inside a pod the server listens on every address, so the Service can reach it.
    args = [*_model_args(trial.args, report.model_path, model_dir)]
    args = ["--model", model_dir, "--host", "0.0.0.0", "--port", str(PORT), *args]
    resources: dict[str, Any]
    if hw.gpus:
        resources = {"limits": {"nvidia.com/gpu": _tensor_parallel(trial.args)}}
    else:
        size = {"cpu": str(hw.cpu_count), "memory": f"{int(hw.memory_gib)}Gi"}
        resources = {"requests": dict(size), "limits": dict(size)}
    probe = {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": 10}
    container = {
        "name": "vllm",
        "image": image,
        "command": ["python3", "-m", VLLM_MODULE],
        "args": args,
        "env": [{"name": k, "value": v} for k, v in trial.env.items()],
        "ports": [{"name": "http", "containerPort": PORT}],
        # Start-up (a compile) takes minutes: readiness waits for /health, liveness after it.
        "startupProbe": {**probe, "failureThreshold": 60},
        "readinessProbe": probe,
        "livenessProbe": probe,
        "resources": resources,
        "volumeMounts": [
            {"name": "model", "mountPath": model_dir, "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {**labels, "autotune/run-id": report.run_id}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "volumes": [
                        {
                            "name": "model",
                            "hostPath": {"path": report.model_path, "type": "Directory"},
                        },
                        {"name": "shm", "emptyDir": {"medium": "Memory"}},
                    ],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": labels,
            "ports": [{"name": "http", "port": PORT, "targetPort": "http"}],
        },
    }
    return [deployment, service]


def _model_args(args: list[str], model_path: str, model_dir: str) -> list[str]:
    """``args`` with the model folder, where one names it, as mounted in the pod."""
    return [model_dir if a == model_path else a for a in args]


def _tensor_parallel(args: list[str]) -> int:
    for flag in ("--tensor-parallel-size", "-tp"):
        if flag in args and args.index(flag) + 1 < len(args):
            return int(args[args.index(flag) + 1])
    return 1


def _k8s_name(text: str) -> str:
    """A DNS-1035 label: lower case, digits and dashes, a letter first, 63 at most."""
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (s if s[:1].isalpha() else f"m-{s}")[:63].rstrip("-")


class _NoAliases(yaml.SafeDumper):
    """Writes a mapping used twice (the labels) out in full, not as a YAML anchor."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def k8s_text(report: Report, trial: TrialReport) -> str:
    docs = yaml.dump_all(k8s_objects(report, trial), Dumper=_NoAliases, sort_keys=False)
    return comment(header(report, trial)) + docs


def serve_start(report: Report, trial: TrialReport, python: str) -> str:
    """serve.sh's last line: vLLM reads its arguments from the config file."""
    return (
        f'exec "${{PYTHON:-{python}}}" -m {VLLM_MODULE} --config "$here/{CONFIG_FILE}" \\\n'
        f'  --host "${{HOST:-127.0.0.1}}" --port "${{PORT:-{PORT}}}" "$@"\n'
    )


def files(report: Report, trial: TrialReport) -> dict[str, str]:
    """vLLM's own files, by name."""
    return {CONFIG_FILE: config_text(report, trial), K8S_FILE: k8s_text(report, trial)}
