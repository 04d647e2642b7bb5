"""The whole tuning loop on a fake engine: tests/fakes/openai_server.py started as a real process.

The fake's batch limit (``--max-concurrent``) is the knob, so its capacity under a TTFT SLO is
known in shape: requests beyond the limit queue, and TTFT grows with the queue.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import pytest

from probes.server_metrics import ServerSeries
from probes.slo import parse_slos
from probes.workload import parse_workload
from tuner.engines.base import HOST, LaunchSpec
from tuner.engines.hardware import Hardware
from tuner.engines.vllm import VLLM_SERIES
from tuner.options import TuneOptions
from tuner.run.runner import Runner
from tuner.run.stall import StallRule

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "tests" / "fakes" / "openai_server.py"

SPACE = """
engine: fake
device: cpu
baseline:
  args: [--max-concurrent, "2"]
  reason: the fake's default batch limit
common:
  args: [--itl-ms, "10"]
stages:
  - name: batching
    knobs:
      - name: max_concurrent
        type: int
        low: 1
        high: 16
        default: 2
        flag: --max-concurrent
      - name: broken
        type: bool
        default: false
        flag: --fail-start
    candidates:
      - {max_concurrent: 8, broken: false}
      - {max_concurrent: 8, broken: true}
"""


class FakeEngine:
    name = "fake"
    supports_ignore_eos = False
    launches = True
    series: ServerSeries | None = VLLM_SERIES  # the fake server mimics vLLM's /metrics

    def version(self) -> str:
        return "fake 1.0"

    def launch_spec(
        self, model_path: str, args: list[str], env: dict[str, str], port: int
    ) -> LaunchSpec:
        argv = [sys.executable, str(FAKE), "--model", model_path, "--host", HOST]
        return LaunchSpec([*argv, "--port", str(port), *args], dict(env))

    def classify_failure(self, log_tail: str, returncode: int | None) -> str:
        return "fake failure" if "Available memory" in log_tail else f"exit {returncode}"


def _options(tmp_path: Path, **kw: object) -> TuneOptions:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    space = tmp_path / "fake.yaml"
    space.write_text(SPACE)
    wl = tmp_path / "wl.jsonl"
    wl.write_text(
        "\n".join(json.dumps({"prompt": f"hello {i}", "max_tokens": 8}) for i in range(5))
    )
    base: dict[str, object] = dict(
        model=str(model),
        engine="fake",
        slos=parse_slos(["ttft=300ms"]),
        workload=parse_workload(str(wl)),
        trials=2,
        load_model="concurrency",
        output_dir=tmp_path / "results",
        space_file=space,
        start_concurrency=2,
        max_concurrency=32,
        search_min_requests=16,
        search_requests_per_slot=2,
        confirm_requests=60,
        startup_timeout_s=30,
        probe=False,
    )
    base.update(kw)
    return TuneOptions(**base)  # type: ignore[arg-type]


HW = Hardware(hostname="h", cpu_model="fake", cpu_count=2, memory_gib=1.0)


def _alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
        return True
    except ProcessLookupError:
        return False


@pytest.mark.timeout(120)
def test_tuning_loop_end_to_end_on_a_fake_engine(tmp_path: Path) -> None:
    lines: list[str] = []
    runner = Runner(_options(tmp_path), lines.append, engine=FakeEngine(), hardware=HW)
    report = runner.run()
    data = json.loads((runner.out / "report.json").read_text())
    assert data["status"] == "complete" == report.status
    assert (runner.out / "report.md").read_text().startswith("# autotune report")
    assert (runner.out / "optuna.journal").stat().st_size > 0
    base = data["baseline"]
    assert base["status"] == "ok" and base["args"] == ["--itl-ms", "10", "--max-concurrent", "2"]
    # Both enqueued candidates ran: one better than the baseline, one that cannot start.
    t1, t2 = data["trials"]
    assert t1["params"] == {"max_concurrent": 8, "broken": False}
    assert t1["status"] == "ok"
    assert t1["score_tokens_per_s"] > base["score_tokens_per_s"]
    assert t2["status"] == "failed" and "fake failure" in t2["error"]
    # baseline, two trials, confirmation, and the baseline again beside trial 1 when the noise
    # made the two too close to call
    assert data["timing"]["engine_starts"] == 4 + len(data["comparisons"])
    rec = data["recommended"]
    assert rec["from_trial"] == 1
    assert rec["launch_command"][:2] == [sys.executable, str(FAKE)]
    assert "--port" in rec["launch_command"]
    assert rec["fresh_start"] is True
    assert (
        "requests after a fresh start from the launch command below."
        in (runner.out / "report.md").read_text()
    )
    assert rec["gain_vs_baseline"] > 1
    # Both figures of the gain were confirmed the same way (the baseline on its own server).
    base_c = data["baseline_confirmation"]
    assert base_c is not None and base_c["n_requests"] >= 60
    assert rec["gain_vs_baseline"] == pytest.approx(
        rec["metrics"]["output_tokens_per_s"] / base_c["metrics"]["output_tokens_per_s"]
    )
    assert "confirmed over confirmed" in rec["gain_basis"]
    # The score is the estimate from every point, with its interval, kept for Optuna too.
    est = t1["estimate"]
    assert est["n_points"] == len({p["load"]["concurrency"] for p in t1["points"]})
    assert est["low"] <= t1["score_tokens_per_s"]
    assert est["high"] is None or t1["score_tokens_per_s"] <= est["high"]
    assert data["load"] == {"model": "concurrency", "unit": "concurrent requests"}
    assert len(data["salt"]) == 8
    assert rec["n_requests"] == rec["metrics"]["n_requests"] >= 60
    assert rec["verdict"]["holds"] is True
    assert rec["provisional"] is True and rec["meets_slo"] is False  # 60 < 459 for p99
    # Every load point was kept with its records, one line per request.
    for t in [base, t1]:
        for p in t["points"]:
            n = len(Path(p["records_file"]).read_text().splitlines())
            assert n == p["metrics"]["n_requests"]
    assert any("trial 1" in line and "capacity" in line for line in lines)
    assert data["stages"][0]["name"] == "batching" and data["stages"][0]["trials"] == [1, 2]


@pytest.mark.timeout(120)
def test_interrupt_writes_the_report_and_stops_the_engine(tmp_path: Path) -> None:
    started: list[int] = []

    class Interrupting(FakeEngine):
        def launch_spec(self, *a: object, **k: object) -> LaunchSpec:
            spec = super().launch_spec(*a, **k)  # type: ignore[arg-type]
            return LaunchSpec([*spec.argv, "--spawn-child"], spec.env)

    def progress(line: str) -> None:
        if "c=" in line and "baseline" in line:  # a point measured on a live engine
            raise KeyboardInterrupt

    runner = Runner(_options(tmp_path), progress, engine=Interrupting(), hardware=HW)
    real_start = __import__("tuner.engines.base", fromlist=["ServerProcess"]).ServerProcess.start

    def spy(self):  # type: ignore[no-untyped-def]
        real_start(self)
        started.append(self.proc.pid)

    import tuner.engines.base as base_mod

    base_mod.ServerProcess.start = spy  # type: ignore[method-assign]
    try:
        report = runner.run()
    finally:
        base_mod.ServerProcess.start = real_start  # type: ignore[method-assign]
    assert report.status == "interrupted"
    data = json.loads((runner.out / "report.json").read_text())
    assert data["status"] == "interrupted"
    # Interrupted after its first point, the baseline is not finished, so the report has no
    # baseline; the point's per-request records are kept in its folder.
    assert data["baseline"] is None
    kept = list((runner.out / "trials" / "000").glob("c*.jsonl"))
    assert kept and all(f.read_text().strip() for f in kept)
    assert started and not any(_alive(pid) for pid in started)


@pytest.mark.timeout(60)
def test_no_load_meets_the_slo_gives_no_recommendation(tmp_path: Path) -> None:
    opts = _options(tmp_path, slos=parse_slos(["ttft=1ms"]), trials=0)
    runner = Runner(opts, lambda m: None, engine=FakeEngine(), hardware=HW)
    report = runner.run()
    assert report.status == "complete"
    assert report.baseline is not None and report.baseline.status == "infeasible"
    assert report.recommended is None
    assert any("no configuration met the SLOs" in n for n in report.notes)


@pytest.mark.timeout(120)
def test_probe_plans_the_stages_and_skips_are_explained(tmp_path: Path) -> None:
    opts = _options(tmp_path, probe=True, trials=1)
    runner = Runner(opts, lambda m: None, engine=FakeEngine(), hardware=HW)
    report = runner.run()
    assert report.probe is not None
    assert [p.concurrency for p in report.probe.decode_sweep] == [1, 2, 4, 8]
    assert report.probe.load_concurrency == 2
    # the sweeps' records are kept in the run folder, for the serving model's calibration
    files = report.probe.records_files
    assert sorted(files) == sorted(
        [f"prefill-{p.prompt_tokens}" for p in report.probe.prefill_sweep]
        + ["decode-c1", "decode-c2", "decode-c4", "decode-c8"]
    )
    assert all(
        Path(f).parent == runner.out / "probe" and Path(f).stat().st_size for f in files.values()
    )
    assert report.probe.device is not None and report.probe.device.memory_bandwidth_gbps > 0
    stages = {s.name: s for s in report.stages}
    assert stages["batching"].status == "run" and stages["batching"].expected is not None
    for name in ("quantisation", "speculative"):
        assert stages[name].status == "skipped"
        assert "has no" in stages[name].reason and "probe:" in stages[name].reason
    md = (runner.out / "report.md").read_text()
    assert "Where the time goes (probe" in md


@pytest.mark.timeout(60)
def test_stages_option_leaves_out_a_stage_with_its_reason(tmp_path: Path) -> None:
    opts = _options(tmp_path, stages=["quantisation"], trials=2)
    runner = Runner(opts, lambda m: None, engine=FakeEngine(), hardware=HW)
    report = runner.run()
    assert report.trials == []
    batching = next(s for s in report.stages if s.name == "batching")
    assert batching.status == "skipped" and "--stages" in batching.reason


SPACE_3 = """
engine: fake
device: cpu
baseline:
  args: [--max-concurrent, "4"]
