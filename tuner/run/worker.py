"""What a worker of a shared study (tuner/storage/shared.py) gives the others, and takes from them.

- The baseline, measured by one worker: its record, its confirmation, the probe, the gates'
  references and its samples (the others score and confirm against them).
- Each finished trial: its record, its greedy outputs (a speculative configuration another
  worker measures is compared with them) and its samples (the worker that confirms the best
  configuration fits its load from them).
- The confirmation, made by one worker: the recommendation and the report, so that every worker
  ends with the same report and ``autotune report --storage ... --study NAME`` rebuilds it.

Every document is JSON (NaN kept), stored as an Optuna trial attribute.
"""

from __future__ import annotations

import base64
from typing import Any

from probes.quality import Continuation
from tuner.report.schema import HeldOutReport, Recommendation, Report, StageReport, TrialReport
from tuner.run.checkpoint import restore_findings, snapshot
from tuner.run.state import RunState
from tuner.storage.store import Checkpoint, samples_bytes, samples_from_bytes

Doc = dict[str, Any]


def _samples_doc(st: RunState, number: int) -> list[str]:
    return [base64.b64encode(samples_bytes(s)).decode() for s in st.samples.get(number, [])]


def _take_samples(st: RunState, number: int, docs: list[str]) -> None:
    if number not in st.samples:
        st.samples[number] = [samples_from_bytes(base64.b64decode(d)) for d in docs]


def baseline_doc(st: RunState, trial: TrialReport) -> Doc:
    """The baseline as every worker needs it (after ``evaluate`` measured and confirmed it)."""
    return {
        "checkpoint": snapshot(st, trial).model_dump(mode="json"),
        "samples": _samples_doc(st, trial.number),
    }


def take_baseline(st: RunState, doc: Doc) -> TrialReport:
    """Another worker's baseline into this worker's state (its clock and budget stay its own)."""
    cp = Checkpoint.model_validate(doc["checkpoint"])
    st.baseline = cp.trial
    restore_findings(st, cp)
    st.exactness.greedy.update(cp.greedy)
    _take_samples(st, cp.trial.number, doc["samples"])
    return cp.trial


def trial_doc(st: RunState, trial: TrialReport) -> Doc:
    greedy = st.exactness.greedy.get(trial.number)
    return {
        "trial": trial.model_dump(mode="json"),
        "greedy": [c.model_dump(mode="json") for c in greedy] if greedy is not None else None,
        "samples": _samples_doc(st, trial.number),
    }


def take_trials(st: RunState, docs: list[Doc]) -> None:
    """The other workers' finished trials into ``st.trials`` (in trial order): this worker's
    best, abandon rule and confirmation then see every worker's results."""
    have = {t.number for t in st.trials}
    for doc in docs:
        trial = TrialReport.model_validate(doc["trial"])
        if trial.number in have:
            continue
        st.trials.append(trial)
        if doc.get("greedy") is not None:
            st.exactness.greedy[trial.number] = [
                Continuation.model_validate(c) for c in doc["greedy"]
            ]
        _take_samples(st, trial.number, doc["samples"])
    st.trials.sort(key=lambda t: t.number)


def confirmation_doc(st: RunState, report: Report) -> Doc:
    return {
        "recommended": st.recommended.model_dump(mode="json") if st.recommended else None,
        "stage_reports": [s.model_dump(mode="json") for s in st.stage_reports],
        "notes": list(st.notes),
        "held_out": [h.model_dump(mode="json") for h in st.held_out],
        "report": report.model_dump(mode="json"),
    }


def take_confirmation(st: RunState, doc: Doc) -> None:
    rec = doc.get("recommended")
    st.recommended = Recommendation.model_validate(rec) if rec else None
    st.stage_reports = [StageReport.model_validate(s) for s in doc["stage_reports"]]
    st.notes = list(doc["notes"])
    st.held_out = [HeldOutReport.model_validate(h) for h in doc.get("held_out", [])]
