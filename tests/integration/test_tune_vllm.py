"""A short real tuning on vLLM (CPU) with the embedded default model.

Kept small for CI: an eager-only space (tests/data/vllm-cpu-ci.yaml), one trial after the
baseline, a lenient SLO and few requests per point. It checks the whole loop and the report's
shape, the launch command, and that no engine process outlives the run; it asserts no times.
The short run ranks its two configurations by their worst gain over a second workload
(``--objective robust``), at the cost of one short capacity search per configuration.
"""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from probes.slo import parse_slos
from probes.workload import parse_workload
from tests.browser import open_page
from tuner import api
from tuner.engines.base import LaunchSpec, ServerProcess, free_port
from tuner.engines.hardware import detect_hardware, template_context
from tuner.options import TuneOptions

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
CI_SPACE = ROOT / "tests" / "data" / "vllm-cpu-ci.yaml"
OTHER = "synthetic:input=256,output=8"  # test_short_tuning_run's other workload (robust)


def _engine_processes() -> list[psutil.Process]:
    me = os.getpid()
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if p.info["pid"] != me and "vllm.entrypoints.openai.api_server" in cmd:
            out.append(p)
    return out


def _small_batch_space(tmp_path: Path) -> Path:
    """The CI space with a baseline that batches at most 8 requests (the knob's default too), so
    that the batching stage has a gain the serving model can see: with vLLM's 128 the model
    rightly expected none of the CI space's limits (4-64) to beat the baseline, and started no
    trial (a slow Xeon, 2026-12-06)."""
    space = yaml.safe_load(CI_SPACE.read_text())
    space["baseline"]["args"] = [*space["baseline"]["args"], "--max-num-seqs", "8"]
    space["baseline"]["reason"] += "; a batch limit of 8, so that CI's batching stage has a gain"
    (knob,) = [k for k in space["stages"][0]["knobs"] if k["name"] == "max_num_seqs"]
    knob["default"] = 8
    path = tmp_path / "vllm-cpu-ci-small-batch.yaml"
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return path


