"""Where a run's truth lives: its options, and its state after every finished trial.

A ``RunStore`` holds, for one run:

- ``RunMeta``: the run id, the salt and the options it was started with (``--resume`` takes
  these, never new ones, so a resumed run measures what the first part measured);
- one ``Checkpoint`` per finished trial: the tuner's whole state right after that trial
  (every trial's record, the baseline's confirmation, comparisons, notes, the probe's
  verdict, the gates' references, the random state, where the time went), written atomically
  before the next trial starts;
- the per-point ``Samples`` the capacity estimates are fitted from, one file each, written
  once (samples are only ever appended to a trial, so a checkpoint names how many it had).

``FolderStore`` keeps them in the run folder beside the Optuna journal and the per-request
records: ``run.json``, ``checkpoints/NNN.json``, ``samples/NNN-K.npz``. A checkpoint of a
trial that a resumed run measures differently (it sampled another configuration) is moved
aside, never deleted. ``MemoryStore`` is the same in memory, for tests; both pass the one
conformance suite (tests/unit/test_store.py).
"""

from __future__ import annotations

import fcntl
import io
import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict

from probes.diagnose import Diagnosis
from probes.quality import Continuation, Quality
from tuner.report.schema import (
    ComparisonReport,
    Recommendation,
    StageReport,
    TrialReport,
    write_atomic,
)
from tuner.scoring.estimate import Samples

SCHEMA = 1


class StoreError(RuntimeError):
    """A run folder that cannot be resumed (missing, from another version, or unreadable)."""


class RunMeta(BaseModel):
    """What a run was asked to do (``TuneOptions`` as JSON) and its identity."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA
    run_id: str
    salt: str
    options: dict[str, Any]
    resumes: int = 0  # how many times it was resumed
    done: bool = False  # the final report was written by a run that was not interrupted


class Checkpoint(BaseModel):
    """The tuner's state right after trial ``number`` finished (``trial`` is its record;
    ``trials`` the ones before it, as the search holds them then)."""

    model_config = ConfigDict(extra="forbid")

    number: int
    stage: str
    params: dict[str, Any]
    trial: TrialReport
    baseline: TrialReport | None
    trials: list[TrialReport]
    stage_reports: list[StageReport]
    comparisons: list[ComparisonReport]
    baseline_confirmed: Recommendation | None
    trial_confirmed: Recommendation | None = None  # confirmed on its own server (sizing.py)
    displaced_confirmed: Recommendation | None = None  # the one a later trial's replaced
    notes: list[str]
    diagnosis: Diagnosis | None
    probe_s: float
    quality_ref: Quality | list[Continuation] | None
    quality_ref_error: str | None
    greedy: dict[int, list[Continuation]]
    samples: dict[int, int]  # trial number -> how many of its samples files count
    rng_state: list[Any]
    elapsed_s: float
    stage_left_s: float | None  # the open stage's time left (None: unbounded)
    startup_s: float
    warmup_s: float
    measure_s: float
    engine_starts: int


class RunStore(Protocol):
    """The storage a run reads and writes (see the module docstring)."""

    def save_meta(self, meta: RunMeta) -> None: ...
    def load_meta(self) -> RunMeta: ...
    def add_samples(self, trial: int, index: int, samples: Samples) -> None: ...
    def samples(self, trial: int, count: int) -> list[Samples]: ...
    def save_checkpoint(self, cp: Checkpoint) -> None: ...
    def checkpoints(self) -> dict[int, Checkpoint]: ...
    def set_aside(self, number: int, why: str) -> None: ...


def samples_bytes(s: Samples) -> bytes:
    """One point's samples as an .npz (ITL gaps flattened with their offsets)."""
    lengths = np.array([a.size for a in s.itl], dtype=np.int64)
    flat = np.concatenate(s.itl) if s.itl else np.zeros(0)
    arrays: dict[str, np.ndarray] = {
        "meta": np.array([s.load, s.duration_s], dtype=float),
        "ok": s.ok,
        "n_out": s.n_out,
        "itl_lengths": lengths,
        "itl": flat,
        **{f"v_{k}": v for k, v in s.values.items()},
    }
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    return buf.getvalue()


def samples_from_bytes(data: bytes) -> Samples:
    with np.load(io.BytesIO(data)) as z:
        load, duration = (float(x) for x in z["meta"])
        ends = np.cumsum(z["itl_lengths"])
        flat = z["itl"]
        itl = [flat[e - n : e].copy() for e, n in zip(ends, z["itl_lengths"], strict=True)]
        values = {k[2:]: z[k].copy() for k in z.files if k.startswith("v_")}
        return Samples(load, duration, z["ok"].copy(), z["n_out"].copy(), values, itl)


def checkpoint_bytes(cp: Checkpoint) -> bytes:
    """JSON with NaN and infinities kept (the standard library's, unlike orjson's null, reads
    them back: a metric with no samples is NaN, an unbounded estimate infinite)."""
    return json.dumps(cp.model_dump(mode="json")).encode()


