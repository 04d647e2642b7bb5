"""The probe's diagnosis of a running server: where the time goes, and what can pay off.

Sweeps, each a few requests on the live server (fresh salts, so no prefix-cache help):

1. TTFT against prompt length at concurrency 1 (output 2 tokens): the prefill rate in
   tokens/s is the inverse of the least-squares slope of TTFT over prompt tokens. After two
   lengths, a longer one whose TTFT would exceed ``PREFILL_MAX_S`` is skipped.
2. TPOT and output tokens/s against concurrency with the user's workload lengths: how decoding
   scales with the batch (1, 4, the user's load, and four times that: the serving model,
   tuner/servemodel/, is calibrated on these records where no trial has measured the build, so
   the sweep reaches batches near those a capacity search meets).
   Then one **mixed** point at the largest batch with a quarter of the output tokens
   (``MIXED_OUTPUT_SHARE``): new prompts join running sequences four times as often, so the
   calibration tells a prompt token's cost in a step beside decoding sequences from a decoding
   sequence's. The closed loop's points alone cannot: they all join prompts and decode in the
   one ratio the workload's lengths set. On a 1-core Xeon (2026-12-05) the probe's fit priced a
   prompt token at 0.21 ms (the concurrency-1 prefill sweep's) where Poisson points beside
   decoding showed 0.39, and predicted the capacity 18 % high; fitted with those points, 4 %.
   Its lengths are spread (``MIXED_SPREAD``): with fixed lengths a closed loop marches in
   lockstep, every prompt joining in one wave, so no step computes one prompt beside
   decoding sequences, and the fit cannot tell what every step with prompts costs (every
   decoding sequence waits for it) from the first-token overhead outside the steps (which
   delays no one else): a lone request's TTFT holds both. Spread, the loop drifts out of step
   within a few requests and prompts join one or two at a time, as under Poisson arrivals.
   On an AMD EPYC (2026-12-06) the lockstep probe's prediction of vLLM's defaults came out
   29-46 % high in two runs of three: one fit put 95 ms in the overhead and none in a prefill
   step, where the steps of its Poisson points showed about 150 ms more for each step with one
   128-token prompt than without. Spread, the next two runs came out 8.9 % and 4.1 % high.
   The spread is less where the shortest output would fall under ``MIXED_SHORTEST`` or the
   longest request pass the model's length (``mixed_spread``), and none where the shortest
   prompt cannot be built.
3. The split of time between prefill and decoding at the user's load: from the client (TTFT
   against E2E - TTFT) and, where the server exposes them, from deltas of
   the engine's prefill and decode time series (vLLM's ``vllm:request_prefill_time_seconds``
   and ``vllm:request_decode_time_seconds``) around it.
4. Roofline context (probes/roofline.py): copy bandwidth and bf16 and float32 matmul
   throughput measured on the device, in a fresh process of its own, the model's weight
   bytes, the last-level cache.

Then probes/verdict.py decides. Everything measured is kept in the result, beside the verdict.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from probes.client import LoadClient, run_load
from probes.metrics import LoadMetrics, summarize
from probes.neighbour import Neighbour
from probes.records import RequestRecord
from probes.roofline import (
    DeviceRates,
    ModelSize,
    RooflineError,
    measure_device_apart,
    model_size,
    parse_cache_bytes,
)
from probes.server_metrics import ServerSeries, delta, fetch_snapshot
from probes.verdict import ProbeVerdict, decide
from probes.workload import (
    SyntheticWorkload,
    Tokenizer,
    Workload,
    WorkloadError,
    prepare_requests,
)

PREFILL_MAX_S = 5.0  # a longer prompt of the prefill sweep is skipped past this TTFT
BATCH_SWEEP_FACTOR = 4  # the decode sweep's largest batch, in multiples of the user's load
MIXED_OUTPUT_SHARE = 0.25  # the mixed point's output tokens, a share of the workload's
MIXED_MIN_OUTPUT = 4  # and at least this many (a decode observation spans 3 or more tokens)
MIXED_SPREAD = 0.5  # the mixed point's lengths, uniform over +-50 % (out of lockstep)
MIXED_SHORTEST = 3  # its shortest output, at least (a decode observation spans 3 or more)


class SweepPoint(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int
    output_tokens: int
    concurrency: int
    n_requests: int
    ttft_ms_p50: float | None
    tpot_ms_p50: float | None
    e2e_ms_p50: float | None
    output_tokens_per_s: float


class Diagnosis(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prefill_sweep: list[SweepPoint]
    prefill_rate_tokens_per_s: float | None
    decode_sweep: list[SweepPoint]
    # the largest batch with short outputs: prompts joining decoding sequences (module docstring)
    mixed_point: SweepPoint | None = None
    load_concurrency: int
    load_metrics: LoadMetrics | None  # the full figures at the user's load
    client_prefill_share: float | None
    server_prefill_share: float | None
    server_split_s: dict[str, float] | None
    device: DeviceRates | None
    model: ModelSize | None
    llc_bytes: int | None
    verdict: ProbeVerdict
    # where the caller kept each sweep point's per-request records (``keep``), by point name
    # (``prefill-<tokens>``, ``decode-c<concurrency>``)
    records_files: dict[str, str] = {}


def _point(m: LoadMetrics, prompt: int, out: int, c: int) -> SweepPoint:
    return SweepPoint(
        prompt_tokens=prompt,
        output_tokens=out,
        concurrency=c,
        n_requests=m.n_requests,
        ttft_ms_p50=m.ttft_ms.p50,
        tpot_ms_p50=m.tpot_ms.p50,
        e2e_ms_p50=m.e2e_ms.p50,
        output_tokens_per_s=m.output_tokens_per_s,
    )


def mixed_spread(in_len: int, short: int, limit: int) -> float:
    """The mixed point's spread: ``MIXED_SPREAD``, less where its shortest output would fall
    under ``MIXED_SHORTEST`` tokens or its longest request (prompt and output) pass ``limit``."""
    spread = min(MIXED_SPREAD, 1.0 - MIXED_SHORTEST / short, limit / (in_len + short) - 1.0)
    return max(0.0, spread)


def prefill_fit(points: list[SweepPoint]) -> tuple[float, float] | None:
    """The least-squares line of TTFT p50 (ms) over prompt tokens: (intercept ms, slope ms per
    token); None with fewer than two prompt lengths."""
    pts = [(float(p.prompt_tokens), p.ttft_ms_p50) for p in points if p.ttft_ms_p50 is not None]
    if len({x for x, _ in pts}) < 2:
        return None
    fit = statistics.linear_regression([x for x, _ in pts], [y for _, y in pts])
    return fit.intercept, fit.slope


def prefill_rate(points: list[SweepPoint]) -> float | None:
    """Tokens/s from the least-squares slope of TTFT (ms) over prompt tokens."""
    fit = prefill_fit(points)
    return 1000.0 / fit[1] if fit and fit[1] > 0 else None


def run_diagnosis(
    client: LoadClient,
    *,
    served_model: str,
    tokenizer: Tokenizer | None,
    workload: Workload,
    load_concurrency: int,
    max_model_len: int | None = None,
    series: ServerSeries | None = None,
    model_dir: str | None = None,
    llc_text: str | None = None,
    device: str = "cpu",
    seed: int = 0,
    ignore_eos: bool = True,
    progress: Callable[[str], None] = lambda m: None,
    measure_roofline: bool = True,
    enough: Callable[[SweepPoint], bool] = lambda p: False,
    keep: Callable[[str, list[RequestRecord]], None] = lambda name, records: None,
    neighbour_pct: float = 0.0,
) -> Diagnosis:
    """Run the sweeps on the server ``client`` points at and decide (module docstring).

    ``enough``: asked with the decode sweep's concurrency-1 point; True ends the decode sweep
    there (the caller has learnt what it needed: no load can meet its SLOs, say), so a server
    that takes seconds a request is not swept at larger batches too. ``keep``: given each
    sweep point's name and per-request records, as measured. ``neighbour_pct``: the sweeps
    run beside a process burning that share of one core (probes/neighbour.py), as the caller's
    load points are measured: on a 1-core Xeon (2026-12-06) a fit on sweeps without it put the
    steps of points measured beside 8 % at 0.75-0.85 of their measured time. The roofline is
    measured without it."""
    seeds = iter(range(seed * 1000 + 1, seed * 1000 + 1000))
    if isinstance(workload, SyntheticWorkload):
        in_len, out_len = workload.input_len, workload.output_len
    else:
        in_len, out_len = 128, 64

    def measure(wl: Workload, n: int, c: int, name: str) -> LoadMetrics:
        reqs = prepare_requests(
            wl, n, model=served_model, tokenizer=tokenizer, seed=next(seeds), ignore_eos=ignore_eos
        )
        res = run_load(client, reqs, concurrency=c)
        keep(name, res.records)
        return summarize(res.records, client_cpu_pct=res.client_cpu_pct)

    neighbour = Neighbour(neighbour_pct)  # one for every sweep, started once (not the roofline)
    with neighbour:
        # 1. Prefill: TTFT against prompt length, one request at a time.
        limit = (max_model_len or 4096) - 16
        lengths = sorted({min(n, limit) for n in (64, 256, 1024)} | {min(in_len, limit)})
        prefill: list[SweepPoint] = []
        if tokenizer is not None:
            for i, n_tok in enumerate(lengths):
                last = prefill[-1] if prefill else None
                if i >= 2 and last is not None and last.ttft_ms_p50 is not None:
                    # TTFT grows at least in proportion to the prompt: skip the longer prompts
                    # where one request would take over PREFILL_MAX_S (emulated bf16 on an
                    # AVX2-only CPU: 25 s for 1,024 tokens, 76 s of the probe for 3 requests).
                    expect_s = last.ttft_ms_p50 / 1000 * n_tok / last.prompt_tokens
                    if expect_s > PREFILL_MAX_S:
                        progress(
                            f"probe: prefill of {', '.join(map(str, lengths[i:]))} tokens skipped "
                            f"(about {expect_s:.0f} s a request or more)"
                        )
                        break
                m = measure(
                    SyntheticWorkload(input_len=n_tok, output_len=2), 3, 1, f"prefill-{n_tok}"
                )
                prefill.append(_point(m, n_tok, 2, 1))
                progress(f"probe: prefill {n_tok:5d} tokens: TTFT p50 {m.ttft_ms.p50 or 0:.0f} ms")
        rate = prefill_rate(prefill)

        # 2. Decode scaling with the user's lengths.
        wl = (
            workload
            if not isinstance(workload, SyntheticWorkload)
            else SyntheticWorkload(input_len=in_len, output_len=out_len)
        )
        load_c = max(1, load_concurrency)
        concs = sorted({1, 4, load_c, BATCH_SWEEP_FACTOR * load_c})
        decode: list[SweepPoint] = []
        split_s: dict[str, float] | None = None
        client_share = server_share = None
        load_metrics: LoadMetrics | None = None
        for c in concs:
            before = _snap(client.base_url, series) if c == load_c else None
            m = measure(wl, max(2 * c, 4), c, f"decode-c{c}")
            decode.append(_point(m, in_len, out_len, c))
            progress(
                f"probe: decode at c={c:<3d} TPOT p50 {m.tpot_ms.p50 or 0:.1f} ms, "
                f"{m.output_tokens_per_s:.0f} tokens/s"
            )
            if c == 1 and c != load_c and enough(decode[-1]):
                progress("probe: decode at larger batches skipped (one request alone says enough)")
                break
            if c == load_c:
                load_metrics = m
                # 3. The split at the user's load.
                if m.e2e_ms.mean and m.ttft_ms.mean is not None:
                    client_share = m.ttft_ms.mean / m.e2e_ms.mean
                after = _snap(client.base_url, series)
                if before is not None and after is not None:
                    d = delta(before, after)
                    pre = d.get(series.prefill_time_sum or "") if series else None
                    dec = d.get(series.decode_time_sum or "") if series else None
                    if pre is not None and dec is not None and pre + dec > 0:
                        split_s = {"prefill_s": pre, "decode_s": dec}
                        server_share = pre / (pre + dec)

        mixed: SweepPoint | None = None
        if decode and decode[-1].concurrency > 1 and isinstance(wl, SyntheticWorkload):
            c = decode[-1].concurrency
            short = max(MIXED_MIN_OUTPUT, round(out_len * MIXED_OUTPUT_SHARE))
            if short < out_len:
                spread = mixed_spread(in_len, short, limit)
                try:
                    m = measure(
                        SyntheticWorkload(input_len=in_len, output_len=short, spread=spread),
                        4 * c, c, f"mixed-c{c}",
                    )  # fmt: skip
                except WorkloadError:  # its shortest prompt cannot be built: fixed lengths
                    spread = 0.0
                    m = measure(
                        SyntheticWorkload(input_len=in_len, output_len=short), 4 * c, c,
                        f"mixed-c{c}",
                    )  # fmt: skip
                mixed = _point(m, in_len, short, c)
                how = f"+-{spread:.0%}" if spread else "fixed lengths"
                progress(
                    f"probe: mixed at c={c:<3d} ({short} output tokens, {how}) TTFT p50 "
                    f"{m.ttft_ms.p50 or 0:.0f} ms, TPOT p50 {m.tpot_ms.p50 or 0:.1f} ms"
                )

    # 4. Roofline.
    size = model_size(model_dir) if model_dir else None
    llc = parse_cache_bytes(llc_text)
    rates = None
    if measure_roofline:
        try:
            rates = measure_device_apart(device, llc_bytes=llc)
        except RooflineError as exc:
            progress(f"probe: {exc}; the stages are planned without the roofline")
    if rates is not None:
        fp32 = (
            f", float32 {rates.fp32_matmul_tflops * 1000:.0f}"
            if rates.fp32_matmul_tflops is not None
            else ""
        )
        progress(
            f"probe: {device} copy {rates.memory_bandwidth_gbps:.1f} GB/s, bf16 matmul "
            f"{rates.matmul_tflops * 1000:.0f} GFLOP/s{fp32}"
        )
    tpot1 = next((p.tpot_ms_p50 for p in decode if p.concurrency == 1), None)
    # The verdict weighs batches up to the user's load (the larger one is for calibration).
    swept = [p for p in decode if p.concurrency <= load_c]
    first, last = swept[0], swept[-1]
    if client_share is None and load_metrics is None and first.ttft_ms_p50 and first.e2e_ms_p50:
        # The sweep ended at one request alone (``enough``): the split is that request's.
        client_share = first.ttft_ms_p50 / first.e2e_ms_p50
    gain = (
        last.output_tokens_per_s / first.output_tokens_per_s
        if first.output_tokens_per_s > 0 and len(swept) > 1
        else None
    )
    growth = (
        last.tpot_ms_p50 / first.tpot_ms_p50
        if first.tpot_ms_p50 and last.tpot_ms_p50 and len(swept) > 1
        else None
    )
    share, source = (
        (server_share, "server") if server_share is not None else (client_share or 0.0, "client")
    )
    verdict = decide(
        prefill_share=share,
        split_source=source,  # type: ignore[arg-type]
        tpot_c1_ms=tpot1,
        weight_bytes=size.weight_bytes if size else None,
        bandwidth_gbps=rates.memory_bandwidth_gbps if rates else None,
        llc_bytes=llc,
        batching_gain=gain,
        tpot_growth=growth,
        bf16_over_fp32=rates.bf16_over_fp32 if rates else None,
    )
    return Diagnosis(
        prefill_sweep=prefill,
        prefill_rate_tokens_per_s=rate,
        decode_sweep=decode,
        mixed_point=mixed,
        load_concurrency=load_c,
        load_metrics=load_metrics,
        client_prefill_share=client_share,
        server_prefill_share=server_share,
        server_split_s=split_s,
        device=rates,
        model=size,
        llc_bytes=llc,
        verdict=verdict,
    )


def _snap(base_url: str, series: ServerSeries | None) -> dict[str, Any] | None:
    if series is None:
        return None
    try:
        return fetch_snapshot(base_url, series.path)
    except Exception:
        return None
