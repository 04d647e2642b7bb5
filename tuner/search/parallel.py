"""Pure work spread over the machine's cores: the serving model's predictions while it screens.

A screen's candidates are simulated one by one in Python (tuner/servemodel/scheduler.py), about
0.13 s each on a 2-core AMD EPYC: 200 of them took 27 s of a 13-minute run, between two
configurations, with no engine running and one core idle. ``map_forked`` runs them in forked
workers, one per core up to the items given (a screen's batch: four): they inherit the
calibrated model as it is (the work function is not pickled, only each item and its result),
and the parent keeps every side effect (its caches, what was screened). The workers are forked
for each call and gone after it.

A fork is only safe where no other thread could hold a lock the workers inherit, so the work
stays in the parent where another Python thread runs (a shared study's heartbeat, a metrics
sampler), where the machine has one core to give it, on a Python before 3.11 (whose pool could
fork beside its own manager thread), or where ``AUTOTUNE_WORKERS=1`` says so. The results are
the same either way, in the same order. A worker ignores Ctrl-C (the tuner stops it by ending
the pool) and dies with the tuner.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from tuner.engines.lifetime import die_with_parent_of

T = TypeVar("T")
R = TypeVar("R")

MAX_WORKERS = 8  # processes at most, whatever the cores

_work: Callable[[Any], Any] | None = None  # what the forked workers run, set before they fork


def workers() -> int:
    """Processes to spread pure work over: the cores this process may run on (at most
    ``MAX_WORKERS``), or ``AUTOTUNE_WORKERS``."""
    if (env := os.environ.get("AUTOTUNE_WORKERS", "").strip()).isdigit() and int(env) > 0:
        return min(int(env), MAX_WORKERS)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_WORKERS))


def usable(n_items: int, n_workers: int | None = None) -> int:
    """The workers ``map_forked`` runs ``n_items`` on (1: in the parent)."""
    n = min(workers() if n_workers is None else n_workers, n_items)
    if (
        threading.active_count() > 1
        or sys.version_info < (3, 11)
        or "fork" not in multiprocessing.get_all_start_methods()
    ):
        return 1
    return max(1, n)


def _worker_start(parent: int) -> Callable[[], None]:
    die = die_with_parent_of(parent, signal.SIGKILL)

    def start() -> None:
        die()  # a tuner killed outright takes its workers with it: none is left waiting
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the tuner's Ctrl-C is the tuner's
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the tuner's stop handler

    return start


def _call(item: Any) -> Any:
    assert _work is not None
    return _work(item)


def map_forked(fn: Callable[[T], R], items: Sequence[T], n_workers: int | None = None) -> list[R]:
    """``[fn(x) for x in items]``, in forked workers where that is safe and worth it (the module
    docstring). ``fn`` may be a closure: the workers inherit it. Its exceptions reach the
    caller as they would in the parent."""
    global _work
    n = usable(len(items), n_workers)
    if n < 2:
        return [fn(x) for x in items]
    _work = fn
    try:
        with ProcessPoolExecutor(
            n,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_worker_start(os.getpid()),
        ) as pool:
            return list(pool.map(_call, items))
    finally:
        _work = None
