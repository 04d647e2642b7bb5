"""The held-out check (``--check-workload``, tuner/run/held_out.py) on the fake engine: after the
confirmation, the baseline and the recommendation are each started again and scored on every
held-out workload, side by side, with the gain there beside the tuned gain; bad values are
refused before anything starts; the report says plainly when the recommendation loses to the
defaults on a held-out workload, and only then.

The fake's batch limit is the knob (tests/unit/test_runner.py): the recommendation (a limit of
8) serves four times the baseline's (2) at once, so it holds its gain on every workload here.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from probes.derive import DERIVED_P99_RATIO, derive
from probes.kinds import SyntheticWorkload
from probes.workload import WorkloadError, parse_workload
from tests.fakes.tokenizer import CharTokenizer
from tests.unit.run_state import run_state
from tests.unit.test_runner import HW, FakeEngine, _options
from tuner.cli.main import app
from tuner.engines.lifetime import leftovers
from tuner.options import TuneOptions
from tuner.report.held_out_view import held_out_view
from tuner.report.html import render_html
from tuner.report.render import render_markdown, render_summary
from tuner.report.schema import HeldOutReport, Report, TrialReport
from tuner.report.views import build
from tuner.run import held_out, sizing
from tuner.run.assemble import assemble
from tuner.run.budget import Budget
from tuner.run.runner import Runner

LOSES = "loses to the engine's defaults"
TUNED = "synthetic:input=40,output=8"


def _file(tmp_path: Path, max_tokens: int) -> Path:
    path = tmp_path / f"held-{max_tokens}.jsonl"
    path.write_text(
        "\n".join(json.dumps({"prompt": f"a b c {i}", "max_tokens": max_tokens}) for i in range(4))
    )
    return path


def _runner(tmp_path: Path, checks: list[str], progress: object) -> Runner:
    opts = _options(
        tmp_path,
        workload=parse_workload(TUNED),
        trials=1,
        check_workloads=[w if w == "derived" else parse_workload(w) for w in checks],
    )
    return Runner(
        opts,
        progress,  # type: ignore[arg-type]
        engine=FakeEngine(),
        hardware=HW,
        tokenizer_loader=lambda path: CharTokenizer(),
    )


@pytest.mark.timeout(240)
def test_both_configurations_are_scored_on_each_held_out_workload(tmp_path: Path) -> None:
    held = _file(tmp_path, 16)
    lines: list[str] = []
    runner = _runner(tmp_path, ["derived", str(held)], lines.append)
    report = runner.run()
    assert report.status == "complete"
    rec, base = report.recommended, report.baseline
    assert rec is not None and rec.from_trial == 1 and base is not None
    data = json.loads((runner.out / "report.json").read_text())
    assert len(data["held_out"]) == 2
    derived, from_file = report.held_out
    # "derived": the tuned workload's means, lognormal (p99 4x), said in the report
    assert derived.workload["spec"].startswith(
        f"synthetic:input=40,output=8,in_p99={DERIVED_P99_RATIO * 40}"
    )
    assert derived.derived is not None and "lognormal" in derived.derived
    assert from_file.workload["spec"] == str(held) and from_file.derived is None
    seen_numbers = set()
    for e in report.held_out:
        b, r = e.baseline, e.recommended
        assert b is not None and r is not None
        # each configuration as it was launched: the baseline's limit of 2, the winner's 8
        assert b.params == base.params
        assert r.params == {"max_concurrent": 8, "broken": False}
        assert b.launch_command[b.launch_command.index("--max-concurrent") + 1] == "2"
        assert r.launch_command[r.launch_command.index("--max-concurrent") + 1] == "8"
        assert b.status == r.status == "ok"
        assert b.score_tokens_per_s and r.score_tokens_per_s
        assert e.gain == pytest.approx(r.score_tokens_per_s / b.score_tokens_per_s)
        assert e.gain > 1
        assert e.tuned_gain == rec.gain_vs_baseline and e.tuned_basis == "confirmed"
        assert e.skipped is None
        # its points and records kept, the workload described from what they sent
        for t in (b, r):
            assert t.points and t.number >= 900
            seen_numbers.add(t.number)
            for p in t.points:
                assert len(Path(p.records_file).read_text().splitlines()) == p.metrics.n_requests
        assert e.workload["sent"]["requests"] > 0
    assert len(seen_numbers) == 4  # a record of its own per configuration and workload
    assert from_file.workload["sent"]["output_tokens"]["mean"] == 16
    assert (runner.out / "held_out" / "baseline.server.log").is_file()
    assert (runner.out / "held_out" / "recommended.server.log").is_file()
    assert not leftovers(runner.run_id)
    # said while it ran, and in every form of the report
    assert any("held-out check: starting the baseline again" in x for x in lines)
    assert any("held-out check: derived from the tuned workload: " in x for x in lines)
    said = [x.split("] ", 1)[-1] for x in lines]
    assert any(x.startswith("held-out 2: ") and "x the baseline" in x for x in said)
    md = (runner.out / "report.md").read_text()
    assert "## On workloads it was not tuned for" in md
    assert f"`{held}`" in md and LOSES not in md
    assert "at least as fast as the engine's defaults on every held-out workload" in md
    page = html.unescape((runner.out / "report.html").read_text())
    assert 'id="held-out"' in page and LOSES not in page
    assert "check_workloads" not in data["options"]
    # Under a budget with no room left for it, the check is skipped, with the reason, and
    # starts nothing.
    st, starts = runner.state, runner.state.clock.engine_starts
    st.budget = Budget(5.0)
    held_out.check(st, runner.evaluator)
    skipped = [e.skipped or "" for e in st.held_out]
    assert [why.startswith("time budget: ") for why in skipped] == [True, True]
    assert st.clock.engine_starts == starts
    view = held_out_view(assemble(st, "complete", None))
    assert view is not None
    assert view.verdict.startswith("No held-out gain was measured: time budget")


@pytest.mark.timeout(240)
def test_ctrl_c_during_the_check_keeps_what_was_measured_and_stops_the_engine(
    tmp_path: Path,
) -> None:
    def progress(line: str) -> None:
        if "held-out 1, the baseline: c=" in line:  # its first point, written
            raise KeyboardInterrupt

    runner = _runner(tmp_path, [str(_file(tmp_path, 16))], progress)
    report = runner.run()
    assert report.status == "interrupted"
    data = json.loads((runner.out / "report.json").read_text())
    assert data["status"] == "interrupted"
    (entry,) = data["held_out"]
    base = entry["baseline"]
    assert len(base["points"]) == 1
    assert Path(base["points"][0]["records_file"]).read_text().strip()
    assert base["estimate"] is not None  # scored from what it measured
    assert entry["recommended"] is None and entry["gain"] is None
    assert not leftovers(runner.run_id)


# ---------------------------------------------------------------- bad input
GAMMA = "synthetic:input=64,output=8,arrivals=gamma,cv=2"
BAD: dict[str, tuple[list[str], str]] = {
    "a malformed spec": (
        ["--check-workload", "synthetic:input=abc,output=8"],
        "--check-workload: workload",
    ),
    "derived from a file of prompts": (
        ["--workload", "{file}", "--check-workload", "derived"],
        "derived needs a workload",
    ),
    "bursty arrivals in a closed loop": (
        ["--load", "concurrency", "--check-workload", GAMMA],
        f"ignores --check-workload {GAMMA}'s arrivals",
    ),
    "an endpoint": (
        ["--engine", "endpoint", "--endpoint", "http://127.0.0.1:9", "--check-workload", "derived"],
        "needs an engine autotune starts, not an endpoint",
    ),
    "prompts too short to build": (
        ["--check-workload", "synthetic:input=3,output=8"],
        "a prompt of 3 tokens cannot be built",
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_check_workloads_are_one_line_and_exit_2_before_anything_starts(
    tmp_path: Path, case: str
) -> None:
    extra, needle = BAD[case]
    out = tmp_path / "results"
    extra = [x.replace("{file}", str(_file(tmp_path, 8))) for x in extra]
    args = ["--model", "smollm2-135m", "--slo", "ttft=2s", "--output", str(out), *extra]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 2, res.output
    errors = [x for x in res.output.splitlines() if x.startswith("autotune: error:")]
    assert len(errors) == 1 and needle in errors[0], res.output
    assert "Traceback" not in res.output
    assert not out.exists()  # nothing started


def test_check_workloads_survive_the_run_json_a_resume_reads(tmp_path: Path) -> None:
    opts = _options(
        tmp_path,
        workload=parse_workload(TUNED),
        check_workloads=["derived", parse_workload(str(_file(tmp_path, 8)))],
    )
    again = TuneOptions.model_validate(opts.model_dump(mode="json"))
    assert again.check_workloads == opts.check_workloads
    assert again.held_out == opts.held_out


# ---------------------------------------------------------------- derived
def test_derived_fixed_lengths_become_lognormal_of_the_same_means() -> None:
    d = derive(parse_workload("synthetic:input=512,output=128,prefix_groups=2,prefix_len=64"))
    wl = d.workload
    assert (wl.input_len, wl.output_len) == (512, 128)
    assert wl.input_dist is not None and wl.input_dist.p99 == 4 * 512
    assert wl.output_dist is not None and wl.output_dist.p99 == 4 * 128
    assert wl.prefix is not None and wl.prefix.length == 64  # its shape kept
    assert "lognormal" in d.what and "prefix_groups=2" in d.what


def test_derived_heavy_tailed_lengths_become_fixed_at_their_means(tmp_path: Path) -> None:
    d = derive(parse_workload("synthetic:input=512,output=128,in_p99=2048"))
    assert isinstance(d.workload, SyntheticWorkload)
    assert d.workload.input_dist is None and d.workload.output_dist is None
    assert (d.workload.input_len, d.workload.output_len) == (512, 128)
    assert "fixed lengths" in d.what
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("input,output\n" + "100,10\n" * 98 + "5000,400\n" * 2)
    assert derive(parse_workload(f"pairs:{pairs}")).workload.input_dist is None


def test_derived_from_a_file_of_prompts_is_refused(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="a file of written prompts has none"):
        derive(parse_workload(str(_file(tmp_path, 8))))


def test_a_length_too_short_for_a_tail_stays_fixed() -> None:
    d = derive(parse_workload("synthetic:input=20,output=64"))
    assert d.workload.input_dist is None and d.workload.output_dist is not None
    assert "input kept fixed" in d.what


# ---------------------------------------------------------------- the verdict
def _trial(number: int, score: float) -> TrialReport:
    return TrialReport(
        number=number, stage="held-out", params={}, args=[], env={}, launch_command=[],
        status="ok", score_tokens_per_s=score, load={"concurrency": 4.0},
    )  # fmt: skip


def _with_gains(tmp_path: Path, gains: list[float]) -> Report:
    st = run_state(tmp_path)
    st.engine = FakeEngine()  # type: ignore[assignment]  # its name and version, for the report
    held = [
        HeldOutReport(
            workload={"kind": "synthetic", "spec": f"synthetic:input={100 * (k + 1)},output=8"},
            baseline=_trial(900 + 2 * k, 100.0),
            recommended=_trial(901 + 2 * k, 100.0 * g),
            gain=g,
            tuned_gain=1.5,
            tuned_basis="confirmed",
        )
        for k, g in enumerate(gains)
    ]
    return assemble(st, "complete", None).model_copy(update={"held_out": held})


@pytest.mark.parametrize(("gains", "loses"), [([1.3, 0.8], True), ([1.3, 1.0], False)])
def test_the_report_says_plainly_when_the_recommendation_loses_to_the_defaults(
    tmp_path: Path, gains: list[float], loses: bool
) -> None:
    r = _with_gains(tmp_path, gains)
    view = held_out_view(r)
    assert view is not None
    assert [x.loses for x in view.rows] == [g < 1 for g in gains]
    md = render_markdown(r)
    page = html.unescape(render_html(build(r)))
    summary = render_summary(r, "results/x")
    assert [LOSES in text for text in (view.verdict, md, page, summary)] == [loses] * 4
    assert "| 1.50x (confirmed) |" in md  # the tuned gain beside each held-out one
    assert ("**0.80x**" in md) is loses
    assert ("synthetic:input=200,output=8 (0.80x the baseline)" in view.verdict) is loses


def test_a_skipped_check_says_why(tmp_path: Path) -> None:
    r = _with_gains(tmp_path, [1.2])
    skipped = r.held_out[0].model_copy(
        update={"baseline": None, "recommended": None, "gain": None, "skipped": "time budget"}
    )
    r = r.model_copy(update={"held_out": [skipped]})
    view = held_out_view(r)
    assert view is not None and view.verdict == "No held-out gain was measured: time budget."
    assert LOSES not in render_markdown(r)


def test_a_robust_run_keeps_no_time_back_for_a_held_out_check(tmp_path: Path) -> None:
    """Ranked by the worst gain, the other workloads are not held out: no check follows the
    confirmation (tests/unit/test_objective.py), and the run keeps no time back for one."""
    st = run_state(tmp_path)
    st.opts = st.opts.model_copy(update={"check_workloads": ["derived"]})
    tuned = sizing.held_out_s(st)
    assert tuned > 0  # two starts and a search per configuration, before any was measured
    st.opts = st.opts.model_copy(update={"objective": "robust"})
    assert sizing.held_out_s(st) == 0.0
    assert sizing.end_reserve_s(st) == sizing.confirm_estimate_s(st)
