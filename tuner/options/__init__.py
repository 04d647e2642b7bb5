"""What each command is asked to do, with its defaults and every check on its values, run
before anything starts: a tuning run's (``TuneOptions``: tune.py) and the other commands'
(commands.py). The CLI and the Python API import them from here."""

from tuner.options.commands import check_compare, check_probe, check_report
from tuner.options.tune import (
    AUTO_NEIGHBOUR_PCT,
    DEFAULT_SLO,
    DEFAULT_WORKLOAD,
    NEIGHBOUR_AUTO,
    PROBE_REQUESTS,
    PROBE_WARMUP,
    REPORT_FORMATS,
    RESULTS,
    SMALL_MACHINE_CORES,
    TuneOptions,
    auto_neighbour,
    check_engine,
    check_error_rate,
    check_load,
    default,
    problem,
    redact,
)

__all__ = [
    "AUTO_NEIGHBOUR_PCT",
    "DEFAULT_SLO",
    "DEFAULT_WORKLOAD",
    "NEIGHBOUR_AUTO",
    "PROBE_REQUESTS",
    "PROBE_WARMUP",
    "REPORT_FORMATS",
    "RESULTS",
    "SMALL_MACHINE_CORES",
    "TuneOptions",
    "auto_neighbour",
    "check_compare",
    "check_engine",
    "check_error_rate",
    "check_load",
    "check_probe",
    "check_report",
    "default",
    "problem",
    "redact",
]