def checkpoint_from_bytes(data: bytes) -> Checkpoint:
    return Checkpoint.model_validate(json.loads(data))


def lock_folder(root: Path) -> BinaryIO:
    """An exclusive lock on ``root/run.lock`` for as long as the returned object lives (the
    process's life at most: the kernel drops it with the process, SIGKILL included).

    Raises:
        StoreError: another live autotune process holds it.
    """
    root.mkdir(parents=True, exist_ok=True)
    f = open(root / "run.lock", "a+b")  # noqa: SIM115  (held open: the lock lives with it)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise StoreError(f"{root} is in use by another autotune process") from None
    return f


class FolderStore:
    """A run folder on disk (the default store); every write is atomic."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def _meta_path(self) -> Path:
        return self.root / "run.json"

    def exists(self) -> bool:
        return self._meta_path.is_file()

    def save_meta(self, meta: RunMeta) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self._meta_path, orjson.dumps(meta.model_dump(mode="json")))

    def load_meta(self) -> RunMeta:
        try:
            raw = orjson.loads(self._meta_path.read_bytes())
        except FileNotFoundError:
            raise StoreError(f"{self.root} is not an autotune run folder (no run.json)") from None
        except (OSError, orjson.JSONDecodeError) as exc:
            raise StoreError(f"{self._meta_path} cannot be read: {exc}") from exc
        if raw.get("schema_version") != SCHEMA:
            raise StoreError(
                f"{self._meta_path} is schema {raw.get('schema_version')!r}; this autotune "
                f"resumes schema {SCHEMA}"
            )
        return RunMeta.model_validate(raw)

    def add_samples(self, trial: int, index: int, samples: Samples) -> None:
        d = self.root / "samples"
        d.mkdir(parents=True, exist_ok=True)
        write_atomic(d / f"{trial:03d}-{index}.npz", samples_bytes(samples))

    def samples(self, trial: int, count: int) -> list[Samples]:
        d = self.root / "samples"
        return [samples_from_bytes((d / f"{trial:03d}-{i}.npz").read_bytes()) for i in range(count)]

    def all_samples(self, trial: int) -> list[Samples]:
        """Every point's samples of a trial, its confirmations' included, as the run kept them."""
        count = 0
        while (self.root / "samples" / f"{trial:03d}-{count}.npz").is_file():
            count += 1
        return self.samples(trial, count)

    def save_checkpoint(self, cp: Checkpoint) -> None:
        d = self.root / "checkpoints"
        d.mkdir(parents=True, exist_ok=True)
        write_atomic(d / f"{cp.number:03d}.json", checkpoint_bytes(cp))

    def checkpoints(self) -> dict[int, Checkpoint]:
        d = self.root / "checkpoints"
        out: dict[int, Checkpoint] = {}
        for p in sorted(d.glob("*.json")) if d.is_dir() else []:
            if not p.stem.isdigit():
                continue
            try:
                cp = checkpoint_from_bytes(p.read_bytes())
            except (OSError, ValueError) as exc:
                raise StoreError(f"{p} cannot be read: {exc}") from exc
            out[cp.number] = cp
        return out

    def set_aside(self, number: int, why: str) -> None:
        """Move a checkpoint (and its trial folder) aside: ``NNN.stale-K``; why in a file."""
        for path in (
            self.root / "checkpoints" / f"{number:03d}.json",
            self.root / "trials" / f"{number:03d}",
        ):
            if not path.exists():
                continue
            k = 1
            while (dest := path.with_name(f"{path.name}.stale-{k}")).exists():
                k += 1
            os.replace(path, dest)
            (dest.parent / f"{dest.name}.why").write_text(why + "\n")


class MemoryStore:
    """The same in memory (tests)."""

    def __init__(self) -> None:
        self.meta: RunMeta | None = None
        self._samples: dict[tuple[int, int], bytes] = {}
        self._cps: dict[int, bytes] = {}
        self.aside: list[tuple[int, str]] = []

    def save_meta(self, meta: RunMeta) -> None:
        self.meta = meta.model_copy(deep=True)

    def load_meta(self) -> RunMeta:
        if self.meta is None:
            raise StoreError("no run stored")
        return self.meta.model_copy(deep=True)

    def add_samples(self, trial: int, index: int, samples: Samples) -> None:
        self._samples[(trial, index)] = samples_bytes(samples)

    def samples(self, trial: int, count: int) -> list[Samples]:
        return [samples_from_bytes(self._samples[(trial, i)]) for i in range(count)]

    def save_checkpoint(self, cp: Checkpoint) -> None:
        self._cps[cp.number] = checkpoint_bytes(cp)

    def checkpoints(self) -> dict[int, Checkpoint]:
        return {n: checkpoint_from_bytes(b) for n, b in self._cps.items()}

    def set_aside(self, number: int, why: str) -> None:
        if self._cps.pop(number, None) is not None:
            self.aside.append((number, why))