common:
  args: [--itl-ms, "10"]
stages:
  - name: batching
    knobs:
      - {name: max_concurrent, type: int, low: 1, high: 16, default: 4, flag: --max-concurrent}
  - name: quantisation
    knobs:
      - name: quantization
        type: categorical
        default: none
        options:
          none: {}
          lossy: {args: [--quality-loss, "0.5"]}
          mild: {args: [--quality-loss, "0.001"]}
          noop:
            args: [--log-line, "INFO Quantizing 0 layers of types:"]
            no_effect_log: Quantizing 0 layers
          hangs: {args: [--hang]}
    candidates:
      - {quantization: lossy}
      - {quantization: noop}
      - {quantization: hangs}
      - {quantization: mild}
  - name: speculative
    knobs:
      - name: speculative_method
        type: categorical
        default: none
        options:
          none: {}
          ngram: {json: {--speculative-config: {method: ngram, num_speculative_tokens: 2}}}
      - name: diverge
        type: categorical
        when: {speculative_method: [ngram]}
        options:
          "no": {}
          "yes": {args: [--diverge-at, "3"]}
    candidates:
      - {speculative_method: ngram, diverge: "no"}
      - {speculative_method: ngram, diverge: "yes"}
"""


@pytest.mark.timeout(240)
def test_quality_gate_no_effect_hang_and_exactness_on_a_fake_engine(tmp_path: Path) -> None:
    # Every configuration is as fast as the baseline, and each is measured whole (no early
    # abandonment: under -n 4 beside other suites the fake's timing noise once had "lossy"
    # beaten before its figures were in) and alone (no side-by-side repeat).
    opts = _options(
        tmp_path,
        stages=["quantisation", "speculative"],
        trials=8,
        startup_timeout_s=6,
        tie_band=1.0,
        side_by_side=False,
    )
    (tmp_path / "fake.yaml").write_text(SPACE_3)
    lines: list[str] = []
    runner = Runner(opts, lines.append, engine=FakeEngine(), hardware=HW)
    report = runner.run()
    assert report.status == "complete"
    by = {t.params.get("diverge", t.params.get("quantization")): t for t in report.trials}
    # The quality gate: perplexity against the baseline's e^3, +65 % for "lossy".
    lossy, mild = by["lossy"], by["mild"]
    assert lossy.quality is not None and lossy.quality.metric == "perplexity"
    assert lossy.quality.baseline_value == pytest.approx(math.exp(3.0), rel=1e-6)
    assert lossy.quality.degradation_pct == pytest.approx((math.exp(0.5) - 1) * 100, rel=1e-3)
    assert not lossy.quality.holds and lossy.rejected and "quality" in lossy.rejected
    assert lossy.status == "ok"  # measured as any other: refused for its quality alone
    assert lossy.metrics is not None and lossy.metrics.quality == lossy.quality
    assert mild.quality is not None and mild.quality.holds and not mild.rejected
    assert mild.quality.limit_pct == 1.0  # the default quality SLO
    # An option the log says did nothing is not measured; a hang costs the start-up timeout.
    assert by["noop"].status == "no_effect" and "Quantizing 0 layers" in (by["noop"].error or "")
    assert not by["noop"].points and "INFO Quantizing 0 layers" in (by["noop"].error or "")
    assert "--log-line" not in (by["noop"].error or "")  # the engine's line, not the command
    hang = by["hangs"]
    assert hang.status == "failed" and "start-up timeout" in (hang.error or "")
    # Speculative trials: acceptance from the counters, exactness against the reference.
    same, diff = by["no"], by["yes"]
    for t in (same, diff):
        assert t.stage == "speculative" and t.metrics is not None
        assert t.metrics.acceptance_rate == pytest.approx(0.5)
        assert t.metrics.mean_acceptance_length == pytest.approx(2.0)
        assert t.exactness is not None and t.exactness.checked
    assert same.exactness is not None and same.exactness.identical and not same.rejected
    ex = diff.exactness
    assert ex is not None and ex.identical is False and ex.first_divergence is not None
    assert ex.first_divergence.position == 3 and ex.first_divergence.prompt_index == 0
    assert diff.rejected and "--accept-divergence" in diff.rejected
    ref = runner.state.exactness.reference
    assert ref is not None and ex.reference_trial == ref
    assert ref in (0, mild.number)  # the configuration the speculative stage started from
    assert report.recommended is not None and report.recommended.from_trial != diff.number
    assert report.exactness is not None
    names = [s.name for s in report.stages]
    assert names == ["batching", "quantisation", "speculative"]
    assert [s.status for s in report.stages] == ["skipped", "run", "run"]
    md = (runner.out / "report.md").read_text()
    assert "## Stage by stage" in md and "after quantisation" in md and "after speculative" in md
    assert "outputs diverged (prompt 0, token 3)" in md
    assert any("exactness: diverged" in line for line in lines)


@pytest.mark.timeout(120)
def test_accept_divergence_lets_a_diverging_config_be_recommended(tmp_path: Path) -> None:
    # The diverging configuration is also twice as fast (a 5 ms gap between tokens, against
    # the baseline's 10), so that it leads on speed whatever the noise: what is tested is
    # that divergence, accepted, does not bar it.
    space = (
        SPACE_3.replace('"no": {}\n', "")
        .replace('- {speculative_method: ngram, diverge: "no"}\n', "")
        .replace(
            '"yes": {args: [--diverge-at, "3"]}',
            '"yes": {args: [--diverge-at, "3", --itl-ms, "5"]}',
        )
    )
    opts = _options(
        tmp_path, stages=["speculative"], trials=1, accept_divergence=True, start_concurrency=4
    )
    (tmp_path / "fake.yaml").write_text(space)
    report = Runner(opts, lambda m: None, engine=FakeEngine(), hardware=HW).run()
    (t,) = report.trials
    assert t.exactness is not None and t.exactness.identical is False
    assert t.rejected is None and t.status == "ok"
    assert report.recommended is not None and report.recommended.from_trial == t.number
    assert report.exactness == t.exactness
    assert [v for k, v in zip(t.args, t.args[1:], strict=False) if k == "--itl-ms"][-1] == "5"
    assert report.baseline is not None and report.baseline.score_tokens_per_s
    assert (t.score_tokens_per_s or 0) > report.baseline.score_tokens_per_s


@pytest.mark.timeout(120)
def test_endpoint_mode_searches_only_the_load(tmp_path: Path) -> None:
    from tests.fakes.openai_server import FakeOpenAIServer
    from tuner.engines.endpoint import EndpointEngine

    with FakeOpenAIServer(ttft_ms=5, itl_ms=10, max_concurrent=4) as srv:
        opts = _options(
            tmp_path,
            model="",
            engine="endpoint",
            endpoint=srv.base_url + "/v1",
            trials=3,
            probe=False,
            space_file=None,
        )
        runner = Runner(opts, lambda m: None, engine=EndpointEngine(), hardware=HW)
        report = runner.run()
        n_seen = srv.stats.n_requests
    assert report.status == "complete" and report.endpoint == srv.base_url
    assert report.model == "fake-model" and report.trials == []
    base = report.baseline
    assert base is not None and base.launch_command == [] and base.startup_s is None
    assert 1 <= len(base.points) <= 3  # --trials counts load points
    assert all(s.status == "skipped" and "not tuned" in s.reason for s in report.stages)
    rec = report.recommended
    assert rec is not None and rec.launch_command is None
    assert "not restarted" in rec.confirmation
    assert report.timing is not None and report.timing.engine_starts == 0
    assert any("endpoint mode" in n for n in report.notes)
    assert n_seen > rec.n_requests  # warm-up, search points and confirmation all went there
    md = (runner.out / "report.md").read_text()
    assert "was not started by autotune" in md


def test_endpoint_mode_takes_the_tokenizer_from_the_folder_the_server_reports(
    tmp_path: Path,
) -> None:
    """vLLM lists the model folder it serves as ``root`` in /v1/models: with no --tokenizer
    and no --model, synthetic prompts are built with that folder's tokenizer."""
    from tests.fakes.openai_server import FakeOpenAIServer
    from tests.fakes.tokenizer import CharTokenizer
    from tuner.engines.endpoint import EndpointEngine

    folder = tmp_path / "served-folder"
    folder.mkdir()
    seen: list[str] = []

    def loader(path: str) -> CharTokenizer:
        seen.append(path)
        return CharTokenizer()

    with FakeOpenAIServer(model="served-name", root=str(folder)) as srv:
        opts = _options(
            tmp_path, model="", engine="endpoint", endpoint=srv.base_url, space_file=None,
            workload=parse_workload("synthetic:input=64,output=8"),
        )  # fmt: skip
        runner = Runner(
            opts, lambda m: None, engine=EndpointEngine(), hardware=HW, tokenizer_loader=loader
        )
        runner._prepare()
    assert seen == [str(folder)]
    assert runner.state.tokenizer is not None and runner.state.model_path == "served-name"


