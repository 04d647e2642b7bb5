"""The step models of a run's measured builds, from its trials' per-request records.

Trials that share a build (tuner/servemodel/configs.py ``build_of``: every knob the serving
model does not simulate) are calibrated together on the records of all their points, so each
measured configuration sharpens its build's model. The probe's sweeps on the baseline server
(``ProbePoints``: lone prompts of several lengths, decoding batches up to four times the user's
load) calibrate the baseline's build before any trial is measured, and go on counting beside its
trials' points. A tuning run refits as it measures (the guide, tuner/search/guide.py); ``autotune
predict`` fits a finished run's builds once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from probes.records import RequestRecord
from tuner.report.schema import TrialReport
from tuner.servemodel.admission import ROUNDS, Replay, fit_admission
from tuner.servemodel.calibrate import calibrate
from tuner.servemodel.configs import (
    build_label,
    build_of,
    cache_block,
    kv_bytes_per_token,
    sim_knobs,
)
from tuner.servemodel.predict import Basis
from tuner.servemodel.roofline import Roofline, roofline_step
from tuner.servemodel.scheduler import Knobs
from tuner.servemodel.steptime import FitError, StepModel
from tuner.spaces.space import SearchSpace
from tuner.storage.records import read_records

MIN_CALIBRATION_REQUESTS = 20  # fewer completed requests in a build: it is not fitted
ReadRecords = Callable[[TrialReport, int], list[RequestRecord]]  # (trial, point index)


@dataclass(frozen=True)
class ProbePoints:
    """The probe's sweep points (per-request records), measured on a server of ``params``."""

    params: dict[str, Any]
    points: list[list[RequestRecord]]
    lengths: list[tuple[int, ...]] | None = None  # (prompt, output) of its decode sweep


def lengths_of(records: list[RequestRecord]) -> list[tuple[int, ...]]:
    """The (prompt, output, shared prompt) tokens of the completed requests whose prompt
    length is known (shared: what its prefix group has in common, probes/workload.py)."""
    return [
        (int(r.n_prompt or 0), r.n_out, int(r.n_prompt_shared or 0))
        for r in records
        if r.ok and r.n_prompt
    ]


def probe_points(files: dict[str, str], params: dict[str, Any], folder: Path) -> ProbePoints | None:
    """The probe's kept records (``Diagnosis.records_files``, as written or, where the folder
    has moved, in ``folder``: a run's probe/, a probe folder's records/) as calibration points
    (None: none could be read)."""
    points: list[list[RequestRecord]] = []
    lengths: list[tuple[int, ...]] = []
    for name, written in sorted(files.items()):
        path = Path(written)
        if not path.is_file():
            path = folder / path.name
        try:
            recs = read_records(path)
        except (OSError, ValueError, TypeError):
            continue
        points.append(recs)
        if name.startswith("decode-"):
            lengths += lengths_of(recs)
    return ProbePoints(params, points, lengths or None) if points else None


@dataclass
class BuildFit:
    """One measured build's step model and what it rests on."""

    build: dict[str, Any]
    step: StepModel
    trials: list[int]  # empty: calibrated on the probe alone
    requests: int
    load: float | None = None  # the highest capacity measured on this build: where to start
    probe: bool = False  # the probe's points are among those it was fitted on

    def label(self, space: SearchSpace) -> str:
        return build_label(self.build, space)


def build_key(params: dict[str, Any], space: SearchSpace) -> str:
    """A build's identity (its knob values, defaults filled in)."""
    return json.dumps(build_of(params, space), sort_keys=True, default=str)


