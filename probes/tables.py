"""Reading a table of requests from a file: JSONL (one object a line) or CSV (a header line).

Shared by the pairs and trace workloads. Which of the two a file is comes from its first line
that is not blank: an object (``{``) means JSONL, anything else a CSV header.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import orjson

from probes.prompts import WorkloadError

Row = tuple[int, dict[str, Any]]  # (line number, the row's values by column)


def file_lines(
    path: Path, what: str, *, missing: str | None = None, encoding: str = "utf-8", hint: str = ""
) -> list[str]:
    """The lines of a workload's text file (a trace, a pairs file, a JSONL workload).

    Args:
        what: how errors name the file (``"trace"``, ``"workload"``).
        missing: the error where there is no such file (default: that it is not one).
        hint: what the file should hold, said where it is not text.

    Raises:
        WorkloadError: a missing or unreadable file, or one not UTF-8 text.
    """
    if not path.is_file():
        raise WorkloadError(missing or f"{what} {str(path)!r} is not an existing file")
    try:
        return path.read_text(encoding=encoding).splitlines()
    except UnicodeDecodeError:
        raise WorkloadError(f"{what} {path}: not UTF-8 text{hint}") from None
    except OSError as exc:
        raise WorkloadError(f"{what} {path}: cannot be read: {exc.strerror or exc}") from None


def read_table(path: Path, what: str) -> tuple[list[Row], list[str]]:
    """The rows of ``path`` and its columns (a CSV's header; the keys of a JSONL's first row).

    Args:
        what: how errors name the file (``"trace"``, ``"pairs file"``).

    Raises:
        WorkloadError: a missing or unreadable file, a bad line, no rows.
    """
    lines = file_lines(path, what, encoding="utf-8-sig")
    first = next((line for line in lines if line.strip()), "")
    rows: list[Row] = []
    if first.lstrip().startswith("{"):
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                data = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise WorkloadError(f"{path}:{n}: not a JSON object: {exc}") from None
            if not isinstance(data, dict):
                raise WorkloadError(f"{path}:{n}: not a JSON object")
            rows.append((n, data))
        columns = list(rows[0][1]) if rows else []
    else:
        reader = csv.DictReader(lines)
        columns = [c.strip() for c in reader.fieldnames or []]
        for data in reader:
            if not any((v or "").strip() for v in data.values() if isinstance(v, str)):
                continue
            if None in data:
                raise WorkloadError(f"{path}:{reader.line_num}: more values than columns")
            rows.append((reader.line_num, {k.strip(): v for k, v in data.items()}))
    if not rows:
        raise WorkloadError(f"{what} {path}: no requests in the file")
    return rows, columns


def whole(path: Path, line: int, column: str, value: Any, least: int = 1) -> int:
    """A cell as a whole number of at least ``least`` (a JSON number or a CSV string).

    Raises:
        WorkloadError: naming the line, the column and the value.
    """
    number: Any = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if (
        isinstance(number, bool)
        or not isinstance(number, int | float)
        or not math.isfinite(number)
        or number != int(number)
    ):
        raise WorkloadError(f"{path}:{line}: {column} must be a whole number, got {value!r}")
    if number < least:
        raise WorkloadError(f"{path}:{line}: {column} must be at least {least}, got {value!r}")
    return int(number)


def number(path: Path, line: int, column: str, value: Any) -> float:
    """A cell as a number (a JSON number or a CSV string).

    Raises:
        WorkloadError: naming the line, the column and the value.
    """
    try:
        got = float(value if isinstance(value, int | float) else str(value).strip())
    except ValueError:
        got = math.nan
    if isinstance(value, bool) or not math.isfinite(got):
        raise WorkloadError(f"{path}:{line}: {column} must be a number, got {value!r}")
    return got
