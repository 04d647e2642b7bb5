"""Server-side metrics from a Prometheus text endpoint (vLLM's ``/metrics``).

- ``ServerSeries`` names the series autotune reads; each engine adapter gives its own (the names
  are the engine's), so no engine's metric names live in the measuring code.

- Snapshots before and after a window give deltas of counters and histogram ``_sum``/``_count``
  (e.g. ``vllm:request_prefill_time_seconds``, ``vllm:request_decode_time_seconds``).
- A background sampler records the peak of gauges during the window (``vllm:kv_cache_usage_perc``,
  ``vllm:num_requests_running``). It polls every ``interval_s`` from a thread, on its own
  connection, so the load client's event loop is not disturbed.

Tails of latency come from the client's samples, never from histogram buckets.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from probes.http import request

Snapshot = dict[str, float]  # sample name (with _sum/_count/_total suffixes) -> summed value


@dataclass(frozen=True)
class ServerSeries:
    """The Prometheus series of one engine's server that autotune reads (None: it has none).

    Gauges are sampled for their peak during a window; counters (and histogram ``_sum`` /
    ``_count`` samples) are differenced over it and kept in report.json under their own names.
    """

    path: str = "/metrics"
    kv_cache_usage: str | None = None  # gauge, a fraction of the KV cache in use
    running: str | None = None  # gauge, requests being decoded
    prefill_time_sum: str | None = None  # seconds spent in prefill, summed over requests
    prefill_time_count: str | None = None
    decode_time_sum: str | None = None  # seconds spent decoding, summed over requests
    decode_time_count: str | None = None
    queue_time_sum: str | None = None
    preemptions: str | None = None
    spec_drafts: str | None = None  # speculative decoding: drafts proposed
    spec_draft_tokens: str | None = None  # ... tokens drafted
    spec_accepted_tokens: str | None = None  # ... tokens accepted

    @property
    def gauges(self) -> tuple[str, ...]:
        return tuple(g for g in (self.kv_cache_usage, self.running) if g)

    @property
    def counters(self) -> tuple[str, ...]:
        names = (
            self.prefill_time_sum,
            self.prefill_time_count,
            self.decode_time_sum,
            self.decode_time_count,
            self.queue_time_sum,
            self.preemptions,
            self.spec_drafts,
            self.spec_draft_tokens,
            self.spec_accepted_tokens,
        )
        return tuple(n for n in names if n)


def fetch_snapshot(base_url: str, path: str = "/metrics", timeout_s: float = 5.0) -> Snapshot:
    """One scrape, summed over label sets. Raises OSError/HTTPException when unreachable."""
    status, body = request("GET", base_url.rstrip("/") + path, timeout_s=timeout_s)
    if status != 200:
        raise http.client.HTTPException(f"{path} answered {status}")
    return parse_snapshot(body.decode("utf-8", "replace"))


def parse_snapshot(text: str) -> Snapshot:
    out: Snapshot = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_bucket"):
                continue
            out[s.name] = out.get(s.name, 0.0) + float(s.value)
    return out


def delta(before: Snapshot, after: Snapshot) -> Snapshot:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


class PeakSampler:
    """Polls gauges in a thread and keeps their peaks; use as a context manager."""

    def __init__(
        self,
        base_url: str,
        gauges: tuple[str, ...],
        path: str = "/metrics",
        interval_s: float = 2.0,
    ) -> None:
        self.base_url = base_url
        self.gauges = gauges
        self.path = path
        self.interval_s = interval_s
        self.peaks: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="metrics-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                snap = fetch_snapshot(self.base_url, self.path)
            except (OSError, http.client.HTTPException, ValueError):
                snap = {}
            for g in self.gauges:
                if g in snap:
                    self.peaks[g] = max(self.peaks.get(g, float("-inf")), snap[g])
            self._stop.wait(self.interval_s)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
