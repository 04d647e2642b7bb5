"""``autotune predict``: a configuration's capacity from a finished run's calibration, without
starting an engine.

The run's measured builds are fitted on their trials' records (tuner/search/calibration.py); the
asked configuration is simulated with its own build's step model (``calibrated``) or, for a
build the run never measured, with the nearest one's (``transferred``: the interval widens by
the transfer spread), scaled by the probe's roofline where the build differs only in its
quantisation and the roofline can say (``roofline``, as wide: tuner/servemodel/roofline.py). It
is judged under the run's SLOs and load model, or the ones given, as a measured trial is
(tuner/servemodel/predict.py). The evidence says what the prediction rests on: the builds
measured, how far the asked build is from the nearest (knobs that differ), and where the asked
scheduler knobs lie against the values the run measured.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from probes.slo import SLOSet
from probes.workload import SyntheticWorkload, Workload
from tuner.report.model_errors import model_errors
from tuner.report.schema import Report, TrialReport
from tuner.search.calibration import Calibration, probe_points
from tuner.servemodel.configs import build_label, kv_bytes_per_token, sim_knobs
from tuner.servemodel.load import cycled
from tuner.servemodel.predict import Prediction, mean_of, predict
from tuner.servemodel.roofline import roofline_of
from tuner.servemodel.scheduler import SimulationError
from tuner.servemodel.spreads import MEASURED_BASES, spread_for
from tuner.spaces.space import SearchSpace, SpaceError, load_space, space_path
from tuner.storage.records import read_records, records_path


class PredictError(ValueError):
    """A run that cannot calibrate the model, or a configuration it cannot simulate."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MeasuredBuild(Strict):
    build: str  # the knobs that differ from the engine's defaults
    trials: list[int]
    requests: int
    fit_rel_rms: float | None


class KnobEvidence(Strict):
    asked: Any
    measured: list[Any]  # the distinct values the run measured on the build used


class Evidence(Strict):
    measured_builds: list[MeasuredBuild]
    build_used: str
    build_distance: int  # build knobs that differ between the asked and the one used
    scheduler_knobs: dict[str, KnobEvidence]
    run_model_error: dict[str, dict[str, float]]  # the run's own predicted-vs-measured


class RunPrediction(Strict):
    run_dir: str
    params: dict[str, Any]
    workload: str
    load_model: Literal["rate", "concurrency"]
    basis: Literal["calibrated", "transferred", "probe", "roofline"]
    # {"rate_rps" | "concurrency": x, "output_tokens_per_s": y, "interval": {same keys: [lo, hi]}}
    capacity: dict[str, Any]
    at_capacity: dict[str, float | None]  # the simulated point closest under the capacity
    evidence: Evidence


def load_report(run_dir: Path) -> Report:
    path = run_dir / "report.json"
    if not path.is_file():
        raise PredictError(f"{run_dir} is not an autotune run folder (no report.json)")
    return Report.model_validate_json(path.read_bytes())


def run_space(report: Report) -> SearchSpace:
    """The search space the run used (its --search-space file, or the engine's own)."""
    path = report.options.get("space_file")
    try:
        return load_space(Path(path) if path else space_path(report.engine, report.hardware.device))
    except (SpaceError, OSError) as exc:
        raise PredictError(f"the run's search space cannot be read: {exc}") from None