def test_endpoint_mode_refuses_a_dead_endpoint(tmp_path: Path) -> None:
    from tuner.engines.base import free_port
    from tuner.engines.endpoint import EndpointEngine, EndpointError

    opts = _options(
        tmp_path, model="", engine="endpoint", endpoint=f"http://127.0.0.1:{free_port()}"
    )
    runner = Runner(opts, lambda m: None, engine=EndpointEngine(), hardware=HW)
    with pytest.raises(EndpointError, match="is not answering"):
        runner.run()


@pytest.mark.timeout(120)
def test_rate_load_model_searches_requests_per_second(tmp_path: Path) -> None:
    # The fake's batch limit 2 and 8 tokens at 10 ms: about 20 requests/s before TTFT queues.
    opts = _options(
        tmp_path,
        load_model="rate",
        trials=0,
        start_rate_rps=8.0,
        search_point_s=1.0,
        search_min_requests=20,
        confirm_requests=40,
    )
    report = Runner(opts, lambda m: None, engine=FakeEngine(), hardware=HW).run()
    base = report.baseline
    assert base is not None and base.status == "ok"
    assert all(set(p.load) == {"rate_rps"} for p in base.points)
    assert base.points[0].load["rate_rps"] == 8.0
    assert base.load is not None and base.load["rate_rps"] > 8.0
    assert report.load == {"model": "rate", "unit": "requests/s"}
    rec = report.recommended
    assert rec is not None and set(rec.load) == {"rate_rps"}
    # The first try is where the fit puts latency at 90 % of the limit: under the capacity
    # (later tries may move up where the full-size points show more room).
    # (The search's own estimate: the baseline's is fitted again once its confirmation's
    # full-size tries join its points, after this first try was chosen.)
    assert rec.search_estimate is not None and rec.search_estimate.load is not None
    assert rec.tries[0].load["rate_rps"] <= rec.search_estimate.load
    data = json.loads((Path(report.baseline.points[0].records_file)).read_text().splitlines()[0])
    assert data["t_sched"] is not None


