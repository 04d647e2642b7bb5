"""Every workload kind through the tuner and ``autotune probe`` on the fake engine (issue 32):
the tokenizer is loaded for it, its points follow its own arrivals, and report.json describes
what was sent (probes.describe) from the points' records, with report.md's one line of it.

The fake server counts words, not tokens, so the figures checked are the client's: the
prompts' tokens as the workload built them (tests.fakes.tokenizer.CharTokenizer: one character
a token, plus BOS) and the tokens each shares with an earlier request of its point, computed
here from the workload's own rules, apart from the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from probes.arrivals import trace_offsets
from probes.client import LoadClient, run_load
from probes.metrics import judge, summarize
from probes.prefixes import Sessions
from probes.workload import (
    FileItem,
    FileWorkload,
    TraceWorkload,
    parse_workload,
    prepare_requests,
)
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.tokenizer import CharTokenizer
from tests.unit.run_state import run_state
from tests.unit.test_runner import HW, FakeEngine, _options
from tuner.cli.main import app
from tuner.engines.hardware import detect_hardware
from tuner.report.render import render_markdown
from tuner.report.schema import PointReport, Report, TrialReport
from tuner.run.assemble import assemble
from tuner.run.runner import Runner
from tuner.storage.records import write_records

BOS = 1  # CharTokenizer's one special token


def _tune(tmp_path: Path, spec: str, **kw: Any) -> tuple[Report, dict[str, Any], Path]:
    """A rate search of the fake's baseline alone, on workload ``spec``."""
    opts = _options(
        tmp_path,
        workload=parse_workload(spec),
        load_model="rate",
        trials=0,
        start_rate_rps=8.0,
        search_point_s=1.0,
        search_min_requests=20,
        confirm_requests=40,
        **kw,
    )
    lines: list[str] = []
    runner = Runner(
        opts,
        lines.append,
        engine=FakeEngine(),
        hardware=HW,
        tokenizer_loader=lambda path: CharTokenizer(),
    )
    report = runner.run()
    assert report.status == "complete", lines
    data = json.loads((runner.out / "report.json").read_text())
    return report, data, runner.out


