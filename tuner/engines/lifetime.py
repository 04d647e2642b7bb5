"""An engine never outlives the run that started it.

Three layers, none of which finds a process by its name:

- ``die_with_parent_of``: run in the child between fork and exec, it asks Linux to SIGKILL the
  engine's leader when the tuner dies, whatever kills the tuner (SIGKILL included);
- ``RUN_MARKER``: every engine a run starts carries ``AUTOTUNE_RUN=<run id>`` in its
  environment, which its children (vLLM's renamed engine core and workers) inherit;
- ``leftovers``/``sweep``: the processes whose environment carries a run's marker, and their
  process groups ended; ``--resume`` sweeps what a dead run left before it starts anything.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

RUN_MARKER = "AUTOTUNE_RUN"
_PR_SET_PDEATHSIG = 1


def _resolve_prctl() -> Callable[..., int] | None:
    # Looked up once, here in the parent: the child runs between fork and exec, where loading a
    # library (a lock another thread of the tuner may hold) could deadlock.
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _resolve_prctl()


def die_with_parent_of(parent: int) -> Callable[[], None]:
    """A ``preexec_fn``: in the child before exec, SIGKILL it when the thread that started it
    exits (the tuner starts engines from its main thread, so: when the tuner does), and exit at
    once if ``parent`` is already gone. Calls only async-signal-safe code."""

    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the tuner died before prctl took effect
            os._exit(1)

    return preexec


def _marked(pid: int, marker: bytes) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or not ours to read
        return False
    return marker in env.split(b"\0")


def leftovers(run_id: str, proc: Path = Path("/proc")) -> list[int]:
    """Pids of live processes started for ``run_id`` (their environment carries its marker)."""
    marker = f"{RUN_MARKER}={run_id}".encode()
    me = os.getpid()
    pids = []
    for entry in proc.iterdir() if proc.is_dir() else []:
        if entry.name.isdigit() and int(entry.name) != me and _marked(int(entry.name), marker):
            pids.append(int(entry.name))
    return sorted(pids)


def sweep(run_id: str, grace_s: float = 10.0) -> list[int]:
    """End what a run left running: SIGTERM the process groups of its marked processes, then
    SIGKILL what is still there after ``grace_s``. Returns the pids found."""
    found = leftovers(run_id)
    if not found:
        return []
    groups = set()
    for pid in found:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    groups.discard(os.getpgrp())  # never our own group
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for g in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(g, sig)
        deadline = time.monotonic() + grace_s
        while leftovers(run_id) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not leftovers(run_id):
            return found
    for pid in leftovers(run_id):  # one that left its group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return found
