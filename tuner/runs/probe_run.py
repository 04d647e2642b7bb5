"""``autotune probe``: measure one load on a server (started here, or any running endpoint), and
with ``diagnose`` where the time goes (probes/diagnose.py).

With ``diagnose``, the folder also keeps every sweep point's per-request records and the result
(``probe.json``): a probe folder, from which ``autotune compare`` predicts this machine's
capacity (tuner/runs/probe_predict.py) without a tuning run here.

With ``model``, the engine is started with its defaults, or with ``params`` (knob values of the
engine's search space, validated and rendered like a trial's), and stopped by its process group
at the end. With ``endpoint``, nothing is started: the server's root URL (with or without
``/v1``) and its served model name are enough. Warm-up requests are always sent and discarded.

Every workload but a file of written prompts is built with the model's tokenizer (checked before
anything starts). An open loop follows the workload's own arrivals (gamma gaps, a trace's times
at time scale rate / its own mean rate); a trace given no load replays at its spec's ``scale``.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from probes.arrivals import Schedule
from probes.client import LoadClient, run_load
from probes.describe import describe, sent
from probes.diagnose import Diagnosis, run_diagnosis
from probes.metrics import LoadMetrics, Verdict, summarize
from probes.neighbour import Neighbour
from probes.sequential import shortfall
from probes.server_metrics import ServerSeries
from probes.slo import SLOSet
from probes.workload import (
    FileWorkload,
    Tokenizer,
    TraceWorkload,
    Workload,
    WorkloadError,
    check_buildable,
    needs_tokenizer,
    prepare_requests,
    rate_schedule,
    trace_scale,
)
from tuner.engines import UnknownEngineError, get_engine
from tuner.engines.base import Engine, EngineStartError, LaunchSpec, ServerProcess, free_port
from tuner.engines.endpoint import EndpointEngine, EndpointError, attach
from tuner.engines.hardware import Hardware, detect_hardware, template_context
from tuner.engines.models import ModelError, load_tokenizer, resolve_model
from tuner.options import PROBE_REQUESTS, PROBE_WARMUP, RESULTS, auto_neighbour, default
from tuner.report.schema import dump_json, write_atomic
from tuner.scoring.judge import judge_point
from tuner.spaces.launch import launch_settings
from tuner.spaces.space import SpaceError, load_space, space_path
from tuner.storage.records import keep_records

PROBE_FILE = "probe.json"  # a --diagnose probe's result, in its folder beside its records


class ProbeError(RuntimeError):
    """A probe that cannot run (unreachable endpoint, bad parameter); the message says why."""


class ProbeResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    target: dict[str, Any]
    workload: str
    load: dict[str, float]
    metrics: LoadMetrics
    startup_s: float | None = None
    warmup_s: float
    hardware: Hardware
    diagnosis: Diagnosis | None = None
    # With --slo: the point judged as a tuning run judges one (the percentile's sample-size
    # rule included), so a probe at a recommended load is that load's confirmation.
    slo: list[str] = []
    verdict: Verdict | None = None
    # The workload and what the measured requests sent (probes.describe)
    workload_sent: dict[str, Any] | None = None
    # the CPU neighbour the load point and the sweeps were measured beside (% of one core)
    neighbour_cpu_pct: float = 0.0


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """``name=value`` pairs; values are read as JSON where they parse (numbers, true/false),
    and ``True``/``False`` as the booleans autotune's own recommendation line prints."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ProbeError(f"--param {pair!r} is not name=value")
        try:
            out[name.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[name.strip()] = {"True": True, "False": False}.get(value.strip(), value)
    return out


def _weights_folder(path: str | None) -> str | None:
    """A local folder holding safetensors weights (for the roofline), else None."""
    if path and Path(path).is_dir() and any(Path(path).glob("*.safetensors")):
        return path
    return None


def _tokenizer(path: str | None) -> Tokenizer | None:
    if not path:
        return None
    try:
        return load_tokenizer(path)
    except ModelError as exc:
        raise ProbeError(str(exc)) from None


def _launch_spec(
    model: str, engine_name: str, params: dict[str, Any], hw: Hardware
) -> tuple[Engine, str, LaunchSpec]:
    """The engine, the model folder and the launch command, all checked before anything starts.

    Raises:
        ProbeError: an unknown engine or model, a bad search space or knob value.
    """
    try:
        engine = get_engine(engine_name)
        resolved = resolve_model(model)
        space = load_space(space_path(engine.name, hw.device))
        # What every launch sets, what the baseline needs to start here, then the given knobs
        # (tuner/spaces/launch.py: the builder tuning uses, so a knob never passes a baseline flag
        # twice).
        args, env = launch_settings(space, params, template_context(hw))
    except (UnknownEngineError, ModelError, SpaceError) as exc:
        raise ProbeError(str(exc)) from None
    return engine, resolved.path, engine.launch_spec(resolved.path, args, env, free_port())


def _arrivals(
    workload: Workload, concurrency: int | None, rate_rps: float | None
) -> tuple[float | None, Schedule | None]:
    """The open loop's rate and the workload's own arrival schedule at it (None: Poisson);
    a trace given no load replays at its spec's time scale.

    Raises:
        ProbeError: a workload with its own arrivals in a closed loop, or a trace with no rate.
    """
    own = isinstance(workload, TraceWorkload) or (
        not isinstance(workload, FileWorkload) and workload.arrivals is not None
    )
    if own and concurrency is not None:
        raise ProbeError(
            "--concurrency sends each request when a client's last one ends, which ignores the "
            "workload's own arrivals; give --rate (a trace: or no load, for its spec's scale)"
        )
    if isinstance(workload, TraceWorkload) and rate_rps is None:
        rate_rps = workload.scale * (workload.rate_rps or 0.0)  # no rate: trace_scale says so
    if rate_rps is None:
        return None, None
    try:
        return rate_rps, rate_schedule(workload, rate_rps)
    except WorkloadError as exc:
        raise ProbeError(str(exc)) from None


def _check_buildable(workload: Workload, tok: Tokenizer | None) -> None:
    try:
        check_buildable(workload, tok)
    except WorkloadError as exc:
        raise ProbeError(str(exc)) from None


@contextlib.contextmanager
def _server(
    launch: tuple[Engine, str, LaunchSpec] | None,
    endpoint: str | None,
    served_model: str | None,
    out_dir: Path,
    say: Callable[[str], None],
) -> Iterator[tuple[str, str, str | None, float | None, bool, ServerSeries | None]]:
    """Yields (base_url, served model, model folder, start-up s, ignore_eos ok, its series)."""
    if launch is None:
        try:
            a = attach(endpoint or "", served_model)
        except EndpointError as exc:
            raise ProbeError(str(exc)) from None
        yield (
            a.base_url,
            a.served_model,
            a.local_root or _weights_folder(a.served_model),
            None,
            a.ignore_eos,
            EndpointEngine.series,
        )
        return
    engine, path, spec = launch
    args = spec.config_args
    say(f"probe: starting {engine.name} ({' '.join(args) or 'defaults'})")
    with ServerProcess(spec, out_dir / "server.log", classify=engine.classify_failure) as srv:
        try:
            startup = srv.wait_ready()
        except EngineStartError as exc:
            raise ProbeError(f"{engine.name} failed to start: {exc}") from None
        say(f"probe: ready in {startup:.0f} s")
        yield (
            srv.base_url,
            srv.served_model or path,
            path,
            startup,
            engine.supports_ignore_eos,
            engine.series,
        )


def probe(
    *,
    workload: Workload,
    model: str | None = None,
    engine: str = "vllm",
    params: dict[str, Any] | None = None,
    endpoint: str | None = None,
    served_model: str | None = None,
    concurrency: int | None = None,
    rate_rps: float | None = None,
    requests: int = PROBE_REQUESTS,
    warmup: int = PROBE_WARMUP,
    tokenizer: str | None = None,
    diagnose: bool = False,
    out_dir: Path = RESULTS / "probe",
    seed: int | None = None,
    slos: SLOSet | None = None,
    max_error_rate: float = default("max_error_rate"),
    grow: bool = True,
    progress: Callable[[str], None] = lambda m: None,
    neighbour_pct: float | None = None,
) -> ProbeResult:
    """Measure one load (and, with ``diagnose``, the sweeps); see the module docstring. With
    latency SLOs and ``grow``, the point sends up to ``requests`` more where requests over a
    limit leave the percentile's sample short (probes/sequential.py). ``neighbour_pct``: the
    load point and the sweeps are measured beside a process burning that share of one core
    (probes/neighbour.py); None: what a tuning run on this machine decides
    (``options.auto_neighbour``), so that a probe compared with runs, or calibrating the model
    that predicts them, was measured as their points were.

    Raises:
        ProbeError: bad parameters, an unreachable endpoint, a tokenizer that cannot load.
    """
    if (model is None) == (endpoint is None):
        raise ProbeError("give either a model to start or an endpoint to probe")
    rate_rps, schedule = _arrivals(workload, concurrency, rate_rps)
    if concurrency is None and rate_rps is None:
        concurrency = 1
    if isinstance(workload, TraceWorkload) and rate_rps is not None:
        progress(
            f"probe: trace {workload.path} replayed at time scale "
            f"{trace_scale(workload, rate_rps):.4g} ({rate_rps:.4g} requests/s)"
        )
    seed = int(time.time()) if seed is None else seed
    hw = detect_hardware()
    launch = _launch_spec(model, engine, params or {}, hw) if model is not None else None
    built = needs_tokenizer(workload)
    tok = None
    if launch is not None:  # the tokenizer and the prompts are checked before the start
        tok = _tokenizer(tokenizer or launch[1]) if built else _tokenizer(tokenizer)
        _check_buildable(workload, tok)
    if neighbour_pct is None:
        cores = len(os.sched_getaffinity(0))
        neighbour_pct, why = auto_neighbour(launch is not None, cores, "the probe is")
        if why:
            progress(why)
    out_dir.mkdir(parents=True, exist_ok=True)
    with _server(launch, endpoint, served_model, out_dir, progress) as (
        url,
        name,
        model_dir,
        startup,
        ignore_eos,
        series,
    ):
        if launch is None:
            tok = _tokenizer(tokenizer or model_dir or name) if built else _tokenizer(tokenizer)
            _check_buildable(workload, tok)
        client = LoadClient(url)
        t0 = time.monotonic()
        room = requests if grow and slos is not None and slos.latency else 0
        reqs = prepare_requests(
            workload,
            warmup + requests + room,
            model=name,
            tokenizer=tok,
            seed=seed,
            ignore_eos=ignore_eos,
        )
        judged_by = slos
        more = (lambda recs, now: shortfall(recs, judged_by, now)) if judged_by and room else None
        with Neighbour(neighbour_pct):
            res = run_load(
                client,
                reqs,
                concurrency=concurrency,
                rate_rps=rate_rps,
                warmup=warmup,
                seed=seed,
                base=requests if more else None,
                more=more,
                schedule=schedule,
            )
        if len(res.records) > requests:
            progress(
                f"probe: grown from {requests} to {len(res.records)} requests, as the "
                "percentile needs with the requests over its limit"
            )
        warm_s = (time.monotonic() - t0) - res.wall_s
        metrics = summarize(res.records, slos, client_cpu_pct=res.client_cpu_pct)
        verdict = None
        if slos is not None and slos.latency:
            kind = "rate" if rate_rps is not None else "concurrency"
            verdict = judge_point(metrics, res.records, kind, slos, max_error_rate).verdict
        progress(f"probe: measured {metrics.n_requests} requests in {time.monotonic() - t0:.0f} s")
        diagnosis = None
        kept: dict[str, str] = {}
        if diagnose:
            keep = partial(keep_records, out_dir / "records", kept)
            keep("load", res.records)
            diagnosis = run_diagnosis(
                client,
                served_model=name,
                tokenizer=tok,
                workload=workload,
                load_concurrency=concurrency or 8,
                model_dir=model_dir or _weights_folder(tokenizer),
                llc_text=hw.l3_cache,
                device=hw.device,
                seed=seed,
                ignore_eos=ignore_eos,
                progress=progress,
                series=series,
                keep=keep,
                neighbour_pct=neighbour_pct,
            )
            diagnosis.records_files = kept
    load: dict[str, float] = (
        {"concurrency": concurrency} if concurrency is not None else {"rate_rps": rate_rps or 0}
    )
    result = ProbeResult(
        target={
            "model": model,
            "engine": engine if model else None,
            "params": params or {},
            "endpoint": url,
            "served_model": name,
            "model_dir": model_dir,
        },
        workload=workload.label,
        load=load,
        metrics=metrics,
        startup_s=startup,
        warmup_s=warm_s,
        hardware=hw,
        diagnosis=diagnosis,
        slo=slos.labels if slos is not None else [],
        verdict=verdict,
        workload_sent=describe(workload, sent(res.records)),
        neighbour_cpu_pct=neighbour_pct,
    )
    if diagnose:  # a probe folder: what autotune compare predicts this machine from
        write_atomic(out_dir / PROBE_FILE, dump_json(result))
    return result
