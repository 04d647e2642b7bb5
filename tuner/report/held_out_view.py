"""The held-out check's figures of a report, computed once (``--check-workload``;
tuner/run/held_out.py measures them): per held-out workload, what it is, the baseline's and the
recommendation's capacity there, the gain and the tuned gain beside it, and the one sentence
that says when the recommendation loses to the engine's defaults on any of them. report.md,
report.html and the run's progress lines draw these and compute nothing.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tuner.report.render_cells import workload_sent_text
from tuner.report.schema import HeldOutReport, Report, TrialReport
from tuner.report.text import load_text


class HeldOutRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workload: str  # its spec (or file)
    derived: str | None  # what was derived from the tuned workload, for ``derived``
    sent: str | None  # what its requests sent (both configurations' points)
    baseline_tokens_per_s: float | None  # output tokens/s at its capacity there
    baseline_load: str  # that capacity ("2.45 req/s"), or its status where it has none
    recommended_tokens_per_s: float | None
    recommended_load: str
    gain: float | None  # recommendation over baseline there
    tuned_gain: float | None  # the same on the tuned workload
    tuned_basis: str  # "confirmed" or "search"
    note: str  # why a figure is missing, where one is
    loses: bool  # the gain is under 1: slower than the defaults there


class HeldOutView(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rows: list[HeldOutRow]
    verdict: str  # the plain sentence: loses on some, or holds on every one measured


def loses_sentence(entries: list[HeldOutReport]) -> str | None:
    """``The recommendation loses to the engine's defaults on ...`` where its gain on any
    held-out workload is under 1; None where it loses on none measured."""
    lost = [e for e in entries if e.gain is not None and e.gain < 1.0]
    if not lost:
        return None
    which = "; ".join(f"{_spec(e)} ({e.gain:.2f}x the baseline)" for e in lost if e.gain)
    return (
        f"The recommendation loses to the engine's defaults on {len(lost)} of the "
        f"{len(entries)} held-out workload(s): {which}. Where the traffic served looks like "
        "that, keep the defaults or tune on that traffic (--workload)."
    )


def held_out_view(r: Report) -> HeldOutView | None:
    """The check's rows and verdict; None where the run was asked for no check."""
    if not r.held_out:
        return None
    rows = [_row(e) for e in r.held_out]
    verdict = loses_sentence(r.held_out)
    if verdict is None:
        measured = [x for x in rows if x.gain is not None]
        verdict = (
            f"The recommendation is at least as fast as the engine's defaults on every held-out "
            f"workload measured ({len(measured)} of {len(rows)})."
            if measured
            else "No held-out gain was measured: "
            + ("; ".join(dict.fromkeys(x.note for x in rows if x.note)) or "see the notes")
            + "."
        )
    return HeldOutView(rows=rows, verdict=verdict)


def _spec(e: HeldOutReport) -> str:
    w = e.workload
    return str(w.get("spec") or w.get("path") or w.get("kind") or "?")


def _load(t: TrialReport | None) -> str:
    if t is None:
        return "not measured"
    if t.status == "ok":
        return load_text(t.load)
    return t.status


def _row(e: HeldOutReport) -> HeldOutRow:
    b, r = e.baseline, e.recommended
    note = e.skipped or ("" if e.gain is not None else e.basis)
    return HeldOutRow(
        workload=_spec(e),
        derived=e.derived,
        sent=workload_sent_text(e.workload),
        baseline_tokens_per_s=b.score_tokens_per_s if b else None,
        baseline_load=_load(b),
        recommended_tokens_per_s=r.score_tokens_per_s if r else None,
        recommended_load=_load(r),
        gain=e.gain,
        tuned_gain=e.tuned_gain,
        tuned_basis=e.tuned_basis,
        note=note,
        loses=e.gain is not None and e.gain < 1.0,
    )