@pytest.mark.timeout(900)
def test_short_tuning_run(tmp_path: Path) -> None:
    before = {p.pid for p in _engine_processes()}
    report, folder = api.tune(
        TuneOptions(
            model="smollm2-135m",
            slos=parse_slos(["ttft=20s"]),
            workload=parse_workload("synthetic:input=64,output=16"),
            trials=1,
            output_dir=tmp_path,
            space_file=_small_batch_space(tmp_path),
            # The default load model: open-loop Poisson arrivals, starting from what the probe's
            # load point sustained; short points and a loose SLO's long climb in doublings, for
            # CI.
            search_point_s=2.0,
            rate_step=2.0,
            max_rate_rps=16.0,
            search_min_requests=12,
            confirm_requests=24,
            startup_timeout_s=400,
            stages=["batching"],
            # The side-by-side repeat (a restart of the baseline beside trial 1, when they are
            # too close to call) is tested on the fake engine's real processes
            # (tests/unit/test_runner.py); here it cost a minute of CI's 30.
            side_by_side=False,
            # ranked by the worst gain over the tuned workload and a prefill-heavy one, each
            # configuration searched on both on its own server (tuner/run/objective.py)
            objective="robust",
            check_workloads=[parse_workload(OTHER)],
        )
    )
    data = json.loads((folder / "report.json").read_text())
    assert (folder / "report.md").is_file()
    assert (folder / "optuna.journal").is_file()
    assert data["status"] == "complete"
    assert data["schema_version"] == 1
    assert data["engine_version"].startswith("vllm")
    w = data["workload"]
    assert {k: w[k] for k in ("kind", "input_len", "output_len", "spread", "spec")} == {
        "kind": "synthetic",
        "input_len": 64,
        "output_len": 16,
        "spread": 0.0,
        "spec": "synthetic:input=64,output=16",
    }
    # what the search points sent, from their records: every request exactly as asked
    sent = w["sent"]
    assert sent["requests"] == sum(
        p["metrics"]["n_requests"] for t in [data["baseline"], *data["trials"]] for p in t["points"]
    )
    assert sent["input_tokens"] == {"mean": 64.0, "p50": 64.0, "p99": 64.0}
    assert sent["output_tokens"] == {"mean": 16.0, "p50": 16.0, "p99": 16.0}
    assert sent["prefix_share"] == 0.0  # distinct, salted prompts
    assert data["load"] == {"model": "rate", "unit": "requests/s"}
    assert len(data["salt"]) == 8
    assert data["slo"] == [{"metric": "ttft", "percentile": 99, "limit_ms": 20000.0}]
    base = data["baseline"]
    assert base["status"] == "ok", base
    assert base["points"], "the baseline measured no load point"
    assert len(data["trials"]) == 1
    for t in [base, *data["trials"]]:
        assert t["status"] in ("ok", "infeasible", "failed", "abandoned")
        for p in t["points"]:
            recs = Path(p["records_file"]).read_text().splitlines()
            assert len(recs) == p["metrics"]["n_requests"]
            first = json.loads(recs[0])
            assert first["n_prompt"] == 64 == first["n_prompt_expected"]
    assert all(set(p["load"]) == {"rate_rps"} for p in base["points"])
    est = base["estimate"]
    assert est is not None and est["n_points"] >= 1 and est["low"] <= base["score_tokens_per_s"]
    rec = data["recommended"]
    assert rec is not None
    assert rec["load"]["rate_rps"] > 0
    assert rec["tries"] and all(t["n_requests"] >= 24 for t in rec["tries"])
    base_c = data["baseline_confirmation"]
    assert base_c is not None and base_c["n_requests"] >= 24 and set(base_c["load"]) == {"rate_rps"}
    m = rec["metrics"]
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(m[key]) >= {"mean", "p50", "p90", "p95", "p99"}
    assert m["output_tokens_per_s"] > 0
    assert m["n_out_source"] == "usage"
    assert m["n_failed"] == 0
    assert m["mean_output_tokens"] == 16  # ignore_eos held the length
    assert rec["n_requests"] == m["n_requests"] >= 24
    # Fewer requests than p99 needs: the verdict must say provisional, not meets_slo.
    assert rec["provisional"] is True and rec["meets_slo"] is False
    argv = rec["launch_command"]
    assert Path(argv[0]).is_absolute() and "--port" in argv
    assert argv[argv.index("--model") + 1].startswith("/")
    assert all(isinstance(v, str) for v in rec["env"].values())
    # baseline, one trial, and the confirmation unless the baseline stayed best (its own
    # confirmation stands then)
    assert data["comparisons"] == []
    starts = 2 + (rec["from_trial"] != 0)
    assert data["timing"]["engine_starts"] == starts
    assert [(s["name"], s["status"]) for s in data["stages"]] == [
        ("batching", "run"),
        ("quantisation", "skipped"),
        ("speculative", "skipped"),
    ]
    assert "left out by --stages" in data["stages"][1]["reason"]
    _ranked_by_the_worst_gain(data, folder)
    # The probe's diagnosis, on the baseline's server.
    d = data["probe"]
    assert d is not None and d["prefill_rate_tokens_per_s"] > 0 and d["decode_sweep"]
    assert d["model"]["parameters"] > 100_000_000  # SmolLM2-135M
    assert d["device"]["memory_bandwidth_gbps"] > 0 and d["device"]["matmul_tflops"] > 0
    assert d["server_split_s"] is not None  # vLLM's prefill/decode histograms were read
    assert d["verdict"]["bottleneck"] in ("prefill", "decode")
    names = [s["name"] for s in d["verdict"]["stages"]]
    assert names == ["batching", "quantisation", "speculative"]
    assert report.recommended is not None
    # The serving model: calibrated on the baseline's records, it screened the batching
    # stage's scheduler knobs on the model and predicted the trial it chose before it started.
    assert data["screened"] >= 20  # distinct settings predicted (the sampler repeats some)
    trial = data["trials"][0]
    pred = trial["predicted"]
    assert pred is not None and pred["basis"] in ("calibrated", "transferred")
    assert 0 < pred["low"] <= pred["tokens_per_s"] and pred["load"] > 0
    # The baseline was predicted from the probe's sweeps alone (their records kept), before
    # its first load point, and that error is published apart from the calibrated ones.
    assert sorted(d["records_files"]) == sorted(
        [f"prefill-{p['prompt_tokens']}" for p in d["prefill_sweep"]]
        + [f"decode-c{p['concurrency']}" for p in d["decode_sweep"]]
        + [f"mixed-c{d['mixed_point']['concurrency']}"]
    )
    base = data["baseline"]
    assert base["status"] == "ok" and base["predicted"]["basis"] == "probe"
    assert base["predicted"]["build_trials"] == [] and base["predicted"]["tokens_per_s"] > 0
    assert data["serving_model"]["predicted_trials"] == [0, trial["number"]]
    errors = data["serving_model"]["errors_by_basis"]
    assert "capacity" in errors["probe"]
    assert ("capacity" in errors.get(pred["basis"], {})) == (trial["status"] == "ok")
    # report.html, opened offline in a real Chromium: every figure drawn, the probe's too, and
    # the model's predicted-against-measured (the baseline has a measured capacity).
    page = open_page(folder / "report.html", tmp_path / "report.png")
    assert page.console_errors == [] and page.requests == [(folder / "report.html").as_uri()]
    figures = {"pareto", "interactivity", "curves", "stages", "probe", "model"}
    assert set(page.figures) == figures
    assert all(n > 0 for n in page.figures.values()), page.figures
    _serve_from_the_exports(folder, rec["env"], tmp_path)
    leftover = [p for p in _engine_processes() if p.pid not in before]
    assert not leftover, f"engine processes left running: {[p.pid for p in leftover]}"