@pytest.mark.timeout(120)
def test_meets_slo_needs_the_full_sample_and_the_headroom(tmp_path: Path) -> None:
    # p50 needs 7 requests: 60 are enough, so the headroom decides.
    roomy = _options(tmp_path, slos=parse_slos(["ttft@p50=300ms"]), trials=0, headroom=0.10)
    rec = Runner(roomy, lambda m: None, engine=FakeEngine(), hardware=HW).run().recommended
    assert rec is not None and rec.meets_slo is True and rec.provisional is False
    assert rec.verdict.worst_margin <= -0.10
    assert rec.tries and rec.tries[-1].n_requests >= 60
    assert any(t.meets for t in rec.tries)
    (tmp_path / "b").mkdir()
    tight = _options(tmp_path / "b", slos=parse_slos(["ttft@p50=300ms"]), trials=0, headroom=0.999)
    report = Runner(tight, lambda m: None, engine=FakeEngine(), hardware=HW).run()
    rec = report.recommended
    assert rec is not None and rec.meets_slo is False
    assert not any(t.meets for t in rec.tries)
    assert any("headroom" in n for n in report.notes)


SPACE_TWIN = """
engine: fake
device: cpu
baseline:
  args: [--max-concurrent, "4"]
common:
  args: [--itl-ms, "10"]
stages:
  - name: batching
    knobs:
      - name: banner
        type: categorical
        default: none
        options:
          none: {}
          hello: {args: [--log-line, "hello"]}
    candidates:
      - {banner: hello}
"""