@dataclass
class Calibration:
    """The fitted builds of one run, refitted only where a trial or point was added."""

    space: SearchSpace
    read: ReadRecords
    load_of: Callable[[TrialReport], float | None]
    probe: ProbePoints | None = None
    model_dir: str | None = None  # the model's folder: its KV cache's bytes per token
    fits: dict[str, BuildFit] = field(default_factory=dict)
    stamps: dict[str, tuple] = field(default_factory=dict)
    # the front end's delay per running request (tuner/servemodel/admission.py), one per run
    admit_per_seq_s: float = 0.0

    def _groups(self, trials: Sequence[TrialReport]) -> dict[str, list[TrialReport]]:
        """The measured ``trials`` by build (the probe's build present, if only by it)."""
        groups: dict[str, list[TrialReport]] = {}
        for t in trials:
            if t.points and t.status in ("ok", "infeasible", "abandoned"):
                groups.setdefault(build_key(t.params, self.space), []).append(t)
        if self.probe is not None:
            groups.setdefault(build_key(self.probe.params, self.space), [])
        return groups

    def _probe_of(self, key: str) -> list[list[RequestRecord]]:
        """The probe's points where ``key`` is the build it ran on."""
        if self.probe is None or key != build_key(self.probe.params, self.space):
            return []
        return self.probe.points

    def _points(self, key: str, members: Sequence[TrialReport]) -> list[list[RequestRecord]]:
        """The records of every point of ``members``, and the probe's where it is their build."""
        extra = self._probe_of(key)
        return extra + [self.read(t, i) for t in members for i in range(len(t.points))]

    def _fit(self, points: list[list[RequestRecord]], key: str) -> StepModel | None:
        if sum(sum(r.ok for r in p) for p in points) < MIN_CALIBRATION_REQUESTS:
            return None
        try:  # the build's prefix cache held its requests' shared prefixes
            return calibrate(points, cache_block(json.loads(key), self.space))
        except FitError:
            return None

    def refit_with(self, trial: TrialReport, trials: Sequence[TrialReport]) -> StepModel | None:
        """The step model of ``trial``'s build fitted on its points so far (a trial being
        measured) beside those of the build's measured ``trials`` and the probe's, with the
        run's admission delay refitted on them too; kept nowhere (None: too few records)."""
        key = build_key(trial.params, self.space)
        groups = self._groups(trials)
        members = [t for t in groups.get(key, []) if t.number != trial.number] + [trial]
        step = self._fit(self._points(key, members), key)
        if step is None:
            return None
        steps = {k: f.step for k, f in self.fits.items()} | {key: step}
        # one correction from the run's delay: this runs after every point of a trial
        admit = self._admission(groups | {key: members}, steps, self.admit_per_seq_s, 1)
        return step.model_copy(update={"admit_per_seq_s": admit})

    def update(self, trials: Sequence[TrialReport]) -> dict[str, BuildFit]:
        """Every build with enough records among ``trials`` (and the probe's), fitted, with
        the run's admission delay refitted where any build was."""
        groups = self._groups(trials)
        changed = False
        for key, members in groups.items():
            n_probe = len(self._probe_of(key))
            stamp = (tuple((t.number, len(t.points)) for t in members), n_probe)
            if self.stamps.get(key) == stamp:
                continue
            points = self._points(key, members)
            if (step := self._fit(points, key)) is None:
                continue
            n = sum(sum(r.ok for r in p) for p in points)
            loads = [x for t in members if t.status == "ok" and (x := self.load_of(t))]
            params = members[0].params if members else (self.probe.params if self.probe else {})
            self.fits[key] = BuildFit(
                build_of(params, self.space),
                step,
                [t.number for t in members],
                n,
                max(loads, default=None),
                probe=n_probe > 0,
            )
            self.stamps[key] = stamp
            changed = True
        if changed:
            self._fit_admission(groups)
        return self.fits

    def _fit_admission(self, groups: dict[str, list[TrialReport]]) -> None:
        """The run's admission delay, fitted and set on every build's step model."""
        self.admit_per_seq_s = self._admission(groups, {k: f.step for k, f in self.fits.items()})
        for f in self.fits.values():
            f.step = f.step.model_copy(update={"admit_per_seq_s": self.admit_per_seq_s})

    def _admission(
        self,
        groups: dict[str, list[TrialReport]],
        steps: dict[str, StepModel],
        start: float = 0.0,
        rounds: int = ROUNDS,
    ) -> float:
        """The admission delay of every fitted build's trial points (``groups``), each
        replayed with its build's step model (``steps``)."""
        builds = []
        for key, members in groups.items():
            replays = []
            for t in members if key in steps else []:
                try:
                    knobs = self._knobs(t.params)
                except ValueError:  # a space the serving model cannot simulate
                    continue
                replays += [Replay(self.read(t, i), knobs) for i in range(len(t.points))]
            if replays:
                builds.append((steps[key], replays))
        return fit_admission(builds, start, rounds)

    def _knobs(self, params: dict[str, Any]) -> Knobs:
        kv = kv_bytes_per_token(self.model_dir, params.get("kv_cache_dtype"))
        return sim_knobs(params, self.space, kv)

    def lengths(self, trials: Sequence[TrialReport]) -> list[tuple[int, ...]] | None:
        """The (prompt, output) tokens the run's requests had: those of its first measured
        point with a completed request, else the probe's decode sweep (None: neither)."""
        for t in trials:
            for i in range(len(t.points)):
                if pairs := lengths_of(self.read(t, i)):
                    return pairs
        return self.probe.lengths if self.probe is not None else None

    def nearest(self, params: dict[str, Any]) -> tuple[BuildFit, int] | None:
        """The calibrated build of ``params``, or the one differing in fewest build knobs
        (ties: the most recently measured), and how many build knobs differ."""
        if not self.fits:
            return None
        want = build_of(params, self.space)

        def distance(f: BuildFit) -> int:
            return sum(f.build.get(k) != v for k, v in want.items())

        best = min(self.fits.values(), key=lambda f: (distance(f), -max(f.trials, default=-1)))
        return best, distance(best)

    def step_for(
        self,
        params: dict[str, Any],
        fit: BuildFit,
        roof: Roofline | None,
        model_dir: str | None,
    ) -> tuple[StepModel, Basis]:
        """The step model ``params`` is predicted with (``fit``: its nearest build's), and its
        kind: its build's own fit; for a quantised build not measured yet, the nearest build's
        scaled by the probe's roofline ``roof`` where that can say (tuner/servemodel/roofline.py);
        else the nearest build's as it is."""
        if build_key(params, self.space) == build_key(fit.build, self.space):
            return fit.step, "calibrated" if fit.trials else "probe"
        if roof is not None:
            scaled = roofline_step(fit.step, fit.build, params, self.space, roof, model_dir)
            if scaled is not None:
                return scaled, "roofline"
        return fit.step, "transferred"