def _ranked_by_the_worst_gain(data: dict[str, Any], folder: Path) -> None:
    """--objective robust on the real engine: the baseline and the trial each searched on the
    other workload on their own servers (no start of its own: the count of starts above), the
    worst gains formed from the four figures, the best of them recommended, and no held-out
    check after (those workloads ranked the search)."""
    assert data["objective"] == "robust" and data["held_out"] == []
    base, (trial,) = data["baseline"], data["trials"]
    for t in (base, trial):
        assert t["status"] == "ok", t["error"]
        (a,) = t["across"]
        assert a["workload"] == OTHER and a["status"] == "ok" and a["points"] >= 1
        assert a["score_tokens_per_s"] > 0
        folder_of = folder / "trials" / str(a["number"])
        assert any(folder_of.glob("*.jsonl")), f"no records in {folder_of}"
    assert base["worst_gain"] == 1.0
    tuned = trial["score_tokens_per_s"] / base["score_tokens_per_s"]
    other = trial["across"][0]["score_tokens_per_s"] / base["across"][0]["score_tokens_per_s"]
    assert trial["across"][0]["gain"] == pytest.approx(other)
    assert trial["worst_gain"] == pytest.approx(min(tuned, other))
    best = 0 if trial["worst_gain"] <= 1.0 else trial["number"]
    assert data["recommended"]["from_trial"] == best
    md = (folder / "report.md").read_text()
    assert "## Ranked by the worst gain over the workloads (--objective robust)" in md
    assert f"`{OTHER}`" in md


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _serve_from_the_exports(folder: Path, env: dict[str, str], tmp_path: Path) -> None:
    """serve.sh starts a real vLLM from recommended.vllm.yaml with the recommended environment:
    vLLM's own "non-default args" line lists every setting of the file, and the server process
    carries every variable. vLLM logs that line as it parses its arguments, before it loads
    the model: the server is stopped (by its process group) as soon as the line is there, and
    the whole start, which every tuning test has already paid for, is not waited out."""
    config = yaml.safe_load((folder / "recommended.vllm.yaml").read_text())
    assert set(config) > {"model"}, config
    port = free_port()
    spec = LaunchSpec(["/bin/bash", str(folder / "serve.sh"), "--port", str(port)])
    log = tmp_path / "serve.log"
    found = None
    with ServerProcess(spec, log, startup_timeout_s=400) as server:
        assert server.proc is not None
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and server.proc.poll() is None:
            found = re.search(r"non-default args: (\{.*\})", log.read_text())
            if found:
                break
            time.sleep(0.5)
        group = [
            p for p in _engine_processes() if _pgid(p.pid) == server.proc.pid
        ]  # fmt: skip
        assert group, "no vLLM server in serve.sh's process group"
        environ = group[0].environ()
        assert {k: environ.get(k) for k in env} == env
    assert found, "vLLM logged no non-default args:\n" + log.read_text()[-2000:]
    started = ast.literal_eval(found.group(1))
    for key, value in config.items():
        assert started[key.replace("-", "_")] == value, (key, started)