@pytest.mark.timeout(180)
def test_two_configurations_too_close_to_call_are_measured_side_by_side(tmp_path: Path) -> None:
    # The same server twice; the tie band covers the fake's run-to-run noise, so the two are
    # never told apart by their search points. A lenient SLO: a stall of the loaded 2-core CI
    # machine (a TTFT over 300 ms at the lowest load) once made the trial infeasible there.
    opts = _options(
        tmp_path, trials=1, start_concurrency=4, tie_band=1.0, slos=parse_slos(["ttft=2s"])
    )
    (tmp_path / "fake.yaml").write_text(SPACE_TWIN)
    lines: list[str] = []
    runner = Runner(opts, lines.append, engine=FakeEngine(), hardware=HW)
    report = runner.run()
    (t1,) = report.trials
    assert t1.status == "ok"
    (cmp,) = report.comparisons  # the same server twice: within each other's intervals
    assert cmp.trials == (0, 1)
    assert cmp.winner in (0, 1)
    assert [o[0] for o in cmp.order] == ["a", "b", "b", "a"]
    base = report.baseline
    assert base is not None
    assert any(p.side_by_side for p in base.points) and any(p.side_by_side for p in t1.points)
    # baseline, trial, the baseline again beside it, and the confirmation, unless the baseline
    # stayed best: its own confirmation then stands
    rec = report.recommended
    assert rec is not None and report.timing is not None
    assert report.timing.engine_starts == 3 + (rec.from_trial != 0)
    assert any("side by side" in line for line in lines)
    assert "## Side by side" in (runner.out / "report.md").read_text()


