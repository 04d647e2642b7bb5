"""What report.md and report.html show of an ``--objective robust`` run: every configuration's
capacity on the tuned workload and on each other one, its gain over the baseline on each, and the
worst of them, which ranked it (tuner/run/objective.py). Computed here once; render_objective.py
writes it as markdown and html_objective.py draws it."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.report.schema import Report, TrialReport
from tuner.scoring.gain import gain


@dataclass(frozen=True)
class Cell:
    tokens_per_s: float | None
    gain: float | None
    status: str  # "ok", or why it has no figure: "infeasible", "failed", ...


# What the table shows and why no held-out check follows, for report.md and report.html alike;
# ``{gain}`` says where each renderer writes the gain beside a figure.
INTRO = (
    "Each configuration was measured on its own server on every workload, one capacity search "
    "each, and ranked by the least of its gains over the baseline there: output tokens/s at the "
    "capacity on each, {gain}. A configuration not measured on every workload is not ranked. "
    "These workloads ranked the search, so none of them is held out: no held-out check follows."
)


@dataclass(frozen=True)
class RobustRow:
    label: str  # "baseline" or "trial N"
    cells: list[Cell]  # the tuned workload's first, then each other workload's
    worst_gain: float | None
    recommended: bool


@dataclass(frozen=True)
class RobustView:
    workloads: list[str]  # the tuned workload's spec first
    rows: list[RobustRow]
    sentence: str  # what ranked the recommendation, in a plain sentence


def robust_view(r: Report) -> RobustView | None:
    """The view, or None where the run ranked by the tuned workload alone."""
    if r.objective != "robust" or r.baseline is None:
        return None
    base = r.baseline
    measured = [t for t in [base, *r.trials] if t.status == "ok" or t.across]
    # the workloads as the configuration measured on most of them names them
    others = [a.workload for a in max((t.across for t in measured), key=len, default=[])]
    rec = r.recommended.from_trial if r.recommended is not None else None
    rows = [_row(t, base, rec, len(others)) for t in measured]
    return RobustView(
        workloads=[str(r.workload.get("spec") or r.workload.get("kind")), *others],
        rows=rows,
        sentence=_sentence(r, rows, 1 + len(others)),
    )


def _row(t: TrialReport, base: TrialReport, rec: int | None, n: int) -> RobustRow:
    tuned = gain(t.score_tokens_per_s, base.score_tokens_per_s)
    cells = [Cell(t.score_tokens_per_s, tuned, t.status)]
    cells += [Cell(a.score_tokens_per_s, a.gain, a.status) for a in t.across]
    cells += [Cell(None, None, "not measured")] * (n - len(t.across))
    label = "baseline" if t.number == 0 else f"trial {t.number}"
    return RobustRow(label, cells, t.worst_gain, t.number == rec)


def _sentence(r: Report, rows: list[RobustRow], n: int) -> str:
    chosen = next((x for x in rows if x.recommended), None)
    if chosen is None:
        return f"Configurations were ranked by their worst gain over the {n} workloads."
    if chosen.label == "baseline":
        return (
            f"Ranked by the worst gain over the {n} workloads, no configuration beat the "
            "engine's defaults on all of them."
        )
    worst = chosen.worst_gain
    shown = f"{worst:.2f}x" if worst is not None else "-"
    return (
        f"Ranked by the worst gain over the {n} workloads: {chosen.label} is recommended, at "
        f"least {shown} the baseline on each of them (search figures)."
    )
