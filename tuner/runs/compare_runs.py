"""Runs compared across machines, with cost (``autotune compare RUN_DIR... --price NAME=USD/h``).

Per run: the machine (its hardware block), the engine and its version, the best output tokens/s
under the common SLO with the configuration that achieves it, TTFT and time per output token
apart, and with a price per hour the cost of a million output tokens
(price / 3600 / tokens per s x 1e6) and the output tokens a dollar buys.

Runs compare only on the same model, workload and load model; where those differ the comparison
says so on its first line. Where their SLOs differ, every run is re-scored from its recorded
requests (tuner/runs/rescore.py) under the strictest common SLO (each metric and percentile any run
names, at the tightest limit named for it) before it is compared; a re-scored figure is a search
figure and is marked unconfirmed. Where the SLOs agree, each run's confirmed recommendation is
its figure.

A probe folder (``autotune probe --model ... --diagnose`` on another machine) may stand among
the runs: its machine's capacity is then predicted from its probe alone
(tuner/runs/probe_predict.py)
under the runs' common SLO, error limit and load model, and its row is marked predicted, with
the prediction's interval, beside the measured ones. At least one run is measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from probes.slo import LatencySLO, SLOSet
from tuner.report.schema import Report, SLOReport
from tuner.report.text import load_text
from tuner.runs.predict_run import PredictError
from tuner.runs.probe_predict import predict_probe, read_probe
from tuner.runs.probe_run import ProbeResult
from tuner.runs.rescore import rescore


class CompareError(Exception):
    """Runs that cannot be compared as asked (an unknown price name, say)."""


class RunRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str  # the run folder's name
    run_id: str
    machine: str  # hostname: the hardware label
    cpu_count: int
    gpus: str
    engine: str
    tokens_per_s: float | None
    load: str  # where it holds that, e.g. "10.5 req/s"
    ttft_ms: float | None
    tpot_ms: float | None
    confirmed: bool  # a confirmed recommendation (False: a re-scored search figure)
    meets_slo: bool
    provisional: bool = False  # confirmed with fewer requests than the percentile needs
    config: str
    # "predicted": from a probe folder, by the serving model (``interval``: its 90 % interval)
    figure: Literal["measured", "predicted"] = "measured"
    interval: tuple[float, float | None] | None = None
    predicted_capacity: float | None = None  # the capacity a predicted row's figure is taken at
    price_per_hour: float | None = None
    usd_per_million_tokens: float | None = None
    tokens_per_usd: float | None = None


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    slo: list[SLOReport]
    rescored: bool  # whether the runs were re-scored to the common SLO
    warnings: list[str]
    rows: list[RunRow]
    ttft_percentile: int
    tpot_percentile: int


def parse_prices(items: list[str]) -> dict[str, float]:
    """``NAME=USD_PER_HOUR`` pairs."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            price = float(value.removeprefix("$"))
        except ValueError:
            price = -1.0
        if not sep or not name or price <= 0:
            raise CompareError(f"--price {item!r}: give NAME=USD_PER_HOUR, e.g. gpu-box=2.5")
        out[name] = price
    return out


def common_slo(reports: list[Report]) -> list[SLOReport]:
    """Every (metric, percentile) any run names, at the tightest limit named for it."""
    tight: dict[tuple[str, int], float] = {}
    for r in reports:
        for s in r.slo:
            key = (s.metric, s.percentile)
            tight[key] = min(tight.get(key, s.limit_ms), s.limit_ms)
    return [SLOReport(metric=m, percentile=p, limit_ms=v) for (m, p), v in sorted(tight.items())]


def _key(slos: list[SLOReport]) -> set[tuple[str, int, float]]:
    return {(s.metric, s.percentile, s.limit_ms) for s in slos}


def _workload(r: Report) -> str:
    """A synthetic workload by its spec; a file by its name and its number of items (the same
    file copied to another machine compares)."""
    w = r.workload
    if w.get("spec"):
        return str(w["spec"])
    return f"{Path(str(w.get('path', ''))).name} ({w.get('n_items')} items)"


