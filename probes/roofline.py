"""Roofline context measured on the device: memory bandwidth and matrix throughput.

Decoding one token reads every weight once, so its floor is ``weight bytes / memory bandwidth``;
prefill does about ``2 x parameters`` FLOPs per prompt token, so its floor is that over the
matrix throughput. Both rates are measured here, on the device the engine uses (torch copies and
bf16 matrix products; on a CPU with the threads torch is given), not taken from a data sheet.
The buffer is larger than the last-level cache where that is known, so the copy measures memory,
not cache; the model's own size against that cache is reported too, because a model that fits
in the cache is not bound by DRAM bandwidth (ENVIRONMENT.md saw this on a 480 MB-cache CPU).

Derived figures are printed beside raw ones: GB/s and TFLOP/s with the sizes that gave them.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict


class DeviceRates(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str
    threads: int | None
    copy_bytes: int
    memory_bandwidth_gbps: float  # (read + write) bytes moved / s, median of repeats
    matmul_n: int
    matmul_dtype: str
    matmul_tflops: float  # 2 n^3 / s, median of repeats


class ModelSize(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parameters: int
    weight_bytes: int
    dtype: str


def parse_cache_bytes(text: str | None) -> int | None:
    """``"32 MiB (1 instance)"`` -> bytes; None when unknown."""
    if not text:
        return None
    m = re.match(r"\s*([\d.]+)\s*([KMG]i?B)", text)
    if not m:
        return None
    unit = {"K": 2**10, "M": 2**20, "G": 2**30}[m[2][0]]
    return int(float(m[1]) * unit)


def model_size(model_dir: str | Path) -> ModelSize | None:
    """Parameters and weight bytes from a model folder's safetensors headers (no weights read)."""
    d = Path(model_dir)
    files = sorted(d.glob("*.safetensors"))
    if not files:
        return None
    n_params = n_bytes = 0
    dtypes: set[str] = set()
    itemsize = {
        "BF16": 2,
        "F16": 2,
        "F32": 4,
        "F64": 8,
        "I8": 1,
        "U8": 1,
        "F8_E4M3": 1,
        "F8_E5M2": 1,
        "I32": 4,
        "I64": 8,
    }
    for f in files:
        with f.open("rb") as fh:
            header_len = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(header_len))
        for name, meta in header.items():
            if name == "__metadata__":
                continue
            count = 1
            for s in meta["shape"]:
                count *= int(s)
            n_params += count
            n_bytes += count * itemsize.get(meta["dtype"], 2)
            dtypes.add(meta["dtype"])
    return ModelSize(parameters=n_params, weight_bytes=n_bytes, dtype="/".join(sorted(dtypes)))


def measure_device(
    device: str = "cpu",
    copy_mib: int | None = None,
    llc_bytes: int | None = None,
    matmul_n: int = 2048,
    repeats: int = 5,
) -> DeviceRates:
    """Measure copy bandwidth and bf16 matmul throughput with torch on ``device``.

    Args:
        copy_mib: buffer size; default 4x the last-level cache (at least 256 MiB).
    """
    import torch

    if copy_mib is None:
        copy_mib = max(256, 4 * (llc_bytes or 0) // 2**20)
    n_elems = copy_mib * 2**20 // 4
    src = torch.ones(n_elems, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def timed(fn: Any) -> float:
        fn()  # warm-up (page faults, kernel selection)
        sync()
        out = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            sync()
            out.append(time.perf_counter() - t0)
        return statistics.median(out)

    t_copy = timed(lambda: dst.copy_(src))
    bw = 2 * n_elems * 4 / t_copy / 1e9  # one read and one write per element
    a = torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device=device)
    b = torch.randn(matmul_n, matmul_n, dtype=torch.bfloat16, device=device)
    t_mm = timed(lambda: torch.mm(a, b))
    return DeviceRates(
        device=device,
        threads=torch.get_num_threads() if device == "cpu" else None,
        copy_bytes=n_elems * 4,
        memory_bandwidth_gbps=bw,
        matmul_n=matmul_n,
        matmul_dtype="bfloat16",
        matmul_tflops=2 * matmul_n**3 / t_mm / 1e12,
    )
