"""The results schema (report.json) and atomic writes. Renderers live in tuner/report/render.py.

Statuses of a trial: ``ok`` (a load met every SLO: it has a score), ``infeasible`` (it started,
but no load met the SLOs, not even concurrency 1), ``failed`` (it did not start or broke: the
reason is in ``error``), ``abandoned`` (it was clearly beaten at the best configuration's load
and the capacity search stopped early; the reason is in ``error``), ``no_effect`` (it started,
but the engine's log says a chosen option did nothing, so it was not measured).

An ``ok`` trial can still be barred from the recommendation (``rejected``): its quality broke
the quality SLO, or speculative decoding changed its greedy outputs without
``--accept-divergence``. Its timings stay in the report.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from probes.diagnose import Diagnosis
from probes.exactness import Exactness
from probes.metrics import LoadMetrics, Verdict
from probes.quality import QualityCheck
from tuner.engines.hardware import Hardware
from tuner.scoring.compare import ComparisonReport
from tuner.scoring.estimate import CapacityEstimate

SCHEMA_VERSION = 1
TrialStatus = Literal["ok", "infeasible", "failed", "abandoned", "no_effect"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SLOReport(Strict):
    metric: str
    percentile: int
    limit_ms: float


class PointReport(Strict):
    """One load point measured on a running engine."""

    load: dict[str, float]
    metrics: LoadMetrics
    verdict: Verdict
    records_file: str
    server: dict[str, float] | None = None  # deltas of server counters over the window
    side_by_side: bool = False  # measured in a side-by-side repeat against another config


class PredictedReport(Strict):
    """The serving model's prediction for a trial, made before it was measured
    (tuner/search/guide.py), and what it predicted at the load the trial was then measured at."""

    # its build's own fit, the nearest build's, its build's fitted on the probe's sweeps alone,
    # or the nearest build's scaled by the probe's roofline to a quantised build's bytes
    basis: Literal["calibrated", "transferred", "probe", "roofline"]
    build_trials: list[int]  # the measured trials the step model was fitted on
    load: float | None  # the predicted capacity (None: no load meets the SLOs)
    load_low: float | None = None
    load_high: float | None = None
    tokens_per_s: float
    low: float
    high: float | None
    ttft_ms_p99: float | None = None  # at the predicted capacity
    tpot_ms_p50: float | None = None
    # Of a point like the one the trial's measured figures (``metrics``) come from, its load
    # and number of requests, simulated after it ran with the step model it was predicted
    # with: predicted and measured like for like (``Simulator.like_point``).
    at_load: float | None = None
    ttft_ms_p99_at_load: float | None = None
    tpot_ms_p50_at_load: float | None = None


class TrialReport(Strict):
    number: int  # 0 is the baseline
    stage: str  # "baseline" or the stage name
    params: dict[str, Any]
    args: list[str]
    env: dict[str, str]
    launch_command: list[str]
    status: TrialStatus
    error: str | None = None
    startup_s: float | None = None
    warmup_s: float | None = None
    # Output tokens/s at the estimated capacity: where the fit of every point's latency
    # against load crosses the SLOs (tuner/scoring/estimate.py); ``estimate`` has its 90 % interval.
    score_tokens_per_s: float | None = None
    load: dict[str, float] | None = None  # that capacity (fractional: it is interpolated)
    # The score its stage's search told Optuna (the trial's value in optuna.journal; under
    # --objective robust the baseline's score times its worst gain: RunState.value). Points
    # measured later, side by side with a newer trial or in the confirmation, move
    # ``score_tokens_per_s``; a finished Optuna trial keeps what it was told.
    told_tokens_per_s: float | None = None
    # The point measured closest under the capacity (without a score: the last point)
    metrics: LoadMetrics | None = None
    estimate: CapacityEstimate | None = None
    points: list[PointReport] = []
    log_file: str | None = None
    wall_s: float = 0.0
    quality: QualityCheck | None = None  # where a quantisation knob is not the default
    exactness: Exactness | None = None  # where speculative decoding is on
    rejected: str | None = None  # why an ok trial may not be recommended
    predicted: PredictedReport | None = None  # the serving model's, before it was measured
    # --objective robust (tuner/run/objective.py): its capacity on each --check-workload
    # workload, on its own server after its tuned search, and the least of its gains over the
    # baseline there and on the tuned workload (None: not measured on every workload).
    across: list[AcrossReport] = []
    worst_gain: float | None = None


class AcrossReport(Strict):
    """A configuration's capacity on one more workload of an ``--objective robust`` run,
    searched on its own server after its tuned search and scored as a trial is: output
    tokens/s at the estimated capacity there. Its points are in ``trials/<number>/``."""

    workload: str  # the workload's spec
    number: int  # the measurement's own number (tuner/run/objective.py ``number``)
    status: TrialStatus
    error: str | None = None
    score_tokens_per_s: float | None = None
    load: dict[str, float] | None = None
    points: int = 0
    gain: float | None = None  # its score over the baseline's there (None: not both scored)


class ContrastReport(Strict):
    """Best score with a knob on over the best with it off, measured in the same run."""

    label: str
    knob: str
    factor: float | None  # None where one side has no configuration that met the SLOs
    on_score: float | None
    off_score: float | None
    on_trial: int | None
    off_trial: int | None


class StageReport(Strict):
    name: str
    status: Literal["run", "skipped"]
    reason: str
    expected: str | None = None  # the probe's prediction: likely | unlikely | unknown
    prediction_held: bool | None = None  # gain > 5 % where "likely", <= 5 % where "unlikely"
    trials: list[int]
    best_params: dict[str, Any] | None
    best_score: float | None
    gain: float | None  # best score / score carried in from before this stage
    best_trial: int | None = None  # the trial carried out of this stage (0: the baseline)
    contrast: ContrastReport | None = None  # the stage's own figure, where its space names one


class ConfirmTry(Strict):
    """One full-size confirmation measurement."""

    load: dict[str, float]
    output_tokens_per_s: float
    worst_margin: float
    provisional: bool
    meets: bool  # every SLO held with the headroom, with enough requests for the percentile
    n_requests: int


class Recommendation(Strict):
    params: dict[str, Any]
    env: dict[str, str]
    launch_command: list[str] | None  # None for an endpoint: autotune did not start it
    load: dict[str, float]  # the target load, flat: {"concurrency": N} or {"rate_rps": R}
    achieved_load: dict[str, float]
    metrics: LoadMetrics
    verdict: Verdict
    # True only with enough requests for every SLO's percentile (over-limit requests counted)
    # and every latency at most (1 - headroom) x its limit.
    meets_slo: bool
    provisional: bool
    n_requests: int
    from_trial: int
    search_score_tokens_per_s: float
    # Under the rate model: the rate x output tokens per request (what the search scores);
    # ``metrics.output_tokens_per_s`` is the window's figure (vLLM's convention: the drain of
    # the last requests inside), lower by the drain's share of the window.
    sustained_output_tokens_per_s: float | None = None
    search_estimate: CapacityEstimate | None = None  # the trial's estimate from its search
    capacity: CapacityEstimate | None = None  # search and confirmation points together
    tries: list[ConfirmTry] = []
    # This confirmed figure over the baseline's confirmed figure; None where the baseline
    # was not confirmed (never a confirmed figure over a search figure).
    gain_vs_baseline: float | None
    gain_basis: str = ""
    confirmation: str  # how the claim was measured
    fresh_start: bool = False  # measured on a fresh start of ``launch_command``, after the search


class HeldOutReport(Strict):
    """The recommendation and the baseline on a workload the run was not tuned on
    (``--check-workload``; tuner/run/held_out.py), each scored as a trial is: output tokens/s
    at its estimated capacity on that workload."""

    workload: dict[str, Any]  # probes.describe: kind, spec, parameters, what was sent
    derived: str | None = None  # ``derived``: what was derived from the tuned workload
    baseline: TrialReport | None = None  # its capacity search there (None: not measured)
    recommended: TrialReport | None = None
    # The recommendation's capacity over the baseline's there: search figure over search
    # figure, as the trials are compared (None: one of them has no score; ``basis`` says why).
    gain: float | None = None
    basis: str = ""
    # The recommendation's gain on the tuned workload: "confirmed" over the confirmed baseline,
    # else its "search" figure over the baseline's (``tuned_basis``).
    tuned_gain: float | None = None
    tuned_basis: str = ""
    skipped: str | None = None  # why it was not measured (the time budget, no recommendation)


class Rescored(Strict):
    """A recorded run re-scored under other SLOs (tuner/runs/rescore.py): search figures only."""

    from_slo: list[SLOReport]  # what the run was measured and confirmed under
    from_max_error_rate: float
    from_recommended: int | None  # the trial the run recommended under those
    best_trial: int | None  # the best under the new SLOs: unconfirmed
    best_tokens_per_s: float | None
    best_load: dict[str, float] | None
    gain_vs_baseline: float | None  # search figure over search figure
    unanswerable: list[str]  # what the recorded loads cannot say
    confirm_command: list[str] | None  # the fresh measurement that would confirm the best


class Timing(Strict):
    wall_s: float
    engine_starts: int
    startup_s: float
    warmup_s: float
    measure_s: float
    other_s: float


class ServingModelReport(Strict):
    """The serving model over the run (tuner/search/guide.py): what it screened, how sure it says it
    is, and its error against every measured trial it predicted."""

    screened: int
    predicted_trials: list[int]  # trials measured with a prediction made before they ran
    # per metric ("capacity", "ttft_p99", "tpot_p50"): median and worst |pred / meas - 1|, n
    errors: dict[str, dict[str, float]]
    errors_by_basis: dict[str, dict[str, dict[str, float]]] = {}  # the same, per basis
    run_to_run_spread: float  # the fresh-start spread every interval includes
    transfer_spread: float  # added for a build predicted from another build's step model
    probe_spread: float = 0.0  # added for a build calibrated on the probe's sweeps alone


class Report(Strict):
    schema_version: int = SCHEMA_VERSION
    run_id: str
    status: Literal["complete", "interrupted", "failed"]
    created_at: str
    command: list[str]
    model: str
    model_path: str
    engine: str
    engine_version: str
    endpoint: str | None = None  # --engine endpoint: the server's root URL
    hardware: Hardware
    workload: dict[str, Any]
    load: dict[str, str] = {}  # {"model": "rate" | "concurrency", "unit": ...}
    salt: str = ""  # the workload's random salt (--salt reproduces the prompts)
    slo: list[SLOReport]
    quality_slo: dict[str, Any] | None
    max_error_rate: float
    options: dict[str, Any]
    knob_defaults: dict[str, Any] = {}  # the engine's own value of each knob, where known
    probe: Diagnosis | None = None  # measured on the baseline server before its capacity search
    baseline: TrialReport | None
    baseline_note: str
    trials: list[TrialReport]
    stages: list[StageReport]
    recommended: Recommendation | None
    # The baseline confirmed the same way as the recommendation (on its own server)
    baseline_confirmation: Recommendation | None = None
    comparisons: list[ComparisonReport] = []  # side-by-side repeats of close configurations
    # The exactness check of the recommended speculative configuration, or of the best
    # speculative one that was not recommended because its outputs changed.
    exactness: Exactness | None = None
    timing: Timing | None
    notes: list[str] = []
    error: str | None = None
    rescored: Rescored | None = None  # set on a re-score (autotune report RUN_DIR --slo)
    screened: int = 0  # configurations the serving model predicted without starting them
    serving_model: ServingModelReport | None = None
    held_out: list[HeldOutReport] = []  # --check-workload: each held-out workload, side by side
    # "tuned": configurations ranked by their score on the tuned workload; "robust": by their
    # worst gain over the baseline across it and the --check-workload ones (objective.py).
    objective: Literal["tuned", "robust"] = "tuned"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# Read once, at import (os.umask can only be read by setting it).
UMASK = _umask()


def write_atomic(path: Path, data: bytes) -> None:
    """Write to a temporary file beside ``path``, then rename over it. The file gets the
    mode a plain ``open`` would give it (mkstemp's own is 0600: a report nobody else could
    read)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~UMASK)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def dump_json(model: BaseModel | dict[str, Any]) -> bytes:
    data = model.model_dump(mode="json") if isinstance(model, BaseModel) else model
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY)
