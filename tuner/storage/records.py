"""A point's per-request records on disk: one JSON object per line, written as the point is
measured and read back by everything that judges, calibrates or re-scores it later."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

from probes.records import RequestRecord
from tuner.report.schema import PointReport, TrialReport


class RecordsMissing(Exception):
    """A point's records file is not where its report says, nor in the run folder."""


def write_records(path: Path, records: list[RequestRecord]) -> None:
    """A point's raw records, one JSON object per line."""
    path.write_bytes(b"".join(orjson.dumps(r.to_json()) + b"\n" for r in records))


def keep_records(
    folder: Path, kept: dict[str, str], name: str, records: list[RequestRecord]
) -> None:
    """A probe sweep point's records, written to ``folder/<name>.jsonl`` and named in ``kept``
    (``Diagnosis.records_files``: what the serving model calibrates on)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.jsonl"
    write_records(path, records)
    kept[name] = str(path)


def read_records(path: Path) -> list[RequestRecord]:
    """A point's records file (``write_records``) back as records."""
    out = []
    for line in path.read_bytes().splitlines():
        d: dict[str, Any] = orjson.loads(line)
        for k in ("t_sched", "t_send", "t_first", "t_last", "t_end"):
            if d.get(k) is None:
                d[k] = math.nan
        out.append(RequestRecord(**d))
    return out


def records_path(run_dir: Path, t: TrialReport, p: PointReport) -> Path:
    """Where a point's records are: as written, or in the run folder where it has moved."""
    path = Path(p.records_file)
    if path.is_file():
        return path
    moved = run_dir / "trials" / f"{t.number:03d}" / path.name
    if moved.is_file():
        return moved
    raise RecordsMissing(f"trial {t.number}: its records file {path} is missing")
