"""The stage waterfall of a report, computed once: the baseline, the configuration carried out
of each stage (with why it is unchanged, where it is), and the confirmed figure, each with its
gains over the step before and over the baseline, and what a gain over a lower bound can say
(render_cells.ratio_word). report.md (render_stages.py) and report.html (views.py) draw it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from tuner.report.render_cells import lower_bound, quality_text, ratio_word, speculative_text
from tuner.report.schema import Recommendation, Report, StageReport, TrialReport
from tuner.report.text import load_text


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str  # "baseline", "after batching", "confirmed"
    trial: int | None
    tokens_per_s: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    tpot_p50: float | None
    tpot_p99: float | None
    note: str = ""  # "skipped: ...", "unchanged", "confirmed at 8.7 req/s"
    # what the step is: a configuration's score, a stage skipped, a stage where nothing met
    # the SLOs, a baseline that meets them at no load, or the confirmed figure
    kind: Literal["scored", "skipped", "none", "no_load", "confirmed"] = "scored"
    lower_bound: bool = False  # the score is a lower bound: every load tried held
    step_gain: float | None = None  # over the step before that had a score
    # what the gain can say where a score is a lower bound (render_cells.ratio_word)
    step_gain_word: str = ""
    vs_baseline: float | None = None  # over the baseline's score (confirmed: the claimed gain)
    vs_baseline_word: str = ""
    quality: str = "-"
    speculative: str = "-"
    load: str | None = None  # the confirmed figure's load


def _step(label: str, t: TrialReport | None, note: str = "", **kw: Any) -> Step:
    m = t.metrics if t else None
    return Step(
        label=label,
        trial=t.number if t else None,
        tokens_per_s=t.score_tokens_per_s if t else None,
        ttft_p50=m.ttft_ms.p50 if m else None,
        ttft_p99=m.ttft_ms.p99 if m else None,
        tpot_p50=m.tpot_ms.p50 if m else None,
        tpot_p99=m.tpot_ms.p99 if m else None,
        note=note,
        **kw,
    )


def _unchanged(s: StageReport | None, carried: TrialReport, by: dict[int, TrialReport]) -> str:
    """Why a stage carried out what it carried in: nothing scored higher, or what did may not
    lead (barred by a gate, or a quality cost its gain does not pay: tuner/run/quality_paid.py)."""
    score = carried.score_tokens_per_s or 0.0
    higher = [
        t
        for n in (s.trials if s is not None else [])
        if (t := by.get(n)) is not None
        and t.status == "ok"
        and (t.score_tokens_per_s or 0.0) > score
    ]
    top = max(higher, key=lambda t: t.score_tokens_per_s or 0.0, default=None)
    if top is not None and top.rejected:
        return f"unchanged: trial {top.number} scored higher but is barred ({top.rejected})"
    if top is None or top.quality is None:
        # (a higher search score without a quality cost is behind by its current estimate)
        return "unchanged: nothing better"
    return (
        f"unchanged: trial {top.number} scored higher, but its gain is not established "
        "against its quality cost (see the notes)"
    )


def waterfall_steps(r: Report) -> list[Step]:
    """The baseline, the configuration carried out of each stage, and the confirmed figure,
    each with its gains: computed once here, drawn by report.md and report.html."""
    if r.baseline is None:
        return []
    by_number = {t.number: t for t in [r.baseline, *r.trials]}
    base = r.baseline.score_tokens_per_s
    rows: list[tuple[str, TrialReport | None, StageReport | None]] = [
        ("baseline", r.baseline, None)
    ]
    rows += [
        (f"after {s.name}", by_number.get(s.best_trial) if s.best_trial is not None else None, s)
        for s in r.stages
    ]
    steps: list[Step] = []
    prev, prev_number, prev_trial = base, None, r.baseline
    for label, t, s in rows:
        if s is not None and s.status == "skipped":
            steps.append(_step(label, None, f"skipped: {s.reason}", kind="skipped"))
            continue
        if t is None or (s is not None and s.status != "run"):
            steps.append(_step(label, None, "nothing met the SLOs", kind="none"))
            continue
        if t.number == 0 and t.score_tokens_per_s is None:
            steps.append(_step(label, t, t.status, kind="no_load"))
            prev_number = 0
            continue
        score = t.score_tokens_per_s or 0.0
        unchanged = t.number == prev_number
        steps.append(
            _step(
                label, t, _unchanged(s, t, by_number) if unchanged else "",
                lower_bound=lower_bound(t),
                step_gain=score / prev if prev else None,
                step_gain_word=ratio_word(t, prev_trial) if t is not prev_trial else "",
                vs_baseline=score / base if base else None,
                vs_baseline_word=ratio_word(t, r.baseline) if t.number != 0 else "",
                quality=quality_text(t.quality), speculative=speculative_text(t),
            )
        )  # fmt: skip
        prev_number = t.number
        if score:
            prev, prev_trial = score, t
    rec = r.recommended
    if rec is not None:
        m = rec.metrics
        steps.append(
            Step(
                label="confirmed",
                trial=rec.from_trial,
                tokens_per_s=m.output_tokens_per_s,
                ttft_p50=m.ttft_ms.p50,
                ttft_p99=m.ttft_ms.p99,
                tpot_p50=m.tpot_ms.p50,
                tpot_p99=m.tpot_ms.p99,
                note=f"{where_confirmed(rec)}, {rec.n_requests} requests",
                kind="confirmed",
                vs_baseline=rec.gain_vs_baseline,
                quality=quality_text(m.quality),
                speculative="-"
                if m.acceptance_rate is None
                else f"accepted {m.acceptance_rate:.0%}",
                load=load_text(rec.load),
            )
        )
    return steps


def where_confirmed(rec: Recommendation) -> str:
    """Where the claim was measured: a fresh start of its launch command, the server its search
    ran on (the time budget held no restart: tuner/run/sizing.py ``confirm_in_place``), or the
    running endpoint autotune did not start."""
    if rec.fresh_start:
        return "a fresh start"
    return "its search's own start" if rec.launch_command is not None else "the running endpoint"