@pytest.mark.timeout(900)
def test_quality_gate_and_exactness_on_the_embedded_default(tmp_path: Path) -> None:
    """An fp8 KV cache is measured against the baseline's perplexity and refused by a quality
    limit under its degradation (+0.46 % on the AMD machines, +0.56 % on the Xeon: 0.1 % is
    far under both), and n-gram speculation is checked against the greedy outputs of the
    configuration it started from. A quality gate that always holds fails here; the exactness
    check's own verdicts, where they are known, are in test_exactness_vllm.py."""
    if not template_context(detect_hardware())["avx512"]:
        pytest.skip("vLLM's CPU backend starts an fp8 KV cache only with AVX-512 or AMX")
    before = {p.pid for p in _engine_processes()}
    report, folder = api.tune(
        TuneOptions(
            model="smollm2-135m",
            slos=parse_slos(["ttft=20s", "quality=0.1%"]),
            workload=parse_workload("synthetic:input=64,output=16"),
            trials=2,
            output_dir=tmp_path,
            space_file=CI_SPACE,
            stages=["quantisation", "speculative"],
            probe=False,
            load_model="concurrency",
            # test_short_tuning_run has the side-by-side repeat on the real engine; here it
            # would only restart the baseline. The baseline's own confirmation runs on its
            # first start, so a baseline that stays best needs no start to be confirmed.
            side_by_side=False,
            start_concurrency=4,
            max_concurrency=8,
            search_min_requests=12,
            search_requests_per_slot=2,
            confirm_requests=24,
            startup_timeout_s=400,
        )
    )
    data = json.loads((folder / "report.json").read_text())
    assert data["status"] == "complete"
    assert data["quality_slo"] == {"max_degradation_pct": 0.1, "default": False}
    quant, spec = data["trials"]
    assert quant["stage"] == "quantisation" and quant["params"] == {"kv_cache_dtype": "fp8"}
    assert "--kv-cache-dtype" in quant["launch_command"]
    assert quant["status"] == "ok", quant
    q = quant["quality"]
    assert q is not None and q["metric"] == "perplexity" and q["limit_pct"] == 0.1
    assert q["baseline_value"] > 1 and q["value"] > 1
    assert q["degradation_pct"] == pytest.approx((q["value"] / q["baseline_value"] - 1) * 100)
    # the gate's verdict: fp8 degrades perplexity by more than the limit, so it is refused
    assert q["degradation_pct"] > 0.1
    assert q["holds"] is False
    assert quant["metrics"]["quality"] == q
    assert quant["rejected"] and quant["rejected"].startswith("quality: perplexity degraded")
    rec = data["recommended"]
    assert rec is not None  # the baseline holds a 20 s TTFT
    assert rec["from_trial"] != quant["number"]
    # speculation starts from the best configuration that was not refused: the baseline
    assert spec["stage"] == "speculative" and spec["params"]["speculative_method"] == "ngram"
    assert "--speculative-config" in spec["launch_command"]
    assert "--kv-cache-dtype" not in spec["launch_command"]
    assert spec["status"] == "ok", spec
    m = spec["metrics"]
    assert m["acceptance_rate"] is not None and 0 <= m["acceptance_rate"] <= 1
    assert m["mean_acceptance_length"] >= 1
    ex = spec["exactness"]
    assert ex["checked"] is True and ex["prompts"] == 8 and ex["reference_trial"] == 0
    # whichever it found, the check's finding and the trial's fate agree
    assert (ex["first_divergence"] is None) == ex["identical"]
    assert bool(spec["rejected"]) == (not ex["identical"])
    assert data["exactness"] is not None and data["exactness"]["checked"] is True
    assert data["comparisons"] == []
    # baseline, the two trials, and the confirmation unless the baseline stayed best
    assert data["timing"]["engine_starts"] == 3 + (rec["from_trial"] != 0)
    md = (folder / "report.md").read_text()
    assert "## Stage by stage" in md and "Exactness of speculative decoding" in md
    assert report.exactness is not None
    leftover = [p for p in _engine_processes() if p.pid not in before]
    assert not leftover, f"engine processes left running: {[p.pid for p in leftover]}"