def test_a_trial_none_of_whose_loads_holds_once_measured_again_loses_its_score(
    tmp_path: Path,
) -> None:
    """Side by side (or a confirmation) can show that the lowest load that held no longer
    does: the old score must not stay and win (seen on real vLLM: a trial estimated at 656
    tok/s went to 0 side by side, yet was confirmed as the best)."""
    from probes.records import RequestRecord
    from tuner.report.schema import TrialReport
    from tuner.scoring.estimate import Samples

    runner = Runner(_options(tmp_path), lambda m: None, engine=FakeEngine(), hardware=HW)
    slow = [
        RequestRecord(index=i, t_sched=0.1 * i, t_send=0.1 * i, t_first=0.1 * i + 99.0,
                      t_last=0.1 * i + 99.5, t_end=0.1 * i + 99.5, n_out=8,
                      n_out_from_usage=True)
        for i in range(40)
    ]  # fmt: skip
    runner.state.samples[1] = [Samples.from_records(8, slow, 4.0)]
    trial = TrialReport(
        number=1, stage="batching", params={}, args=[], env={}, launch_command=[],
        status="ok", score_tokens_per_s=656.0, load={"concurrency": 8.0},
    )  # fmt: skip
    est = runner.evaluator.rescore(trial, "side by side")
    assert est is not None and est.censored == "below"
    assert trial.score_tokens_per_s is None and trial.load is None
    assert trial.status == "infeasible" and "side by side" in (trial.error or "")


