"""The transformers adapter: Hugging Face's ``transformers serve`` (OpenAI-compatible).

The server is started as ``transformers serve MODEL --host 127.0.0.1 --port P`` through the
console script installed beside this Python (the model is a positional argument, preloaded so the
first request does not load it). What it does not have, measured on transformers 5.19: no
``/metrics``; unknown request fields are refused with HTTP 422
(so no ``ignore_eos``: each request's real output length is recorded from its usage); no prompt
log-probabilities (the quality gate falls back to greedy-token agreement). Continuous batching is
off by default: requests are served one after another (static batching, the baseline).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from probes.server_metrics import ServerSeries
from tuner.engines.base import HOST, LaunchSpec, match_failure


class TransformersEngine:
    name = "transformers"
    supports_ignore_eos = False
    launches = True
    series: ServerSeries | None = None  # transformers serve has no /metrics

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python

    def version(self) -> str:
        try:
            return f"transformers {metadata.version('transformers')}"
        except metadata.PackageNotFoundError:
            return "not installed"

    def launch_spec(
        self, model_path: str, args: list[str], env: dict[str, str], port: int
    ) -> LaunchSpec:
        script = Path(self.python).parent / "transformers"
        argv = [str(script), "serve", model_path, "--host", HOST, "--port", str(port), *args]
        return LaunchSpec(argv, dict(env))

    def classify_failure(self, log_tail: str, returncode: int | None) -> str:
        """A short, stable reason for the report, read from the end of the server log."""
        rules = [
            (r"out of memory|OutOfMemoryError|Cannot allocate memory", "out of memory"),
            (
                r"No such option|Invalid value|Missing argument|Got unexpected extra",
                "bad engine arguments",
            ),
            (r"bitsandbytes|requires the `bitsandbytes`", "bitsandbytes unavailable"),
            (r"not supported|NotImplementedError|Unsupported", "unsupported on this build"),
            (r"No module named", "engine not installed"),
            (r"address already in use", "port in use"),
        ]
        if matched := match_failure(log_tail, rules, lambda ln: ln.strip()[:300]):
            return matched
        for line in reversed(log_tail.splitlines()):
            if re.search(r"(Error|Exception)\b", line) and "Traceback" not in line:
                return f"exited with code {returncode} ({line.strip()[:300]})"
        return f"exited with code {returncode}"