@pytest.mark.timeout(300)
def test_ctrl_c_during_startup_leaves_no_engine(tmp_path: Path) -> None:
    before = {p.pid for p in _engine_processes()}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tuner.cli.main",
            "--model",
            "smollm2-135m",
            "--slo",
            "ttft=20s",
            "--trials",
            "1",
            "--output",
            str(tmp_path),
            "--search-space",
            str(CI_SPACE),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        # A shell without job control starts background jobs with SIGINT ignored, and a child
        # inherits that (so would this one, under such a CI harness): a user's Ctrl-C reaches a
        # foreground process with the default handler, which is what this test is about.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # wait until the engine is being started
            if [p for p in _engine_processes() if p.pid not in before]:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the engine never started")
        time.sleep(3)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # SIGTERM: the CLI's own clean-up stops its engines
            proc.terminate()
            proc.wait(timeout=120)
    assert proc.returncode == 130, out
    time.sleep(1)
    leftover = [p for p in _engine_processes() if p.pid not in before]
    assert not leftover, f"engine processes left running after Ctrl-C: {leftover}\n{out}"
    reports = list(tmp_path.glob("*/report.json"))
    assert len(reports) == 1, out
    assert json.loads(reports[0].read_text())["status"] == "interrupted"


@pytest.mark.timeout(600)
def test_probe_starts_the_embedded_default_and_judges_its_point(tmp_path: Path) -> None:
    before = {p.pid for p in _engine_processes()}
    out = tmp_path / "probe.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tuner.cli.main",
            "probe",
            "--model",
            "smollm2-135m",
            "--param",
            "enforce_eager=true",
            "--param",
            "kv_cache_space_gib=1",
            "--workload",
            "synthetic:input=64,output=16",
            "--concurrency",
            "4",
            "--requests",
            "16",
            "--slo",
            "ttft=20s",
            "--json",
            str(out),
            "--output",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "TTFT" in proc.stdout and "time per output token" in proc.stdout
    data = json.loads(out.read_text())
    m = data["metrics"]
    assert m["n_completed"] == 16 and m["ttft_ms"]["p50"] > 0 and m["tpot_ms"]["p50"] > 0
    # The point judged: 16 requests are too few for a p99, so it holds only provisionally
    # (test_short_tuning_run has the diagnosis on a real server).
    assert data["slo"] == ["p99 TTFT <= 20000 ms"] and data["diagnosis"] is None
    assert data["verdict"]["holds"] is True and data["verdict"]["provisional"] is True
    assert "SLOs (p99 TTFT <= 20000 ms): holds, provisionally" in proc.stdout
    leftover = [p for p in _engine_processes() if p.pid not in before]
    assert not leftover