SPACE_KINDS = """
engine: fake
device: cpu
baseline:
  args: [--max-concurrent, "4"]
common:
  args: [--itl-ms, "10"]
stages:
  - name: batching
    knobs:
      - {name: max_concurrent, type: int, low: 1, high: 16, default: 4, flag: --max-concurrent}
    candidates:
      - {max_concurrent: 8}
  - name: weights
    kind: quantisation
    help: a second stage of a known kind, declared in the space file only
    knobs:
      - name: weight_format
        type: categorical
        default: full
        options:
          full: {}
          lossy: {args: [--quality-loss, "0.5"]}
    candidates:
      - {weight_format: lossy}
"""


@pytest.mark.timeout(180)
def test_a_new_stage_of_a_known_kind_is_a_space_file_change_only(tmp_path: Path) -> None:
    opts = _options(tmp_path, trials=2)
    (tmp_path / "fake.yaml").write_text(SPACE_KINDS)
    report = Runner(opts, lambda _: None, engine=FakeEngine(), hardware=HW).run()
    assert report.status == "complete"
    # Stages in the file's order, with the kinds' skips for the kind it lacks.
    assert [(s.name, s.status) for s in report.stages] == [
        ("batching", "run"),
        ("weights", "run"),
        ("speculative", "skipped"),
    ]
    weights = next(t for t in report.trials if t.stage == "weights")
    assert weights.params["weight_format"] == "lossy"
    # Its kind's gate ran: quality measured against the baseline, and the loss barred it.
    assert weights.quality is not None and weights.quality.metric == "perplexity"
    assert not weights.quality.holds and weights.rejected and "quality" in weights.rejected
    assert report.recommended is not None and report.recommended.from_trial != weights.number


def test_stages_names_a_stage_of_the_space_or_a_kind(tmp_path: Path) -> None:
    from tuner.spaces.space import SpaceError

    (tmp_path / "fake.yaml").write_text(SPACE_KINDS)
    starts: list[str] = []
    runner = Runner(
        _options(tmp_path, stages=["turbo"]), starts.append, engine=FakeEngine(), hardware=HW
    )
    with pytest.raises(SpaceError, match=r"unknown stage\(s\) \['turbo'\]; this search space"):
        runner.run()
    assert not [line for line in starts if "starting" in line]  # refused before any engine


SPACE_SLOW_BASELINE = """
engine: fake
device: cpu
baseline:
  args: [--max-concurrent, "2", --ttft-ms, "600"]
  reason: a baseline that takes 600 ms to a first token alone
common:
  args: [--itl-ms, "10"]
stages:
  - name: batching
    knobs:
      - name: ttft
        type: int
        low: 5
        high: 600
        default: 600
        flag: --ttft-ms
    candidates:
      - {ttft: 5}
"""


@pytest.mark.timeout(180)
def test_a_baseline_no_load_can_serve_is_not_searched_and_trial_1_starts_from_its_own_rate(
    tmp_path: Path,
) -> None:
    # p99 TTFT <= 300 ms against 600 ms for one request alone (the probe's concurrency-1
    # point): the baseline is infeasible without a capacity search. Trial 1 then has no
    # capacity to start from, and its closed-loop warm-up gives the rate to start at.
    space = tmp_path / "slow.yaml"
    space.write_text(SPACE_SLOW_BASELINE)
    opts = _options(
        tmp_path,
        load_model="rate",
        trials=1,
        probe=True,
        space_file=space,
        search_point_s=1.0,
        search_min_requests=20,
        confirm_requests=40,
    )
    said: list[str] = []
    runner = Runner(opts, said.append, engine=FakeEngine(), hardware=HW)
    report = runner.run()
    base = report.baseline
    assert base is not None and base.status == "infeasible" and base.points == []
    assert base.error is not None and "no load can meet p99 TTFT" in base.error
    # The probe stopped its decode sweep at one request alone: that said enough.
    assert report.probe is not None
    assert [p.concurrency for p in report.probe.decode_sweep] == [1]
    # Its time split is that request's: 600 ms to the first token, 7 x 10 ms after.
    assert report.probe.verdict.prefill_share > 0.8
    t1 = report.trials[0]
    assert t1.status == "ok" and t1.params == {"ttft": 5}
    # The fake at batch limit 2 and 8 tokens of 10 ms completes about 20 requests/s: the
    # search starts where its closed-loop warm-up's rate says, not at the last resort of 1
    # request/s (the probe measured no load point: the baseline was infeasible).
    assert report.probe.load_metrics is None
    assert t1.points[0].load["rate_rps"] > 1.0, [p.load for p in t1.points]
    rec = report.recommended
    assert rec is not None and rec.from_trial == 1
    assert rec.gain_vs_baseline is None
    assert rec.gain_basis.startswith("none: the baseline meets the SLOs at no load")
    assert any("infeasible, not searched" in m for m in said)
    md = (runner.out / "report.md").read_text()
    assert "| baseline | baseline: meets the SLOs at no load (infeasible) |" in md


