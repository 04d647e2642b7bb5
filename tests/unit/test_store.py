"""The run store's conformance suite: every RunStore implementation passes the same tests."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tuner.report.schema import TrialReport
from tuner.scoring.estimate import Samples
from tuner.storage.store import Checkpoint, FolderStore, MemoryStore, RunMeta, RunStore, StoreError

Factory = Callable[[Path], RunStore]
STORES: dict[str, Factory] = {
    "folder": lambda p: FolderStore(p / "run"),
    "memory": lambda p: MemoryStore(),
}


@pytest.fixture(params=sorted(STORES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> RunStore:
    return STORES[request.param](tmp_path)


def _samples(n: int, load: float) -> Samples:
    rng = np.random.default_rng(n)
    ttft = rng.uniform(10, 90, n)
    ttft[0] = math.nan  # a failed request has no TTFT
    return Samples(
        load=load,
        duration_s=12.5,
        ok=np.array([False] + [True] * (n - 1)),
        n_out=np.array([0.0] + [8.0] * (n - 1)),
        values={"ttft": ttft, "tpot": rng.uniform(1, 5, n), "e2e": rng.uniform(50, 99, n)},
        itl=[np.zeros(0)] + [rng.uniform(1, 3, k) for k in range(1, n)],
    )


def _trial(number: int) -> TrialReport:
    return TrialReport(
        number=number,
        stage="batching",
        params={"x": number},
        args=[],
        env={},
        launch_command=[],
        status="ok",
        score_tokens_per_s=float(number),
    )


def _checkpoint(number: int, **kw: object) -> Checkpoint:
    rng = random.Random(number)
    v, internal, g = rng.getstate()
    base: dict[str, object] = dict(
        number=number,
        stage="batching",
        params={"x": number},
        trial=_trial(number),
        baseline=None,
        trials=[_trial(k) for k in range(1, number)],
        stage_reports=[],
        comparisons=[],
        baseline_confirmed=None,
        notes=["a note"],
        diagnosis=None,
        probe_s=0.0,
        quality_ref=None,
        quality_ref_error=None,
        greedy={},
        samples={number: 1},
        rng_state=[v, list(internal), g],
        elapsed_s=12.0 * number,
        stage_left_s=None,
        startup_s=1.0,
        warmup_s=2.0,
        measure_s=3.0,
        engine_starts=number + 1,
    )
    base.update(kw)
    return Checkpoint(**base)  # type: ignore[arg-type]


def test_meta_round_trips(store: RunStore) -> None:
    meta = RunMeta(run_id="r1", salt="abcd", options={"model": "m", "trials": 3})
    store.save_meta(meta)
    got = store.load_meta()
    assert got == meta and got is not meta
    got.resumes += 1
    assert store.load_meta().resumes == 0  # a copy, not the stored object


def test_meta_of_an_empty_store_is_an_error(store: RunStore) -> None:
    with pytest.raises(StoreError):
        store.load_meta()


def test_samples_round_trip_exactly_with_nan_and_empty_gaps(store: RunStore) -> None:
    a, b = _samples(7, 2.5), _samples(3, 4.0)
    store.add_samples(1, 0, a)
    store.add_samples(1, 1, b)
    got = store.samples(1, 2)
    for want, have in zip([a, b], got, strict=True):
        assert (have.load, have.duration_s) == (want.load, want.duration_s)
        assert np.array_equal(have.ok, want.ok) and np.array_equal(have.n_out, want.n_out)
        for k in want.values:
            assert np.array_equal(have.values[k], want.values[k], equal_nan=True)
        assert [x.tolist() for x in have.itl] == [x.tolist() for x in want.itl]
    assert len(store.samples(1, 1)) == 1  # a checkpoint names how many count


def test_checkpoints_round_trip_with_nan_and_infinity(store: RunStore) -> None:
    cp = _checkpoint(2, probe_s=math.inf, stage_left_s=30.0)
    cp.trial.score_tokens_per_s = math.nan
    store.save_checkpoint(_checkpoint(1))
    store.save_checkpoint(cp)
    got = store.checkpoints()
    assert sorted(got) == [1, 2]
    assert got[2].probe_s == math.inf and math.isnan(got[2].trial.score_tokens_per_s or 0.0)
    assert got[1] == _checkpoint(1)
    store.save_checkpoint(_checkpoint(1, notes=["rewritten"]))
    assert store.checkpoints()[1].notes == ["rewritten"]


def test_set_aside_removes_a_checkpoint_from_the_resumable_ones(store: RunStore) -> None:
    store.save_checkpoint(_checkpoint(1))
    store.save_checkpoint(_checkpoint(2))
    store.set_aside(2, "measured afresh")
    store.set_aside(3, "nothing there: no error")
    assert sorted(store.checkpoints()) == [1]


def test_a_folder_store_keeps_what_it_sets_aside(tmp_path: Path) -> None:
    s = FolderStore(tmp_path / "run")
    s.save_checkpoint(_checkpoint(2))
    (tmp_path / "run" / "trials" / "002").mkdir(parents=True)
    s.set_aside(2, "why")
    s.save_checkpoint(_checkpoint(2))
    s.set_aside(2, "again")
    names = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert names == [
        "002.json.stale-1",
        "002.json.stale-1.why",
        "002.json.stale-2",
        "002.json.stale-2.why",
    ]
    assert (tmp_path / "run" / "trials" / "002.stale-1").is_dir()


def test_a_folder_store_refuses_another_schema(tmp_path: Path) -> None:
    s = FolderStore(tmp_path)
    (tmp_path / "run.json").write_text('{"schema_version": 99, "run_id": "x"}')
    with pytest.raises(StoreError, match="schema 99"):
        s.load_meta()
    (tmp_path / "run.json").write_text("{not json")
    with pytest.raises(StoreError, match="cannot be read"):
        s.load_meta()


def test_files_written_atomically_get_the_mode_open_gives(tmp_path: Path) -> None:
    import os

    from tuner.report.schema import UMASK, write_atomic

    write_atomic(tmp_path / "report.json", b"{}")
    (tmp_path / "plain").write_bytes(b"{}")
    mode = (tmp_path / "report.json").stat().st_mode & 0o777
    assert mode == (tmp_path / "plain").stat().st_mode & 0o777 == 0o666 & ~UMASK
    assert sorted(os.listdir(tmp_path)) == ["plain", "report.json"]  # no temporary file left
