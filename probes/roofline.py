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

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

MATMUL_MAX_S = 1.0  # a matmul's product longer than this is measured at a quarter of the side


class DeviceRates(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str
    threads: int | None
    copy_bytes: int
    memory_bandwidth_gbps: float  # (read + write) bytes moved / s, median of repeats
    matmul_n: int
    matmul_dtype: str
    matmul_tflops: float  # 2 n^3 / s, median of repeats
    # The same product in float32 (None in older reports): a bf16 rate far under it means the
    # device emulates bf16 (a CPU without AVX512-BF16 or AMX), and a model served in float32
    # computes faster there.
    fp32_matmul_n: int | None = None
    fp32_matmul_tflops: float | None = None

    @property
    def bf16_over_fp32(self) -> float | None:
        """bf16 matmul throughput over float32's; None where float32 was not measured."""
        if not self.fp32_matmul_tflops:
            return None
        return self.matmul_tflops / self.fp32_matmul_tflops


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


def in_turn(
    fns: list[Callable[[], Any]],
    repeats: int,
    sync: Callable[[], Any] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """The median time of each of ``fns``, run in turn ``repeats`` times (a, b, a, b, ...)
    after one warm-up call each (page faults, kernel selection): a moment of other work on the
    machine slows one round of all of them, not all the rounds of one."""
    for fn in fns:
        fn()
    sync()
    out: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, times in zip(fns, out, strict=True):
            t0 = clock()
            fn()
            sync()
            times.append(clock() - t0)
    return [statistics.median(times) for times in out]


def measure_device(
    device: str = "cpu",
    copy_mib: int | None = None,
    llc_bytes: int | None = None,
    matmul_n: int = 2048,
    repeats: int = 5,
) -> DeviceRates:
    """Measure copy bandwidth and bf16 and float32 matmul throughput with torch on ``device``.

    Args:
        copy_mib: buffer size; default 4x the last-level cache (at least 256 MiB).
        matmul_n: the matrices' side; smaller for a data type whose second product at a
            quarter of it shows that one at full size would take over ``MATMUL_MAX_S``
            (emulated bf16 on an AVX2-only CPU: about 8 s a product at 2048).
    """
    import torch

    if copy_mib is None:
        copy_mib = max(256, 4 * (llc_bytes or 0) // 2**20)
    n_elems = copy_mib * 2**20 // 4
    src = torch.ones(n_elems, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    (t_copy,) = in_turn([lambda: dst.copy_(src)], repeats, sync)
    bw = 2 * n_elems * 4 / t_copy / 1e9  # one read and one write per element

    def side(dtype: Any) -> int:
        """The product's side for ``dtype``: cut to a quarter where a full one would be slow.
        Judged by a second small product: the first pays for setting the kernel up (oneDNN's
        code for bf16 on a CPU), and timed alone it cut the side on a 2-core AMD EPYC whose bf16
        products run at 2.2x float32's, where the 512-side product then measured 34 GFLOP/s
        against float32's 173 at 2048, and the probe said bf16 was emulated (the README command,
        2026-12-07 06:17)."""
        small = max(1, matmul_n // 4)
        a = torch.randn(small, small, dtype=dtype, device=device)
        torch.mm(a, a)
        sync()
        t0 = time.perf_counter()
        torch.mm(a, a)
        sync()
        slow = (time.perf_counter() - t0) * (matmul_n / small) ** 3 > MATMUL_MAX_S
        return small if slow else matmul_n

    # bf16 and float32 products taken in turn, so that whatever else runs on the machine for a
    # moment slows both alike and their ratio stands.
    n_bf16, n_fp32 = side(torch.bfloat16), side(torch.float32)
    ops = {}
    for name, dtype, n in (("bf16", torch.bfloat16, n_bf16), ("fp32", torch.float32, n_fp32)):
        a = torch.randn(n, n, dtype=dtype, device=device)
        b = torch.randn(n, n, dtype=dtype, device=device)
        ops[name] = (n, lambda a=a, b=b: torch.mm(a, b))
    times = in_turn([op for _, op in ops.values()], repeats, sync)
    bf16, fp32 = (2 * n**3 / t / 1e12 for (n, _), t in zip(ops.values(), times, strict=True))
    return DeviceRates(
        device=device,
        threads=torch.get_num_threads() if device == "cpu" else None,
        copy_bytes=n_elems * 4,
        memory_bandwidth_gbps=bw,
        matmul_n=n_bf16,
        matmul_dtype="bfloat16",
        matmul_tflops=bf16,
        fp32_matmul_n=n_fp32,
        fp32_matmul_tflops=fp32,
    )


class RooflineError(RuntimeError):
    """The device's rates could not be measured in a process of their own."""


# What measuring apart may take: a fresh interpreter importing torch (5-10 s on a slow 2-core
# box), the copy and four products; an emulated bf16 product is cut to a quarter of its side.
APART_TIMEOUT_S = 120.0


def measure_device_apart(
    device: str = "cpu", llc_bytes: int | None = None, timeout_s: float = APART_TIMEOUT_S
) -> DeviceRates:
    """``measure_device`` in a fresh Python process: no thread pool of the caller's (numpy's,
    torch's, a load client's) is there to spin beside its products. Measured inside the tuner,
    right after the probe's sweeps, one 2-core AMD EPYC box gave bf16 202 and float32 17
    GFLOP/s in one run and bf16 34 and float32 173 in another, where a fresh process beside
    the same idle server measured 360 and 175, and one with no server 415-422 and 185-189
    (2026-12-07).

    Raises:
        RooflineError: the process failed or ran past ``timeout_s``."""
    # the caller's own probes package: run from its root (``-m`` puts the working directory
    # first on the path), found there first too
    root = str(Path(__file__).resolve().parents[1])
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": root if not path else os.pathsep.join([root, path])}
    argv = [sys.executable, "-m", "probes.roofline", "--device", device]
    if llc_bytes:
        argv += ["--llc-bytes", str(llc_bytes)]
    try:
        out = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=root,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise RooflineError(f"measuring the device took over {timeout_s:.0f} s") from None
    except OSError as exc:
        raise RooflineError(f"measuring the device could not start: {exc}") from None
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        why = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        raise RooflineError(f"measuring the device failed: {why}")
    try:
        return DeviceRates.model_validate_json(lines[-1])
    except ValueError as exc:
        raise RooflineError(f"measuring the device printed no rates: {lines[-1][:80]}") from exc


def main(argv: list[str] | None = None) -> int:
    """``python -m probes.roofline``: the device's rates as one JSON line."""
    ap = argparse.ArgumentParser(prog="python -m probes.roofline", description=main.__doc__)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--llc-bytes", type=int, default=None)
    a = ap.parse_args(argv)
    print(measure_device(a.device, llc_bytes=a.llc_bytes).model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
