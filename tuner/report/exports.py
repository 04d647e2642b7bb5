"""Deployment files for the recommended configuration, written beside the report.

Every engine that autotune starts gets:
- ``recommended.env``: the environment, ``KEY=value`` a line (``docker run --env-file``,
  systemd's ``EnvironmentFile``);
- ``serve.sh``: starts the recommended server with that environment on ``$HOST:$PORT``
  (127.0.0.1:8000 unless set): by default the measured launch command itself;
and what its entry in ``ENGINES`` adds: vLLM's ``--config`` file and a Kubernetes Deployment
(tuner/report/exports_vllm.py), its serve.sh reading that file. A new engine's files are one
entry there.

Everything comes from the report (the recommended trial's arguments and environment, rendered
for the machine the run measured), so the files say what was measured and nothing else. An
endpoint run has no launch of autotune's to export.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tuner.report import exports_vllm
from tuner.report.export_common import PORT, comment, header, recommended_trial
from tuner.report.schema import Report, TrialReport, write_atomic

ENV_FILE = "recommended.env"
SERVE_FILE = "serve.sh"


@dataclass(frozen=True)
class EngineExports:
    """An engine's own deployment files (by name) and serve.sh's start line (None: the
    measured launch command)."""

    files: Callable[[Report, TrialReport], dict[str, str]]
    serve_start: Callable[[Report, TrialReport, str], str] | None = None


ENGINES: dict[str, EngineExports] = {
    "vllm": EngineExports(exports_vllm.files, exports_vllm.serve_start),
}


def env_text(report: Report, trial: TrialReport) -> str:
    lines = [f"{k}={v}" for k, v in trial.env.items()]
    return comment(header(report, trial)) + "".join(f"{line}\n" for line in lines)


def serve_text(report: Report, trial: TrialReport) -> str:
    """A bash script that execs the server with the recommended environment."""
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in trial.env.items())
    python = shlex.quote(trial.launch_command[0]) if trial.launch_command else "python3"
    own = ENGINES.get(report.engine)
    if own is not None and own.serve_start is not None:
        start = own.serve_start(report, trial, python)
    else:
        argv = [shlex.quote(a) for a in _without(trial.launch_command, ("--host", "--port"))]
        argv[0] = f'"${{PYTHON:-{python}}}"'
        start = (
            f"exec {' '.join(argv)} \\\n"
            f'  --host "${{HOST:-127.0.0.1}}" --port "${{PORT:-{PORT}}}" "$@"\n'
        )
    notes = [
        *header(report, trial),
        f"HOST and PORT set where it listens (127.0.0.1:{PORT}); PYTHON the Python with the "
        "engine; further arguments go to the engine",
    ]
    return (
        "#!/usr/bin/env bash\n"
        + comment(notes)
        + "set -euo pipefail\n"
        + 'here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"\n'
        + exports
        + start
    )


def _without(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """``argv`` without ``flags`` and the value after each."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a in flags:
            skip = True
        else:
            out.append(a)
    return out


def write_exports(report: Report, folder: Path) -> list[Path]:
    """The deployment files of the recommendation in ``folder``; none without a launch."""
    trial = recommended_trial(report)
    if trial is None or not trial.launch_command or report.endpoint is not None:
        return []
    files = {ENV_FILE: env_text(report, trial), SERVE_FILE: serve_text(report, trial)}
    if (own := ENGINES.get(report.engine)) is not None:
        files |= own.files(report, trial)
    paths = []
    for name, text in files.items():
        path = folder / name
        write_atomic(path, text.encode())
        paths.append(path)
    (folder / SERVE_FILE).chmod(0o755)
    return paths
