"""One load point on a running server: warm-up, fresh requests, the server's series, the verdict.

``PointMeasurer`` owns what measuring a point takes and nothing else: the load client, the load
axis, the workload and its tokenizer, a fresh seed per point (so a fresh salt: no prefix-cache
reuse across points), and the engine's own Prometheus series (``ServerSeries``: no engine's
metric names live here). The verdict of an open-loop point judges the rate as if it had been held
for probes.drift.HORIZON_S, so a queue still growing when the point ended counts against it.

An open-loop point's arrivals are the workload's own process at the point's rate
(``probes.workload.rate_schedule``): Poisson (the load client's own schedule), gamma gaps, or a
trace replayed at the time scale whose rate that is (rate / the trace's own mean rate), so the
capacity search keeps one axis, requests/s, for every workload.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from probes.client import LoadClient, LoadResult, run_load
from probes.metrics import LoadMetrics, Verdict, summarize
from probes.neighbour import Neighbour
from probes.records import RequestRecord
from probes.sequential import decided, shortfall
from probes.server_metrics import PeakSampler, ServerSeries, Snapshot, delta, fetch_snapshot
from probes.slo import SLOSet
from probes.workload import (
    PreparedRequest,
    Tokenizer,
    Workload,
    prepare_requests,
    rate_schedule,
)
from tuner.engines.base import RunningServer
from tuner.run import stop
from tuner.scoring.capacity import LoadAxis
from tuner.scoring.judge import Judged, judge_point, score_window

WARMUP_RATE_S = 8.0  # open loop: about this many seconds of arrivals are warm-up
WARMUP_MAX = 64


@dataclass(frozen=True)
class Measured:
    """One point: its summary (as measured), its records, and the server's counter deltas."""

    metrics: LoadMetrics
    records: list[RequestRecord]
    server: dict[str, float] | None