def _warnings(reports: list[Report], names: list[str]) -> list[str]:
    out = []
    for what, of in (
        ("model", lambda r: Path(r.model_path).name),
        ("workload", _workload),
        ("load model", lambda r: r.load.get("model")),
        ("error-rate limit", lambda r: r.max_error_rate),
    ):
        seen = {str(of(r)) for r in reports}
        if len(seen) > 1:
            each = ", ".join(f"{n}: {of(r)}" for n, r in zip(names, reports, strict=True))
            out.append(f"NOT COMPARABLE: the runs differ in {what} ({each})")
    return out


def _probe_warnings(name: str, probe: ProbeResult, ref: Report) -> list[str]:
    """Where a probe folder's model or workload is not the runs' (its prediction uses the
    probe's lengths and the probed model's step times)."""
    out = []
    model = Path(str(probe.target.get("model_dir") or probe.target.get("model") or "")).name
    if model != Path(ref.model_path).name:
        out.append(f"NOT COMPARABLE: {name} probed model {model}, the runs {ref.model_path}")
    if probe.workload != _workload(ref):
        out.append(
            f"NOT COMPARABLE: {name} probed workload {probe.workload}, the runs {_workload(ref)}"
        )
    return out


def _params(r: Report, params: dict[str, Any]) -> str:
    changed = {k: v for k, v in params.items() if r.knob_defaults.get(k, object()) != v}
    return ", ".join(f"{k}={v}" for k, v in changed.items()) or "the engine's defaults"


def _row(name: str, r: Report, pt: int, pp: int) -> RunRow:
    base: dict[str, Any] = {
        "name": name,
        "run_id": r.run_id,
        "machine": f"{r.hardware.hostname}: {r.hardware.label}",
        "cpu_count": r.hardware.cpu_count,
        "gpus": ", ".join(g.name for g in r.hardware.gpus) or "none",
        "engine": r.engine_version,
    }
    trials = {t.number: t for t in [r.baseline, *r.trials] if t is not None}
    rec = r.recommended
    if rec is not None:
        m = rec.metrics
        return RunRow(
            **base,
            tokens_per_s=m.output_tokens_per_s,
            load=load_text(rec.load),
            ttft_ms=m.ttft_ms.at(pt),
            tpot_ms=m.tpot_ms.at(pp),
            confirmed=True,
            meets_slo=rec.meets_slo,
            provisional=rec.provisional,
            config=_params(r, rec.params),
        )
    x = r.rescored
    t = trials.get(x.best_trial) if x is not None and x.best_trial is not None else None
    if t is None or t.metrics is None:
        return RunRow(
            **base, tokens_per_s=None, load="-", ttft_ms=None, tpot_ms=None, confirmed=False,
            meets_slo=False, config="nothing met the SLOs",
        )  # fmt: skip
    return RunRow(
        **base,
        tokens_per_s=t.score_tokens_per_s,
        load=load_text(t.load),
        ttft_ms=t.metrics.ttft_ms.at(pt),
        tpot_ms=t.metrics.tpot_ms.at(pp),
        confirmed=False,
        meets_slo=False,
        config=_params(r, t.params),
    )


def _price(row: RunRow, prices: dict[str, float]) -> RunRow:
    price = next(
        (prices[k] for k in (row.name, row.run_id, row.machine.split(":")[0]) if k in prices),
        None,
    )
    if price is None:
        return row
    tok = row.tokens_per_s
    return row.model_copy(
        update={
            "price_per_hour": price,
            "usd_per_million_tokens": price / 3600.0 / tok * 1e6 if tok else None,
            "tokens_per_usd": tok * 3600.0 / price if tok else None,
        }
    )


