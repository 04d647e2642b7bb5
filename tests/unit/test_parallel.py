"""tuner/search/parallel.py: pure work on forked workers, the same results in the same order,
and in the parent wherever a fork would not be safe."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from tuner.search import parallel


def test_forked_workers_give_the_parents_results_in_order() -> None:
    offset = 7  # a closure: the workers inherit it, nothing is pickled but items and results
    items = list(range(12))
    got = parallel.map_forked(lambda x: (x + offset, os.getpid()), items, 2)
    assert [v for v, _ in got] == [x + offset for x in items]
    assert os.getpid() not in {pid for _, pid in got}  # run elsewhere
    assert parallel._work is None  # nothing left behind for the next call


def test_an_error_in_a_worker_reaches_the_caller() -> None:
    def boom(x: int) -> int:
        if x == 3:
            raise ValueError("three")
        return x

    with pytest.raises(ValueError, match="three"):
        parallel.map_forked(boom, list(range(6)), 2)


def test_with_another_thread_alive_the_work_stays_in_the_parent() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        got = parallel.map_forked(lambda x: os.getpid(), [1, 2, 3], 2)
    finally:
        stop.set()
        other.join()
    assert set(got) == {os.getpid()}


def test_one_worker_or_one_item_runs_in_the_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parallel.map_forked(lambda x: os.getpid(), [1], 2) == [os.getpid()]
    monkeypatch.setenv("AUTOTUNE_WORKERS", "1")
    assert parallel.workers() == 1
    assert set(parallel.map_forked(lambda x: os.getpid(), [1, 2, 3])) == {os.getpid()}
    monkeypatch.setenv("AUTOTUNE_WORKERS", "64")
    assert parallel.workers() == parallel.MAX_WORKERS


def test_a_worker_leaves_ctrl_c_to_the_tuner() -> None:
    got = parallel.map_forked(
        lambda x: (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)), [1, 2], 2
    )
    assert got == [(signal.SIG_IGN, signal.SIG_DFL)] * 2
