"""An engine never outlives the run that started it.

Four layers, none of which finds a process by its name:

- ``supervised``: the engine runs under a small supervisor that leads its process group; the
  supervisor gets SIGTERM when the tuner dies (a parent-death signal, whatever kills the tuner,
  SIGKILL included) and then ends the whole group, the engine's own children too (vLLM's
  engine core and workers, which a parent-death signal on the engine alone would leave);
- ``die_with_parent_of``: run in the child between fork and exec, it sets that signal and
  exits at once if the tuner is already gone;
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


def die_with_parent_of(parent: int, sig: signal.Signals = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn``: in the child before exec, send it ``sig`` when the thread that started
    it exits (the tuner starts engines from its main thread, so: when the tuner does), and exit
    at once if ``parent`` is already gone. Calls only async-signal-safe code."""

    def preexec() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the tuner died before prctl took effect
            os._exit(1)

    return preexec


# The supervisor: argv = [grace_s, the engine's argv...]. It leads the engine's process group
# and passes the engine's exit code on; on SIGTERM (a stop, or its parent's death) it sends
# SIGTERM to the group, waits up to grace_s for the engine, then SIGKILLs the group, itself too.
# It polls rather than blocking in wait(): a handler cannot wait on a child the interrupted
# wait() holds the lock of.
SUPERVISOR = """
import os, signal, subprocess, sys, time
grace = float(sys.argv[1])
child = subprocess.Popen(sys.argv[2:])
since = []
def stop(signum, frame):
    if not since:
        since.append(time.monotonic())
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        os.killpg(0, signal.SIGTERM)
signal.signal(signal.SIGTERM, stop)
while (rc := child.poll()) is None:
    if since and time.monotonic() - since[0] > grace:
        break
    time.sleep(0.05)
if since:
    os.killpg(0, signal.SIGKILL)
sys.exit(rc)
"""


def supervised(argv: list[str], grace_s: float = 10.0) -> list[str]:
    """``argv`` run under the supervisor (see SUPERVISOR); start it with
    ``preexec_fn=die_with_parent_of(os.getpid(), signal.SIGTERM)``."""
    return [sys.executable, "-c", SUPERVISOR, f"{grace_s:g}", *argv]


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
