"""A machine predicted from its probe alone, for ``autotune compare``'s predicted rows.

``autotune probe --diagnose`` of a configuration on a machine (a start and the probe's sweeps, a
couple of minutes) leaves a probe folder: the result (``probe.json``) and every sweep point's
per-request records. Those calibrate the serving model's step model for that configuration's
build (tuner/search/calibration.py ``ProbePoints``), and the configuration is simulated under the
SLOs, error limit and load model of the measured runs it is compared with, with the lengths of
the probe's decode sweep (the workload the probe was given). It is the weaker kind of figure:
basis ``probe``, its interval widened by the probe term (tuner/servemodel/spreads.py), and
marked predicted beside the measured rows. Those rows are confirmed figures, at the load a run
claims (on the rate axis ``1 - load_margin`` of the capacity), so the predicted row is given
there too, beside the capacity it was taken from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from probes.slo import SLOSet
from tuner.runs.predict_run import PredictError
from tuner.runs.probe_run import PROBE_FILE, ProbeResult
from tuner.search.calibration import Calibration, probe_points
from tuner.servemodel.configs import kv_bytes_per_token, sim_knobs
from tuner.servemodel.load import cycled
from tuner.servemodel.predict import PredictedLoad, Prediction, Simulator, mean_of, predict
from tuner.servemodel.scheduler import SimulationError
from tuner.servemodel.spreads import spread_for
from tuner.spaces.space import SpaceError, load_space, space_path


def read_probe(folder: Path) -> ProbeResult | None:
    """The probe folder's result, or None where ``folder`` holds none."""
    path = folder / PROBE_FILE
    if not path.is_file():
        return None
    return ProbeResult.model_validate_json(path.read_bytes())


@dataclass(frozen=True)
class ProbeForecast:
    """The probed configuration's predicted capacity, and the point a tuning run would confirm
    it at (``claim``: at ``1 - load_margin`` of the capacity on the rate axis, as the runs
    compared were confirmed; at the capacity on the concurrency axis)."""

    capacity: Prediction
    claim: PredictedLoad | None
    claim_share: float  # the claim's load over the capacity's


def predict_probe(
    folder: Path,
    result: ProbeResult,
    slos: SLOSet,
    max_error_rate: float,
    load_kind: str,
    load_margin: float = 0.15,
    seed: int = 0,
) -> ProbeForecast:
    """The probed configuration's capacity on the probed machine (see the module docstring),
    and the figures at the load a run would claim.

    Raises:
        PredictError: no sweeps kept (not a --diagnose probe of an engine autotune started),
            too few records to calibrate on, or a configuration the model cannot simulate.
    """
    d = result.diagnosis
    engine = result.target.get("engine")
    if d is None or not d.records_files or not engine:
        raise PredictError(
            f"{folder}: the probe kept no sweeps to calibrate on (autotune probe --model ... "
            "--diagnose keeps them)"
        )
    if load_kind not in ("rate", "concurrency"):
        raise PredictError(f"load model {load_kind!r} is unknown; known: rate, concurrency")
    try:
        space = load_space(space_path(str(engine), result.hardware.device))
    except (SpaceError, OSError) as exc:
        raise PredictError(f"{folder}: the engine's search space cannot be read: {exc}") from None
    params = dict(result.target.get("params") or {})
    points = probe_points(d.records_files, params, folder / "records")
    if points is None or not points.lengths:
        raise PredictError(f"{folder}: the probe's records cannot be read")
    cal = Calibration(space, lambda t, i: [], lambda t: None, probe=points)
    found = cal.update([]) and cal.nearest(params)
    if not found:
        raise PredictError(f"{folder}: too few completed requests in the probe to calibrate on")
    fit, _ = found
    model_dir = result.target.get("model_dir")
    try:
        knobs = sim_knobs(
            params, space, kv_bytes_per_token(model_dir, params.get("kv_cache_dtype"))
        )
        p = predict(
            fit.step,
            knobs,
            cycled(points.lengths),
            slos,
            max_error_rate,
            load_kind,  # type: ignore[arg-type]
            mean_lengths=mean_of(points.lengths),
            spread=spread_for(None, "probe"),
            seed=seed,
            basis="probe",
        )
        share = 1.0 - load_margin if load_kind == "rate" else 1.0
        claim = None
        if p.load is not None:
            sim = Simulator(
                fit.step, knobs, cycled(points.lengths), slos, max_error_rate,
                load_kind,  # type: ignore[arg-type]
                seed,
            )  # fmt: skip
            claim = sim.point(p.load * share)
    except (SimulationError, ValueError) as exc:
        raise PredictError(f"{folder}: the configuration cannot be simulated: {exc}") from None
    return ProbeForecast(p, claim, share)