def _points(data: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """Each measured point's records (as report.json names their files)."""
    points = [p for t in [data["baseline"], *data["trials"]] for p in t["points"]]
    assert points
    return [
        [json.loads(x) for x in Path(p["records_file"]).read_text().splitlines()] for p in points
    ]


def _check_sent(data: dict[str, Any], inputs: list[list[int]], shared: list[list[int]]) -> None:
    """report.json's ``workload.sent`` against each point's prompts (``inputs``) and shared
    tokens (``shared``), both listed in the point's request order."""
    sent = data["workload"]["sent"]
    n = sum(len(x) for x in inputs)
    assert sent["requests"] == n
    flat = sorted(x for p in inputs for x in p)
    assert sent["input_tokens"]["mean"] == pytest.approx(sum(flat) / n)
    assert min(flat) <= sent["input_tokens"]["p50"] <= sent["input_tokens"]["p99"] <= max(flat)
    assert sent["prefix_share"] == pytest.approx(sum(map(sum, shared)) / sum(flat))


@pytest.mark.timeout(180)
def test_a_pairs_workload_in_prefix_groups_with_gamma_arrivals_is_tuned(tmp_path: Path) -> None:
    pairs = [(100, 4), (140, 8), (90, 4)]
    path = tmp_path / "pairs.csv"
    path.write_text("input,output\n" + "".join(f"{i},{o}\n" for i, o in pairs))
    spec = f"pairs:{path},prefix_groups=1,prefix_len=60,arrivals=gamma,cv=2"
    report, data, out = _tune(tmp_path, spec, probe=True)  # the probe's sweeps take it too
    assert report.probe is not None and report.probe.decode_sweep
    w = data["workload"]
    assert w["kind"] == "pairs" and w["spec"] == spec
    assert w["parameters"]["prefix"] == {"groups": 1, "length": 60, "share": 1.0}
    assert w["parameters"]["arrivals"] == {"kind": "gamma", "cv": 2.0}
    points = _points(data)
    # Each point starts afresh (a fresh salt): its requests cycle the file from its first
    # pair; all but its first start with the group's prefix, BOS and 60 tokens.
    inputs = [[pairs[i % 3][0] for i in range(len(p))] for p in points]
    shared = [[0] + [BOS + 60] * (len(p) - 1) for p in points]
    assert [[r["n_prompt_expected"] for r in p] for p in points] == inputs
    assert [[r["max_tokens"] for r in p] for p in points] == [
        [pairs[i % 3][1] for i in range(len(p))] for p in points
    ]
    _check_sent(data, inputs, shared)
    md = (out / "report.md").read_text()
    assert "open-loop gamma arrivals (cv 2) at a request rate" in md
    assert f"**Workload sent**: {w['sent']['requests']} requests; prompt tokens mean" in md
    assert any("serving model simulates Poisson arrivals, unlike" in n for n in data["notes"])


def _mooncake(path: Path, times_ms: list[float]) -> Path:
    """Rows of 40-59 tokens, every one starting with the same two blocks (hash ids 0, 1)."""
    rows = [
        {"timestamp": t, "input_length": 40 + i % 20, "output_length": 3, "hash_ids": [0, 1]}
        for i, t in enumerate(times_ms)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.timeout(180)
def test_a_trace_is_tuned_on_its_own_times_at_its_rate_equivalent(tmp_path: Path) -> None:
    times = [0, 40, 45, 50, 200, 210, 260, 400, 401, 402, 403, 600, 700, 720, 900, 1000]
    times += [1100, 1105, 1300, 1310, 1500, 1700, 1702, 1900, 2000]
    spec = f"trace:{_mooncake(tmp_path / 'trace.jsonl', times)},block=16"
    wl = parse_workload(spec)
    assert isinstance(wl, TraceWorkload) and wl.rate_rps is not None
    _, data, out = _tune(tmp_path, spec)
    w = data["workload"]
    assert w["kind"] == "trace" and w["spec"] == spec
    assert w["parameters"]["rows"] == len(times)
    assert w["time_scale_per_rps"] == pytest.approx(1 / wl.rate_rps)
    assert any("rate equivalent" in n for n in data["notes"])
    # Every point replays the trace's rows from its first, at time scale rate / its own rate.
    base = data["baseline"]
    for point, recs in zip(base["points"], _points(data), strict=True):
        scale = point["load"]["rate_rps"] / wl.rate_rps
        t0 = recs[0]["t_sched"]
        got = [r["t_sched"] - t0 for r in recs]
        assert got == pytest.approx(trace_offsets(wl.times_s, len(recs), scale), abs=1e-9)
    points = _points(data)
    inputs = [[wl.rows[i % len(times)].input for i in range(len(p))] for p in points]
    # Both blocks of 16 fit every row's input: shared by all but a point's first request.
    shared = [[0] + [BOS + 2 * 16] * (len(p) - 1) for p in points]
    assert [[r["n_prompt_expected"] for r in p] for p in points] == inputs
    _check_sent(data, inputs, shared)
    md = (out / "report.md").read_text()
    assert "replay of the trace's own times at a request rate (its rate equivalent" in md


@pytest.mark.timeout(180)
def test_multi_turn_sessions_are_tuned_and_keep_the_synthetic_keys(tmp_path: Path) -> None:
    spec = "synthetic:input=30,output=4,turns=3,sessions=2"
    _, data, out = _tune(tmp_path, spec)
    w = data["workload"]
    assert (w["kind"], w["spec"], w["input_len"], w["output_len"], w["spread"]) == (
        "synthetic",
        spec,
        30,
        4,
        0.0,
    )
    assert w["parameters"]["sessions"] == {"turns": 3, "width": 2}
    # Turn k's prompt is turn k-1's, its answer's 4 tokens and 30 of its own (BOS counted
    # once): 30, 64, 98 tokens, sharing all of the turn before.
    sessions = Sessions(turns=3, width=2)
    size = {0: 30, 1: 64, 2: 98}
    inputs, shared = [], []
    for p in _points(data):
        turns = [sessions.place(i)[1] for i in range(len(p))]
        inputs.append([size[k] for k in turns])
        shared.append([size[k - 1] if k else 0 for k in turns])
    assert [[r["n_prompt_expected"] for r in p] for p in _points(data)] == inputs
    _check_sent(data, inputs, shared)
    assert "open-loop Poisson arrivals at a request rate" in (out / "report.md").read_text()


def test_an_endpoint_run_loads_the_tokenizer_for_a_trace_and_says_its_rate_equivalent(
    tmp_path: Path,
) -> None:
    from tuner.engines.endpoint import EndpointEngine

    path = _mooncake(tmp_path / "trace.jsonl", [0, 500, 1000, 2000])  # 3 arrivals in 2 s
    seen: list[str] = []

    def loader(source: str) -> CharTokenizer:
        seen.append(source)
        return CharTokenizer()

    with FakeOpenAIServer(model="served-name") as srv:
        opts = _options(
            tmp_path, model="", engine="endpoint", endpoint=srv.base_url, space_file=None,
            workload=parse_workload(f"trace:{path}"), load_model="rate",
        )  # fmt: skip
        runner = Runner(
            opts, lambda m: None, engine=EndpointEngine(), hardware=HW, tokenizer_loader=loader
        )
        runner._prepare()
    assert seen == ["served-name"] and runner.state.tokenizer is not None
    assert any("time scale R / 1.5 (its own mean rate" in n for n in runner.state.notes)


def test_the_serving_model_predicts_for_a_trace_from_the_runs_records(tmp_path: Path) -> None:
    """The guide takes the lengths from the measured records, whatever the workload (it
    simulates Poisson arrivals: the run notes that)."""
    from tests.unit.test_guide import _baseline, _state
    from tuner.search.guide import Guide

    st = _state(tmp_path)
    trace = parse_workload(f"trace:{_mooncake(tmp_path / 'trace.jsonl', [0, 10, 400, 900])}")
    st.opts = st.opts.model_copy(update={"workload": trace})
    _baseline(st, 600.0)
    c = Guide(st).predict({})
    assert c is not None and c.basis == "calibrated" and c.prediction.tokens_per_s > 0


def _report_of(tmp_path: Path, workload: Any) -> Report:
    """The report of a run state holding one measured point of ``workload``: 6 requests sent
    to the fake server, their records written as a trial's are."""
    st = run_state(tmp_path)
    st.opts = st.opts.model_copy(update={"workload": workload})
    st.engine = FakeEngine()  # type: ignore[assignment]  # its name and version, for the report
    reqs = prepare_requests(workload, 6, model="m", tokenizer=CharTokenizer(), seed=1)
    with FakeOpenAIServer(ttft_ms=1, itl_ms=0) as srv:
        res = run_load(LoadClient(srv.base_url), reqs, concurrency=2)
    path = tmp_path / "c2.jsonl"
    write_records(path, res.records)
    metrics = summarize(res.records, st.opts.slos)
    point = PointReport(
        load={"rate_rps": 1.0},
        metrics=metrics,
        verdict=judge(metrics, st.opts.slos, 0.01),
        records_file=str(path),
    )
    st.baseline = TrialReport(
        number=0, stage="baseline", params={}, args=[], env={}, launch_command=[], status="ok",
        points=[point],
    )  # fmt: skip
    return assemble(st, "complete", None)


@pytest.mark.timeout(60)
def test_a_synthetic_workload_keeps_its_keys_and_adds_what_was_sent(tmp_path: Path) -> None:
    w = _report_of(tmp_path, parse_workload("synthetic:input=50,output=3")).workload
    assert {k: w[k] for k in ("kind", "input_len", "output_len", "spread", "spec")} == {
        "kind": "synthetic",
        "input_len": 50,
        "output_len": 3,
        "spread": 0.0,
        "spec": "synthetic:input=50,output=3",
    }
    assert w["sent"] == {
        "requests": 6,
        "input_tokens": {"mean": 50.0, "p50": 50.0, "p99": 50.0},
        "output_tokens": {"mean": 3.0, "p50": 3.0, "p99": 3.0},
        "prefix_share": 0.0,
    }


@pytest.mark.timeout(60)
def test_a_file_workload_keeps_its_path_and_size_and_no_spec(tmp_path: Path) -> None:
    """Runs compare a file by its name and size (compare_runs): no spec to tell them apart by
    the path."""
    items = (FileItem(prompt="a b c", max_tokens=2), FileItem(prompt="d", max_tokens=5))
    report = _report_of(tmp_path, FileWorkload(path="/elsewhere/w.jsonl", items=items))
    w = report.workload
    assert "spec" not in w
    assert (w["kind"], w["path"], w["n_items"]) == ("file", "/elsewhere/w.jsonl", 2)
    assert w["sent"]["requests"] == 6 and w["sent"]["input_tokens"] is None
    assert w["sent"]["output_tokens"]["mean"] == pytest.approx((2 + 5) / 2)
    assert (
        "**Workload sent**: 6 requests; prompt tokens not counted; output tokens asked mean 4, "
        "p50 4, p99 5; prefix share not counted." in render_markdown(report)
    )


# ----------------------------------------------------------------------------- autotune probe


FAKE_SPACE = "engine: fake\ndevice: {device}\nstages: []\n"


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``autotune probe --engine fake`` starts tests/fakes/openai_server.py."""
    from tuner.engines import ENGINES
    from tuner.runs import probe_run

    space = tmp_path / "fake-space.yaml"
    space.write_text(FAKE_SPACE.format(device=detect_hardware().device))
    monkeypatch.setitem(ENGINES, "fake", FakeEngine)
    monkeypatch.setattr(probe_run, "space_path", lambda engine, device: space)


def _probe(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "probe.json"
    res = CliRunner().invoke(
        app,
        [
            *("probe", "--model", "smollm2-135m", "--engine", "fake"),
            *("--output", str(tmp_path), "--json", str(out), *args),
        ],
    )
    assert res.exit_code == 0, res.output
    data: dict[str, Any] = json.loads(out.read_text())
    data["printed"] = res.output
    return data


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("fake_engine")
def test_a_probe_of_a_pairs_workload_builds_its_prompts_with_the_models_tokenizer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text("input,output\n120,3\n60,5\n90,2\n")
    data = _probe(
        tmp_path, "--workload", f"pairs:{path}", "--rate", "20", "--requests", "9", "--warmup", "2"
    )
    w = data["workload_sent"]
    assert w["kind"] == "pairs" and w["sent"]["requests"] == 9
    # after the warm-up's two, the measured requests go on through the file: 90, 120, 60, ...
    assert w["sent"]["input_tokens"]["mean"] == pytest.approx(90.0)
    assert w["sent"]["output_tokens"]["mean"] == pytest.approx(10 / 3)
    assert data["load"] == {"rate_rps": 20.0}
    assert "  sent: 9 requests; prompt tokens mean 90, p50 90, p99 120;" in data["printed"]


@pytest.mark.timeout(120)
@pytest.mark.usefixtures("fake_engine")
def test_a_probe_of_a_trace_given_no_load_replays_it_at_its_specs_scale(tmp_path: Path) -> None:
    times = [0, 100, 150, 400, 420, 700, 1000, 1010, 1200, 1500]
    path = _mooncake(tmp_path / "trace.jsonl", times)
    wl = parse_workload(f"trace:{path},scale=2")
    assert isinstance(wl, TraceWorkload) and wl.rate_rps is not None
    data = _probe(
        tmp_path, "--workload", f"trace:{path},scale=2,block=16", "--requests", "8", "--warmup", "2"
    )
    assert data["load"]["rate_rps"] == pytest.approx(2 * wl.rate_rps)
    w = data["workload_sent"]
    assert w["kind"] == "trace" and w["sent"]["requests"] == 8
    # Rows 2-9 (42-49 tokens: the model's tokenizer adds no special token) each start with
    # the two 16-token blocks row 0 sent first, in the warm-up.
    assert w["sent"]["prefix_share"] == pytest.approx(8 * 32 / sum(range(42, 50)))
