"""The other commands' checks: ``autotune probe``, ``report`` and ``compare`` (their defaults
are in tuner/options/tune.py beside the tuning run's). Each raises ValueError, one line naming
the flag, before anything starts."""

from __future__ import annotations

from pathlib import Path

from tuner.options.tune import check_error_rate
from tuner.report.formats import FORMATS


def check_probe(
    *,
    model: str | None,
    endpoint: str | None,
    concurrency: int | None,
    rate: float | None,
    requests: int,
    warmup: int,
    params: list[str],
) -> None:
    """Raises ValueError, one line naming the flag, where ``autotune probe``'s options do not
    go together."""
    if (model is None) == (endpoint is None):
        raise ValueError("give either --model (to start a server) or --endpoint (a running one)")
    if concurrency is not None and rate is not None:
        raise ValueError("give --concurrency or --rate, not both")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"--concurrency must be >= 1, got {concurrency}")
    if rate is not None and rate <= 0:
        raise ValueError(f"--rate must be > 0, got {rate}")
    if requests < 1 or warmup < 0:
        raise ValueError("--requests must be >= 1 and --warmup >= 0")
    if params and model is None:
        raise ValueError(
            "--param goes with --model: an endpoint's settings are not autotune's to change"
        )


def check_report(
    *,
    fmt: str,
    formats: set[str],
    run_dir: Path | None,
    storage: str | None,
    study: str | None,
    slo: list[str],
    max_error_rate: float | None,
) -> None:
    """Raises ValueError, one line naming the flag, where ``autotune report``'s options do not
    go together (``formats``: ``fmt``'s comma-separated names)."""
    if not formats or formats - set(FORMATS):
        *names, last = FORMATS
        raise ValueError(f"--format {fmt!r}: give {', '.join(names)} or {last}, comma-separated")
    if (run_dir is None) == (storage is None):
        raise ValueError("give a run folder, or --storage URL --study NAME for a shared study")
    if storage is not None and (study is None or slo):
        raise ValueError("--storage goes with --study NAME (and no --slo)")
    if storage is None and max_error_rate is not None:
        check_error_rate(max_error_rate)


def check_compare(run_dirs: list[Path]) -> None:
    """Raises ValueError where ``autotune compare`` has fewer than two folders to compare."""
    if len(run_dirs) < 2:
        raise ValueError("give two or more run folders to compare")