class PointMeasurer:
    """Measures load points on whichever server it is pointed at.

    Args:
        client: the load client (its base URL is set per server).
        axis: the load model (concurrency or rate).
        slos, max_error_rate: what a point is judged against.
        workload, tokenizer, ignore_eos: what the requests are.
        series: the engine's Prometheus series, or None where it has none.
        seeds: a fresh seed per call.
        spent: told ("warmup" | "measure", seconds) after each.
        neighbour_pct: a CPU neighbour burning this share of one core during every warm-up
            and point (probes/neighbour.py); 0: none.
    """

    def __init__(
        self,
        *,
        client: LoadClient,
        axis: LoadAxis,
        slos: SLOSet,
        max_error_rate: float,
        workload: Workload,
        tokenizer: Tokenizer | None,
        ignore_eos: bool,
        series: ServerSeries | None,
        seeds: Callable[[], int],
        spent: Callable[[str, float], None] = lambda phase, s: None,
        neighbour_pct: float = 0.0,
    ) -> None:
        self.client = client
        self.axis = axis
        self.slos = slos
        self.max_error_rate = max_error_rate
        self.workload = workload
        self.tokenizer = tokenizer
        self.ignore_eos = ignore_eos
        self.series = series
        self.seeds = seeds
        self.spent = spent
        self.neighbour_pct = neighbour_pct

    def requests(self, server: RunningServer, n: int, model: str) -> list[PreparedRequest]:
        return prepare_requests(
            self.workload,
            n,
            model=server.served_model or model,
            tokenizer=self.tokenizer,
            seed=self.seeds(),
            ignore_eos=self.ignore_eos,
        )

    def warmup(self, server: RunningServer, x: float, model: str) -> float:
        """Requests sent and thrown away after start-up (compilation, cache allocation), at
        the load about to be measured: the same concurrency, or open-loop arrivals at the same
        rate (never all at once) for about WARMUP_RATE_S. Returns the seconds it took."""
        if self.axis.kind == "concurrency":
            n = max(4, min(int(x), 32))
            dt, _ = self._thrown_away(server, n, n, model, concurrency=min(int(x), n))
        else:
            n = max(4, min(math.ceil(WARMUP_RATE_S * x), WARMUP_MAX))
            dt, _ = self._thrown_away(server, n, n, model, **self._load(x), seed=self.seeds())
        return dt

    def _load(self, x: float) -> dict[str, Any]:
        """The load client's arguments for load ``x``: a concurrency, or a rate with the
        workload's own arrival schedule where it has one (Poisson's is the client's own)."""
        if self.axis.kind == "concurrency":
            return {"concurrency": int(x)}
        schedule = rate_schedule(self.workload, x)
        return {"rate_rps": x} if schedule is None else {"rate_rps": x, "schedule": schedule}

    def warmup_closed(self, server: RunningServer, c: int, model: str) -> tuple[float, float]:
        """A closed-loop warm-up of ``c`` clients, three requests each, thrown away like any
        warm-up; returns the seconds it took and the requests/s the last two rounds completed
        (the first compiles the batch sizes; 0 where none completed): a first guess at the
        rate this configuration sustains."""
        c = max(1, c)
        dt, res = self._thrown_away(server, 3 * c, c, model, concurrency=c)
        done = sum(1 for r in res.records if r.ok)
        return dt, done / res.wall_s if res.wall_s > 0 else 0.0

    def _thrown_away(
        self, server: RunningServer, n: int, first: int, model: str, **load: Any
    ) -> tuple[float, LoadResult]:
        """``n`` requests of a warm-up, the ``first`` of them not even timed; the seconds it
        took (counted as warm-up) and the rest's records."""
        t0 = time.monotonic()
        self.client.base_url = server.base_url
        with Neighbour(self.neighbour_pct):
            res = run_load(self.client, self.requests(server, n, model), warmup=first, **load)
        dt = time.monotonic() - t0
        self.spent("warmup", dt)
        return dt, res

    def measure(
        self,
        server: RunningServer,
        x: float,
        n: int,
        model: str,
        room: int = 0,
        cut: bool = False,
        cut_skip: int = 0,
    ) -> Measured:
        """One load point: ``n`` fresh requests at concurrency or rate ``x``; with ``room``, up
        to that many more at the same load, as many as the SLOs' percentiles still need when
        the ``n`` run out, with the requests over their limits counted
        (probes/sequential.py). No more once a first Ctrl-C came in. With ``cut``, no more
        either once the requests known to be over a limit already break it for all of them
        (``sequential.decided``): a search point far over a capacity took 45-73 s whole on
        the Xeon, its verdict known after 14-33 s. ``cut_skip``: the first requests that do
        not count towards that decision (``sequential.decided``'s ``skip_first``)."""
        reqs = self.requests(server, n + max(0, room), model)
        self.client.base_url = server.base_url
        series = self.series
        before = self._snapshot(server) if series else None
        t0 = time.monotonic()
        load = self._load(x)
        if room > 0:
            slos = self.slos

            def more(records: list[RequestRecord], now: float) -> int:
                return 0 if stop.STOP.requested else shortfall(records, slos, now)

            load.update(base=n, more=more)
        if cut:
            load.update(decided=partial(decided, self.slos, n + max(0, room), skip_first=cut_skip))
        peaks: dict[str, float] = {}
        with Neighbour(self.neighbour_pct):
            if series and series.gauges:
                with PeakSampler(server.base_url, series.gauges, series.path) as sampler:
                    res = run_load(self.client, reqs, **load, seed=self.seeds())
                peaks = sampler.peaks
            else:
                res = run_load(self.client, reqs, **load, seed=self.seeds())
        self.spent("measure", time.monotonic() - t0)
        metrics = summarize(res.records, self.slos, res.client_cpu_pct)
        if series and series.kv_cache_usage in peaks:
            metrics.kv_cache_peak_pct = 100.0 * peaks[series.kv_cache_usage]
        server_delta = None
        if series and before is not None:
            after = self._snapshot(server)
            if after:
                d = delta(before, after)
                server_delta = {k: d[k] for k in series.counters if k in d}
                acceptance(metrics, server_delta, series)
        return Measured(metrics, res.records, server_delta)

    def judge(self, m: Measured) -> Judged:
        """A point's verdict (``judge_point``)."""
        return judge_point(m.metrics, m.records, self.axis.kind, self.slos, self.max_error_rate)

    def score_window(self, x: float, n: int, metrics: LoadMetrics) -> float:
        """The window a point's score divides its output tokens by (``score_window``)."""
        return score_window(self.axis.kind, x, n, metrics)

    def _snapshot(self, server: RunningServer) -> Snapshot | None:
        assert self.series is not None
        try:
            return fetch_snapshot(server.base_url, self.series.path)
        except Exception:
            return None


def acceptance(metrics: LoadMetrics, d: dict[str, float], series: ServerSeries) -> None:
    """Speculative decoding's acceptance over one window (MEASUREMENT.md), where it ran."""
    drafts = d.get(series.spec_drafts or "", 0.0)
    drafted = d.get(series.spec_draft_tokens or "", 0.0)
    accepted = d.get(series.spec_accepted_tokens or "", 0.0)
    if drafted > 0:
        metrics.acceptance_rate = accepted / drafted
    if drafts > 0:
        metrics.mean_acceptance_length = 1.0 + accepted / drafts


def point_line(m: LoadMetrics, v: Verdict) -> str:
    """One progress line for a measured point."""

    def ms(x: float | None) -> str:
        return "-" if x is None else (f"{x / 1000:.2f}s" if x >= 1000 else f"{x:.0f}ms")

    state = "holds" if v.holds else "breaks SLO"
    prov = " (provisional)" if v.provisional and v.holds else ""
    growing = (
        f" | queue growing: TTFT +{m.ttft_drift_ms_per_s:.0f} ms/s, judged "
        f"+{ms(m.projected_wait_ms)}"
        if m.projected_wait_ms
        else ""
    )
    return (
        f"{m.output_tokens_per_s:7.1f} tok/s | TTFT p50 {ms(m.ttft_ms.p50)} p99 {ms(m.ttft_ms.p99)}"
        f" | TPOT p50 {ms(m.tpot_ms.p50)} p99 {ms(m.tpot_ms.p99)} | n={m.n_requests}"
        f" err={m.n_failed}{growing} | {state}{prov}"
    )