def predict_from_run(
    run_dir: Path,
    params: dict[str, Any],
    *,
    workload: Workload | None = None,
    slos: SLOSet | None = None,
    load_model: str | None = None,
    seed: int = 0,
) -> RunPrediction:
    """Predict ``params`` (knob values; the rest at the engine's defaults) from a run.

    Raises:
        PredictError: no build of the run could be calibrated, an unknown knob or value, or
            a configuration the model cannot simulate.
    """
    report = load_report(run_dir)
    space = run_space(report)
    knobs = space.knobs()
    for name, value in params.items():
        if name not in knobs:
            raise PredictError(f"knob {name!r} is unknown; known: {', '.join(sorted(knobs))}")
        try:
            params[name] = knobs[name].validate_value(value)
        except ValueError as exc:
            raise PredictError(str(exc)) from None
    kind = load_model or report.load.get("model", "rate")
    if kind not in ("rate", "concurrency"):
        raise PredictError(f"--load {kind!r} is unknown; known: rate, concurrency")
    trials = [t for t in [report.baseline, *report.trials] if t is not None]

    def read(t: TrialReport, i: int) -> list[Any]:
        return read_records(records_path(run_dir, t, t.points[i]))

    def load_of(t: TrialReport) -> float | None:
        key = "rate_rps" if report.load.get("model") == "rate" else "concurrency"
        return (
            float(t.load[key])
            if t.load and key in t.load and kind == report.load.get("model")
            else None
        )

    probe = report.probe
    cal = Calibration(
        space,
        read,
        load_of,
        probe=probe_points(probe.records_files, {}, run_dir / "probe")
        if probe is not None
        else None,
        model_dir=report.model_path or None,
    )
    cal.update(trials)
    found = cal.nearest(params)
    if found is None:
        raise PredictError(f"{run_dir}: no measured build has records enough to calibrate on")
    fit, distance = found
    pairs = _lengths(workload, trials, cal)
    the_slos = slos or _run_slos(report)
    errors = model_errors(trials)
    step, basis = cal.step_for(params, fit, roofline_of(probe), report.model_path or None)
    measured = model_errors(trials, MEASURED_BASES)
    spread = spread_for(measured.get("capacity", {}).get("median"), basis)
    try:
        sk = sim_knobs(
            params, space, kv_bytes_per_token(report.model_path, params.get("kv_cache_dtype"))
        )
        p = predict(
            step,
            sk,
            cycled(pairs),
            the_slos,
            report.max_error_rate,
            kind,  # type: ignore[arg-type]
            mean_lengths=mean_of(pairs),
            spread=spread,
            seed=seed,
            basis=basis,
            start=fit.load,
        )
    except (SimulationError, ValueError) as exc:
        raise PredictError(f"the configuration cannot be simulated: {exc}") from None
    return RunPrediction(
        run_dir=str(run_dir),
        params=params,
        workload=_label(workload, report),
        load_model=kind,
        basis=basis,
        capacity=_capacity(p),
        at_capacity=_at(p),
        evidence=Evidence(
            measured_builds=[
                MeasuredBuild(
                    build=f.label(space),
                    trials=f.trials,
                    requests=f.requests,
                    fit_rel_rms=f.step.fit_rel_rms,
                )
                for f in cal.fits.values()
            ],
            build_used=build_label(fit.build, space),
            build_distance=distance,
            scheduler_knobs=_knob_evidence(params, space, trials, fit.trials),
            run_model_error=errors,
        ),
    )


def _lengths(
    workload: Workload | None, trials: list[TrialReport], cal: Calibration
) -> list[tuple[int, ...]]:
    """The (prompt, output) pairs to simulate: the workload's, or the run's measured ones."""
    if isinstance(workload, SyntheticWorkload):
        import random

        rng = random.Random(0)
        return [workload.lengths(rng) for _ in range(500)]
    if (pairs := cal.lengths(trials)) is not None:
        return pairs
    raise PredictError("the run has no completed request to take the workload's lengths from")


def _run_slos(report: Report) -> SLOSet:
    from probes.slo import parse_slos

    texts = [f"{s.metric}@p{s.percentile}={s.limit_ms:g}ms" for s in report.slo]
    return parse_slos(texts)


def _label(workload: Workload | None, report: Report) -> str:
    if isinstance(workload, SyntheticWorkload):
        return workload.label
    if workload is not None:
        return f"file: {workload.path}"
    return str(report.workload.get("spec") or report.workload.get("path") or "the run's")


def _capacity(p: Prediction) -> dict[str, Any]:
    key = "rate_rps" if p.load_kind == "rate" else "concurrency"
    return {
        key: p.load,
        "output_tokens_per_s": p.tokens_per_s,
        "interval": {key: [p.load_low, p.load_high], "output_tokens_per_s": [p.low, p.high]},
        "censored": p.censored,
        "binding": p.binding,
    }


def _at(p: Prediction) -> dict[str, float | None]:
    a = p.at_capacity
    if a is None:
        return {}
    return {
        "load": a.load,
        "ttft_ms_p50": a.ttft_ms_p50,
        "ttft_ms_p99": a.ttft_ms_p99,
        "tpot_ms_p50": a.tpot_ms_p50,
        "output_tokens_per_s": a.output_tokens_per_s,
    }


def _knob_evidence(
    params: dict[str, Any], space: SearchSpace, trials: list[TrialReport], used: list[int]
) -> dict[str, KnobEvidence]:
    """Each simulated knob: the value asked, and the values measured on the build used."""
    defaults = {k.name: k.default for k in space.knobs().values()}
    out = {}
    for k in space.knobs().values():
        if k.sim is None or k.sim_build:
            continue
        seen = sorted(
            {
                repr(t.params.get(k.name, defaults[k.name])): t.params.get(k.name, defaults[k.name])
                for t in trials
                if t.number in used
            }.values(),
            key=repr,
        )
        out[k.name] = KnobEvidence(asked=params.get(k.name, defaults[k.name]), measured=seen)
    return out