def _predicted_row(
    folder: Path,
    probe: ProbeResult,
    slos: SLOSet,
    ref: Report,
    pt: int,
    pp: int,
) -> RunRow:
    """A probe folder's row: at the load a run would claim, as the measured rows are."""
    kind = str(ref.load.get("model", "rate"))
    margin = float(ref.options.get("load_margin", 0.15))
    try:
        f = predict_probe(folder, probe, slos, ref.max_error_rate, kind, margin)
    except PredictError as exc:
        raise CompareError(str(exc)) from None
    p, at, share = f.capacity, f.claim, f.claim_share
    hw = probe.hardware
    params = probe.target.get("params") or {}
    key = "rate_rps" if kind == "rate" else "concurrency"
    return RunRow(
        name=folder.name,
        run_id=folder.name,
        machine=f"{hw.hostname}: {hw.label}",
        cpu_count=hw.cpu_count,
        gpus=", ".join(g.name for g in hw.gpus) or "none",
        engine=str(probe.target.get("engine")),
        tokens_per_s=at.output_tokens_per_s if at is not None else None,
        load=load_text({key: at.load}) if at is not None else "-",
        ttft_ms=_at_percentile(at.ttft_ms_p50, at.ttft_ms_p99, pt) if at else None,
        tpot_ms=_at_percentile(at.tpot_ms_p50, at.tpot_ms_p99, pp) if at else None,
        confirmed=False,
        meets_slo=at is not None and at.holds,
        config=", ".join(f"{k}={v}" for k, v in params.items()) or "the engine's defaults",
        figure="predicted",
        interval=(p.low * share, p.high * share if p.high is not None else None),
        predicted_capacity=p.tokens_per_s if p.load is not None else None,
    )


def _at_percentile(p50: float | None, p99: float | None, percentile: int) -> float | None:
    return {50: p50, 99: p99}.get(percentile)


def compare(run_dirs: list[Path], prices: dict[str, float]) -> Comparison:
    """The runs (and probe folders, predicted) side by side under one SLO, priced where a
    price names them.

    Raises:
        CompareError: a price names no run, a folder is neither a run nor a probe, no run is
            measured, a run cannot be re-scored or a probe cannot be predicted.
    """
    probes: dict[Path, ProbeResult] = {}
    for d in run_dirs:
        if not (d / "report.json").is_file():
            if (found := read_probe(d)) is None:
                raise CompareError(
                    f"{d} is neither a run folder (report.json) nor a probe folder (probe.json, "
                    "from autotune probe --diagnose)"
                )
            probes[d] = found
    measured_dirs = [d for d in run_dirs if d not in probes]
    if not measured_dirs:
        raise CompareError(
            "give at least one run folder: a probe folder is predicted under the runs' SLO, "
            "workload and load model"
        )
    names = [d.name for d in measured_dirs]
    reports = [Report.model_validate_json((d / "report.json").read_bytes()) for d in measured_dirs]
    known = {
        k for n, r in zip(names, reports, strict=True) for k in (n, r.run_id, r.hardware.hostname)
    } | {k for d, pr in probes.items() for k in (d.name, pr.hardware.hostname)}
    if unknown := sorted(set(prices) - known):
        raise CompareError(
            f"--price {unknown[0]}: no run of that folder name, run id or hostname "
            f"(runs: {', '.join(names)})"
        )
    slo = common_slo(reports)
    slos = SLOSet(
        latency=tuple(
            LatencySLO(metric=s.metric, percentile=s.percentile, limit_ms=s.limit_ms) for s in slo
        )
    )
    differ = any(_key(r.slo) != _key(slo) for r in reports)
    if differ:
        err = min(r.max_error_rate for r in reports)
        reports = [rescore(d, r, slos, err) for d, r in zip(measured_dirs, reports, strict=True)]
    pt = next((s.percentile for s in slo if s.metric == "ttft"), 99)
    pp = next((s.percentile for s in slo if s.metric == "tpot"), 99)
    by_dir = {d: _row(n, r, pt, pp) for d, n, r in zip(measured_dirs, names, reports, strict=True)}
    warnings = _warnings(reports, names)
    for d, pr in probes.items():
        by_dir[d] = _predicted_row(d, pr, slos, reports[0], pt, pp)
        warnings += _probe_warnings(d.name, pr, reports[0])
    rows = [_price(by_dir[d], prices) for d in run_dirs]
    if differ:
        warnings.append(
            "the runs' SLOs differ: each was re-scored from its recorded requests under the "
            "strictest common SLO; those figures are search figures, not confirmed"
        )
    return Comparison(
        slo=slo, rescored=differ, warnings=warnings, rows=rows, ttft_percentile=pt,
        tpot_percentile=pp,
    )  # fmt: skip