@pytest.mark.timeout(120)
def test_a_point_broken_by_a_stall_at_its_start_is_measured_again_once(tmp_path: Path) -> None:
    # Which records are a stall is probes/transient.py's (tests/unit/test_transient.py); here
    # the first broken point is called one, and the search must measure it again, once, and
    # keep the first try out of its points.
    calls: list[int] = []

    def first_only(records: object, slos: object) -> bool:
        calls.append(1)
        return len(calls) == 1

    # The confirmation's stall rule (its test is below) is kept out of this one, whose
    # baseline confirmation writes beside the search's points.
    stalls = StallRule(point=first_only, confirmation=lambda *a, **kw: False)
    opts = _options(tmp_path, trials=0, start_concurrency=16)  # above the fake's capacity
    lines: list[str] = []
    runner = Runner(opts, lines.append, engine=FakeEngine(), hardware=HW, stalls=stalls)
    report = runner.run()
    base = report.baseline
    assert base is not None and base.points
    tdir = runner.out / "trials" / "000"
    (disturbed,) = tdir.glob("*-disturbed.jsonl")
    assert disturbed.name == "c0016-0-disturbed.jsonl"
    assert disturbed.read_text().strip()  # its records are kept, as warm-up
    assert all("disturbed" not in p.records_file for p in base.points)
    first = base.points[0]
    assert first.load == {"concurrency": 16} and Path(first.records_file).name == "c0016-0.jsonl"
    assert not first.verdict.holds  # measured again, the overload still breaks: not excused
    assert sum("measured again once" in n for n in report.notes) == 1
    assert any("a stall at its start" in line for line in lines)


@pytest.mark.timeout(120)
def test_a_confirmation_try_disturbed_at_its_start_is_measured_again_once_at_its_load(
    tmp_path: Path,
) -> None:
    # With a headroom no try can meet, every confirmation try misses it, and every one is
    # called a stall (which records are one is probes/transient.py's): the first must be
    # measured again at the same load, and only once however often it is called one.
    asked: list[dict[str, object]] = []

    def always(records: list[object], slos: object, **kw: object) -> bool:
        asked.append({"n": len(records), **kw})
        return True

    opts = _options(tmp_path, slos=parse_slos(["ttft@p50=300ms"]), trials=0, headroom=0.999)
    lines: list[str] = []
    stalls = StallRule(confirmation=always)
    runner = Runner(opts, lines.append, engine=FakeEngine(), hardware=HW, stalls=stalls)
    report = runner.run()
    rec = report.recommended
    assert rec is not None and rec.meets_slo is False and rec.tries
    assert len(asked) == 1  # once set aside, no try is asked about again
    assert asked[0]["headroom"] == 0.999  # judged against the limits less the headroom
    assert asked[0]["planned"] == asked[0]["n"]  # the span it was planned with (none grown)
    (disturbed,) = runner.out.rglob("*-disturbed.jsonl")
    assert disturbed.read_text().strip()  # its records are kept, as warm-up
    slug = disturbed.name.removesuffix("-disturbed.jsonl")
    assert disturbed.with_name(f"{slug}.jsonl").exists()  # the same load, measured again
    # Confirmation tries are written as <load>.jsonl (search points as <load>-<index>.jsonl).
    tries = [f for f in disturbed.parent.glob("*.jsonl") if "-" not in f.stem]
    assert len(tries) == len(rec.tries)  # the set-aside try is not one of them
    assert sum("measured again once" in n for n in report.notes) == 1
    assert any("missed its 100% headroom only in its first seconds" in ln for ln in lines)
