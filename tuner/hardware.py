"""What the machine is: CPU model, cores, caches, memory, GPUs. Recorded with every run.

GPUs are read from ``nvidia-smi`` (no CUDA import needed in the tuner process).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys

import psutil
from pydantic import BaseModel, ConfigDict


class GPU(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    memory_mib: int | None = None


class Hardware(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hostname: str
    cpu_model: str
    cpu_count: int
    memory_gib: float
    l3_cache: str | None = None
    gpus: list[GPU] = []

    @property
    def device(self) -> str:
        return "cuda" if self.gpus else "cpu"

    @property
    def label(self) -> str:
        if self.gpus:
            return f"{len(self.gpus)}x {self.gpus[0].name}"
        cores = f"{self.cpu_count} core{'' if self.cpu_count == 1 else 's'}"
        return f"{self.cpu_model}, {cores}, {self.memory_gib:.0f} GiB"


def _lscpu() -> dict[str, str]:
    if not shutil.which("lscpu"):
        return {}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    info = {}
    for line in out.splitlines():
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    return info


def _gpus() -> list[GPU]:
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    gpus = []
    for line in out.stdout.strip().splitlines():
        name, _, mem = line.partition(",")
        m = re.search(r"\d+", mem)
        gpus.append(GPU(name=name.strip(), memory_mib=int(m[0]) if m else None))
    return gpus


def detect_hardware() -> Hardware:
    info = _lscpu()
    return Hardware(
        hostname=platform.node(),
        cpu_model=info.get("Model name") or platform.processor() or "unknown",
        cpu_count=len(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else (os.cpu_count() or 1),
        memory_gib=psutil.virtual_memory().total / 2**30,
        l3_cache=info.get("L3 cache"),
        gpus=_gpus(),
    )


def template_context(hw: Hardware) -> dict[str, int | str]:
    """Values search-space strings may use: {cpu_list}, {last_cpu}, {n_cpus}, {n_gpus} and
    {prefix} (this Python environment's prefix, where engines installed as packages live)."""
    cpus = (
        sorted(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else list(range(hw.cpu_count))
    )
    return {
        "cpu_list": ",".join(map(str, cpus)),
        "last_cpu": cpus[-1],
        "n_cpus": len(cpus),
        "n_gpus": len(hw.gpus),
        "prefix": sys.prefix,
    }
