"""A CPU neighbour: a process that burns a set share of one core while a point is measured.

What a recommendation holds under depends on what else runs on the machine. On a 2-core
machine an engine whose OpenMP threads are bound to every core loses more than the CPU another
process takes, and a steady ballast costs it more than a client whose CPU comes in bursts:
beside the server at 0.9 of its capacity (benchmarks/client_cpu.py, 2026-12-05), vLLM's own
client (10 % of a core) raised the median time per output token 1.43x over autotune's client
alone, a ballast of 8 % 1.61x, of 16 % 2.09x. ``Neighbour(pct)`` stands in for that other
process, for example a co-located benchmark client (``--neighbour-cpu 8%`` costs the server a
little more than vLLM's), so that configurations are scored, and the claim confirmed, under
the condition they will be judged in.

The ballast runs in its own session in 10 ms duty cycles; it is stopped by its process group,
on every exit path, and stops by itself once the process that started it is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from types import TracebackType

PERIOD_S = 0.01
_LOOP = """
import os, sys, time
duty, period, parent = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
while os.getppid() == parent:  # it ends with whoever started it, even one killed by SIGKILL
    t = time.perf_counter()
    while time.perf_counter() - t < duty * period:
        pass
    time.sleep((1.0 - duty) * period)
"""


class Neighbour:
    """Burns ``pct`` % of one core while the context is open (0: does nothing)."""

    def __init__(self, pct: float) -> None:
        if not 0 <= pct <= 100:
            raise ValueError(f"a neighbour's CPU share must be in [0, 100] %, got {pct:g}")
        self.pct = pct
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Neighbour:
        if self.pct > 0:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _LOOP,
                    str(self.pct / 100.0),
                    str(PERIOD_S),
                    str(os.getpid()),
                ],
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
