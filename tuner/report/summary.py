"""How a tuning ends, for scripts and agents: the exit code and ``--json``'s one object.

Exit codes:

- 0: complete, with a recommendation;
- 1: the run failed (an error stopped it; report.json says which);
- 2: bad input, refused before anything started;
- 3: complete, but no configuration met the SLOs (no recommendation);
- 130: interrupted (Ctrl-C or SIGTERM); ``autotune --resume RUN_DIR`` continues it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.report.formats import FORMATS
from tuner.report.schema import Report

OK, FAILED, BAD_INPUT, NONE_MET, INTERRUPTED = 0, 1, 2, 3, 130


def exit_code(report: Report) -> int:
    if report.status == "interrupted":
        return INTERRUPTED
    if report.status != "complete":
        return FAILED
    return OK if report.recommended is not None else NONE_MET


def summary(report: Report, folder: Path) -> dict[str, Any]:
    """The run's outcome as one JSON object: where its files are and what it recommends."""
    rec = report.recommended
    files = {
        name: str(folder / name)
        for name in (
            *(f.file for f in FORMATS.values()), "recommended.vllm.yaml",
            "recommended.env", "serve.sh", "k8s.yaml",
        )
        if (folder / name).is_file()
    }  # fmt: skip
    out: dict[str, Any] = {
        "status": report.status,
        "exit_code": exit_code(report),
        "run_id": report.run_id,
        "folder": str(folder),
        "files": files,
        "slo": [s.model_dump() for s in report.slo],
        "load_model": report.load.get("model"),
        "recommended": None,
        "error": report.error,
    }
    if rec is not None:
        m = rec.metrics
        out["recommended"] = {
            "from_trial": rec.from_trial,
            "params": rec.params,
            "launch_command": rec.launch_command,
            "env": rec.env,
            "load": rec.load,
            "output_tokens_per_s": m.output_tokens_per_s,
            "ttft_ms": m.ttft_ms.model_dump(),
            "tpot_ms": m.tpot_ms.model_dump(),
            "n_requests": rec.n_requests,
            "meets_slo": rec.meets_slo,
            "gain_vs_baseline": rec.gain_vs_baseline,
        }
    return out
