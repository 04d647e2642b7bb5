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


# lscpu flags kept in the record: what decides how fast each data type computes.
ISA_FLAGS = {
    "avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_tile", "fma",
    "asimd", "bf16", "sve", "i8mm",
}  # fmt: skip
BF16_FLAGS = {"avx512_bf16", "amx_bf16", "bf16"}
AVX512_FLAGS = {"avx512f", "amx_tile"}  # what vLLM's CPU backend needs for an fp8 KV cache


class Hardware(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hostname: str
    cpu_model: str
    cpu_count: int
    memory_gib: float
    l3_cache: str | None = None
    # The CPU's instruction-set flags that decide which data types compute natively (lscpu's
    # ``Flags``, only those in ISA_FLAGS); empty where unknown.
    cpu_flags: list[str] = []
    gpus: list[GPU] = []

    @property
    def bf16_native(self) -> bool | None:
        """Whether the CPU has bf16 matrix instructions (x86: AVX512-BF16 or AMX-BF16; Arm:
        BF16); None where its flags are unknown. Without them torch emulates bf16 matmuls: on
        an AVX2-only AMD EPYC, 1.1 GFLOP/s against 74 in float32 (one thread, 2026-12-03)."""
        flags = set(self.cpu_flags)
        if not flags:
            return None
        return bool(flags & BF16_FLAGS)

    @property
    def avx512(self) -> bool:
        """Whether the CPU has AVX-512 or AMX (vLLM 0.32 refuses an fp8 KV cache without)."""
        return bool(set(self.cpu_flags) & AVX512_FLAGS)

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
        cpu_flags=isa_flags(info.get("Flags", "")),
        gpus=_gpus(),
    )


def isa_flags(text: str) -> list[str]:
    """The flags of ``ISA_FLAGS`` in lscpu's space-separated ``Flags`` line, sorted."""
    return sorted(set(text.split()) & ISA_FLAGS)


def template_context(hw: Hardware) -> dict[str, int | str]:
    """Values search-space strings may use: {cpu_list}, {last_cpu}, {n_cpus}, {n_gpus} and
    {prefix} (this Python environment's prefix, where engines installed as packages live); and
    ``bf16_emulated`` ("yes" on a CPU known to lack bf16 instructions, else empty) and
    ``avx512`` ("yes" on a CPU with AVX-512 or AMX: vLLM's CPU backend needs one of them for an
    fp8 KV cache), which a search-space option ``requires`` to exist only there."""
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
        "bf16_emulated": "yes" if not hw.gpus and hw.bf16_native is False else "",
        "avx512": "yes" if not hw.gpus and hw.avx512 else "",
    }
