"""tuner/search/guide.py: the serving model's choice on scripted measurements (no engine).

The "measured" baseline is a simulation with a known step model, written as the load client
writes its records; the guide calibrates on those files as it would on a real run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from probes.metrics import Dist, LoadMetrics, Verdict, summarize
from probes.slo import parse_slos
from tests.unit.probe_records import DECODE_REQUESTS, LENGTHS, diagnosis_with, write_probe_records
from tests.unit.run_state import run_state
from tuner.report.model_errors import model_errors
from tuner.report.schema import PointReport, PredictedReport, TrialReport
from tuner.run.state import RunState
from tuner.search.calibration import BuildFit
from tuner.search.choice import MIN_GAIN, Candidate, expected_gain
from tuner.search.guide import RESCREEN_SHARE, Guide
from tuner.search.screen import BATCH, screen, with_headroom
from tuner.search.study import config_key
from tuner.servemodel.load import cycled, poisson
from tuner.servemodel.predict import Prediction, Spread
from tuner.servemodel.scheduler import Knobs, simulate
from tuner.servemodel.steptime import StepModel
from tuner.spaces.space import Stage, load_space, space_path
from tuner.storage.records import write_records

TRUE = StepModel(base_s=0.02, per_prefill_token_s=0.0002, per_decode_s=0.001, overhead_s=0.03)
SMOLLM2 = {
    "num_hidden_layers": 30,
    "num_key_value_heads": 3,
    "num_attention_heads": 9,
    "hidden_size": 576,
    "head_dim": 64,
    "dtype": "bfloat16",
}


def _metrics(recs: list) -> LoadMetrics:
    return summarize(recs, parse_slos(["ttft=2s"]))


def _state(tmp_path: Path) -> RunState:
    st = run_state(tmp_path, model_config=SMOLLM2)
    st.space = load_space(space_path("vllm", "cpu")).for_machine(0, {"max_model_len": 8192})
    st.ctx = {"max_model_len": 8192}
    st.model_path = str(tmp_path / "model")
    return st


def _baseline(
    st: RunState, score: float, relative: bool = False, step: StepModel = TRUE
) -> TrialReport:
    """The baseline "measured": three Poisson points of the true model at vLLM's defaults."""
    points = []
    for i, rate in enumerate((3.0, 6.0, 9.0)):
        recs = simulate(poisson(rate, 300, cycled([(128, 64)]), seed=i), Knobs(128, 2048), step)
        f = st.out / "trials" / "000" / f"r{i}.jsonl"
        f.parent.mkdir(parents=True, exist_ok=True)
        write_records(f, recs)
        if relative:  # as a run with --output results names it: from the working directory
            f = f.relative_to(Path.cwd())
        m = _metrics(recs)
        v = Verdict(holds=True, provisional=True, worst_margin=-0.5, checks=[])
        points.append(
            PointReport(load={"rate_rps": rate}, metrics=m, verdict=v, records_file=str(f))
        )
    t = TrialReport(
        number=0,
        stage="baseline",
        params={},
        args=[],
        env={},
        launch_command=[],
        status="ok",
        score_tokens_per_s=score,
        load={"rate_rps": score / 64},
        points=points,
        metrics=points[-1].metrics,
    )
    st.baseline = t
    return t


def test_the_baseline_calibrates_its_build_and_the_model_predicts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    st = _state(tmp_path)
    _baseline(st, 600.0, relative=True)
    g = Guide(st)
    fits = g.fits()
    assert len(fits) == 1
    (fit,) = fits.values()
    assert fit.trials == [0]
    assert fit.step.overhead_s == pytest.approx(TRUE.overhead_s, rel=0.2)
    c = g.predict({})
    assert c is not None and c.basis == "calibrated" and c.build_trials == [0]
    # another build (both cores) is predicted from the baseline's, and says so
    other = g.predict({"cpu_binding": "all_cores"})
    assert other is not None and other.basis == "transferred" and other.build_trials == []
    assert other.prediction.spread_model > c.prediction.spread_model


def test_the_front_ends_delay_is_fitted_on_the_runs_points_and_every_build_carries_it(
    tmp_path: Path,
) -> None:
    st = _state(tmp_path)
    _baseline(st, 600.0, step=TRUE.model_copy(update={"admit_per_seq_s": 0.003}))
    g = Guide(st)
    (fit,) = g.fits().values()
    assert g.calibration.admit_per_seq_s == pytest.approx(0.003, rel=0.3)
    assert fit.step.admit_per_seq_s == g.calibration.admit_per_seq_s
    other = g.predict({"cpu_binding": "all_cores"})  # a build not measured: transferred
    assert other is not None and other.basis == "transferred"
    without = BuildFit({}, fit.step.model_copy(update={"admit_per_seq_s": 0.0}), [0], 900)
    plain = g._predict({}, without, [(128, 64)], resamples=0)
    own = g.predict({})
    assert own is not None and plain is not None
    assert own.prediction.load is not None and plain.prediction.load is not None
    assert own.prediction.load < plain.prediction.load  # a later first token: less capacity


def _trial_at(st: RunState, step: StepModel, rate: float, n: int, seed: int) -> TrialReport:
    """Trial 1 (both cores) being measured: one Poisson point of ``step``, its records
    written as the load client writes them."""
    recs = simulate(poisson(rate, n, cycled([(128, 64)]), seed=seed), Knobs(128, 2048), step)
    f = st.out / "trials" / "001" / f"r{rate:g}.jsonl"
    f.parent.mkdir(parents=True, exist_ok=True)
    write_records(f, recs)
    v = Verdict(holds=True, provisional=True, worst_margin=-0.5, checks=[])
    point = PointReport(
        load={"rate_rps": rate}, metrics=_metrics(recs), verdict=v, records_file=str(f)
    )
    return TrialReport(
        number=1, stage="batching", params={"cpu_binding": "all_cores"}, args=[], env={},
        launch_command=[], status="failed", points=[point],
    )  # fmt: skip


def test_a_trial_being_measured_refits_the_delay_on_its_own_points_too(tmp_path: Path) -> None:
    st = _state(tmp_path)
    _baseline(st, 600.0)  # no delay in the baseline's points
    g = Guide(st)
    g.fits()
    assert g.calibration.admit_per_seq_s == pytest.approx(0.0, abs=2e-4)
    slow = TRUE.model_copy(update={"admit_per_seq_s": 0.004})
    trial = _trial_at(st, slow, 12.0, 400, seed=5)
    refit = g.calibration.refit_with(trial, st.measured())
    assert refit is not None and refit.admit_per_seq_s > 0.001
    assert g.calibration.admit_per_seq_s == pytest.approx(0.0, abs=2e-4)  # kept nowhere


def _measured_as_predicted(tmp_path: Path) -> tuple[RunState, TrialReport, Guide, Candidate, Stage]:
    """A baseline measured as the guide calibrated on it predicts, and the batching stage."""
    st = _state(tmp_path)
    base = _baseline(st, 600.0)
    g = Guide(st, screen_trials=24)
    own = g.predict({})
    assert own is not None
    base.score_tokens_per_s = own.prediction.tokens_per_s  # measured as predicted
    stage = st.space.stage("batching")  # type: ignore[union-attr]
    assert stage is not None
    return st, base, g, own, stage


def test_the_guide_screens_the_scheduler_knobs_and_proposes_what_could_gain(tmp_path: Path) -> None:
    st, base, g, own, stage = _measured_as_predicted(tmp_path)
    c = g.propose(stage, {}, {config_key({})})
    assert c is not None
    assert g.screened >= 12  # distinct settings (the sampler repeats some)
    assert expected_gain(c, base.score_tokens_per_s) >= MIN_GAIN * 0.05 * 600.0 * 0.5
    assert st.space.broken_rule(c.params, st.ctx) is None  # type: ignore[union-attr]
    # the best setting the screen found for the calibrated build is at least its seed
    # (vLLM's defaults brought into the searched range)
    screened = g._screen_build(stage, {}, {}, [k for k in stage.knobs if k.sim])
    assert screened and (found := g.predict(screened[0])) is not None
    assert found.prediction.tokens_per_s >= 0.97 * own.prediction.tokens_per_s


def test_a_build_screened_before_and_not_measured_since_gets_a_smaller_screen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, base, g, _, stage = _measured_as_predicted(tmp_path)
    sizes: list[int | None] = []
    seeded: list[list[dict[str, Any]]] = []
    real = g._screen_build

    def spy(*args: Any) -> list[dict[str, Any]]:
        sizes.append(args[4])
        seeded.append(args[5])
        ranked = real(*args)
        tops.append(ranked[0])
        return ranked

    tops: list[dict[str, Any]] = []
    monkeypatch.setattr(g, "_screen_build", spy)
    g.propose(stage, {}, {config_key({})})
    g.propose(stage, {}, {config_key({})})  # nothing measured since: the build's points alike
    assert sizes == [24, 24 // RESCREEN_SHARE]
    # the smaller screen scores the full one's best first, so it finds that one or better
    assert seeded[0] == [] and seeded[1] and tops[1] == tops[0]
    g.propose(stage, {"stream_interval": 8}, {config_key({})})  # another carried setting
    assert sizes[-1] == 24
    base.points = base.points[:2]  # the build's points changed: screened in full again
    g.propose(stage, {}, {config_key({})})
    assert sizes[-1] == 24


def _top(g: Guide, stage: Stage, sim: list) -> Candidate:
    """The measured build's best setting the screen found, predicted in full."""
    (params, *_) = g._screen_build(stage, {}, {}, sim)
    top = g.predict(params)
    assert top is not None
    return top


def test_predictions_on_forked_workers_are_those_made_in_the_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st, _, g, _, _ = _measured_as_predicted(tmp_path)
    many = [{"max_num_seqs": s, "max_num_batched_tokens": 2048} for s in (16, 64, 128, 256)]
    monkeypatch.setenv("AUTOTUNE_WORKERS", "1")
    alone = g.predict_many(many, resamples=0)
    assert g.workers == 1
    monkeypatch.setenv("AUTOTUNE_WORKERS", "2")
    apart = Guide(st)  # nothing cached
    forked = apart.predict_many(many, resamples=0)
    assert apart.workers == 2 and apart.screened == 4
    assert [c.prediction.tokens_per_s for c in forked if c] == [
        c.prediction.tokens_per_s for c in alone if c
    ]
    assert all(c is not None for c in alone)


def test_a_candidate_build_is_measured_first_at_the_best_simulated_setting(tmp_path: Path) -> None:
    _, _, g, _, stage = _measured_as_predicted(tmp_path)
    sim = [k for k in stage.knobs if k.sim and not k.sim_build]
    top = _top(g, stage, sim)
    c = g.propose(stage, {}, {config_key({})})
    assert c is not None and c.basis == "transferred"
    # the space's first candidate's build (both cores, coarser streaming, no access log) ...
    first = stage.candidates[0]
    assert {k: c.params[k] for k in ("cpu_binding", "stream_interval", "uvicorn_access_log")} == {
        k: first[k] for k in ("cpu_binding", "stream_interval", "uvicorn_access_log")
    }
    # ... at the scheduler setting the model found best for the measured build, not the
    # candidate's own, so it is predicted at least as high and chosen for its wider spread
    assert {k.name: c.params[k.name] for k in sim} == {k.name: top.params[k.name] for k in sim}
    assert c.prediction.spread_model > top.prediction.spread_model


def test_a_stages_last_trial_goes_to_the_surest_gain_not_the_least_sure(tmp_path: Path) -> None:
    # the same state as above: the candidate build (transferred) is predicted as high as the
    # measured build's best setting, and has the larger expected gain for its spread
    _, base, g, _, stage = _measured_as_predicted(tmp_path)
    sim = [k for k in stage.knobs if k.sim and not k.sim_build]
    top = _top(g, stage, sim)
    explore = g.propose(stage, {}, {config_key({})})
    assert explore is not None and explore.basis == "transferred"
    assert expected_gain(explore, base.score_tokens_per_s or 0.0) > expected_gain(
        top, base.score_tokens_per_s or 0.0
    )
    # the stage's last trial: the measured build at its best setting, the higher pessimistic end
    final = g.propose(stage, {}, {config_key({})}, last=True)
    assert final is not None and final.basis == "calibrated"
    assert final.params == top.params
    assert final.prediction.low > explore.prediction.low


def test_a_stages_first_trial_takes_the_seeded_build_where_it_is_worth_a_start(
    tmp_path: Path,
) -> None:
    """The README command on the AMD box (2026-12-07 16:55) measured the defaults' build at
    both batching trials and never the space's seeded build (both cores, coarser streaming,
    1.7x the load under vLLM's client). Here the measured build's setting is scripted to have
    the larger expected gain (its spread the wider): the stage's first trial still measures
    the seeded build, a later one goes by the expected gain."""
    _, _, g, _, stage = _measured_as_predicted(tmp_path)
    wide = Spread(run_to_run=0.08, model=0.40)
    narrow = Spread(run_to_run=0.08, model=0.05)
    g.spread = lambda basis: narrow if basis == "transferred" else wide  # type: ignore[method-assign]
    later = g.propose(stage, {}, {config_key({})})
    assert later is not None and later.basis == "calibrated"
    first = g.propose(stage, {}, {config_key({})}, first=True)
    assert first is not None and first.basis == "transferred"
    seeded = stage.candidates[0]
    keys = ("cpu_binding", "stream_interval", "uvicorn_access_log")
    assert {k: first.params[k] for k in keys} == {k: seeded[k] for k in keys}


def test_nothing_is_proposed_when_the_best_is_far_beyond_every_prediction(tmp_path: Path) -> None:
    st = _state(tmp_path)
    _baseline(st, 100_000.0)  # a measured best no configuration is predicted near
    stage = st.space.stage("batching")  # type: ignore[union-attr]
    assert stage is not None
    g = Guide(st, screen_trials=24)
    assert g.propose(stage, {}, {config_key({})}) is None
    assert g.screened >= 12  # distinct settings (the sampler repeats some)


def _candidate(tokens_per_s: float, spread_model: float) -> Candidate:
    p = Prediction(
        load_kind="rate",
        load=1.0,
        load_low=None,
        load_high=None,
        tokens_per_s=tokens_per_s,
        low=0.0,
        high=None,
        censored="none",
        binding=None,
        at_capacity=None,
        basis="calibrated",
        spread_run_to_run=0.08,
        spread_model=spread_model,
        points=[],
    )
    return Candidate({}, p, "calibrated", [])


def test_expected_gain_favours_the_higher_and_the_less_sure() -> None:
    assert expected_gain(_candidate(110.0, 0.1), 100.0) > expected_gain(_candidate(100, 0.1), 100)
    assert expected_gain(_candidate(100.0, 0.3), 100.0) > expected_gain(_candidate(100, 0.1), 100)
    assert expected_gain(_candidate(50.0, 0.1), 100.0) == pytest.approx(0.0, abs=1e-6)


def test_screen_finds_the_best_setting_of_a_scripted_score() -> None:
    st_space = load_space(space_path("vllm", "cpu"))
    knobs = [k for k in st_space.knobs().values() if k.name == "max_num_seqs"]

    asked: list[dict] = []

    def score(batch: list[dict]) -> list[float | None]:
        asked.extend(batch)
        assert 1 <= len(batch) <= BATCH
        return [
            None if p["max_num_seqs"] % 7 == 0 else -abs(p["max_num_seqs"] - 100) for p in batch
        ]

    ranked = screen(knobs, score, n_trials=40, seed=1, seeds=[{"max_num_seqs": 16}])
    assert len(ranked) == 40  # distinct settings: the sampler's repeats are not counted
    # every setting scored once: neither a repeat nor a refused one is asked again
    assert len({p["max_num_seqs"] for p in asked}) == len(asked) > 40
    assert not any(p["max_num_seqs"] % 7 == 0 for p, _ in ranked)
    assert abs(ranked[0][0]["max_num_seqs"] - 100) <= 10
    assert [s for _, s in ranked] == sorted((s for _, s in ranked), reverse=True)


def test_among_near_ties_the_screen_ranks_the_more_room_first() -> None:
    ranked = [
        ({"max_num_seqs": 146}, 412.0),  # the best, by a little
        ({"max_num_seqs": 445}, 400.0),  # a tie: within 10 %
        ({"max_num_seqs": 300}, 390.0),  # a tie
        ({"max_num_seqs": 512}, 300.0),  # not a tie: stays behind
        ({"max_num_seqs": 64}, 250.0),
    ]

    def room(p: dict[str, Any]) -> float:
        return float(p["max_num_seqs"])

    out = with_headroom(ranked, room)
    assert [p for p, _ in out] == [ranked[i][0] for i in (1, 2, 0, 3, 4)]
    assert with_headroom([], room) == []
    # a clear winner keeps its place, whatever its room
    clear = [({"max_num_seqs": 16}, 500.0), ({"max_num_seqs": 512}, 400.0)]
    assert with_headroom(clear, room) == clear


def test_a_batch_limit_the_kv_cache_cannot_hold_is_no_room(tmp_path: Path) -> None:
    st = _state(tmp_path)
    _baseline(st, 600.0)  # requests of 128 + 64 tokens: 2 blocks of 128 each
    g = Guide(st)
    # 1 GiB of bf16 cache holds 364 blocks of smollm2's 23,040 bytes a token: 182 requests
    assert g._room({"max_num_seqs": 509, "kv_cache_space_gib": 1}) == 182.0
    assert g._room({"max_num_seqs": 146, "kv_cache_space_gib": 1}) == 146.0
    assert g._room({"max_num_seqs": 509, "kv_cache_space_gib": 4}) == 509.0
    fp8 = {"max_num_seqs": 509, "kv_cache_space_gib": 1, "kv_cache_dtype": "fp8"}
    assert g._room(fp8) == 364.0  # one byte a value: twice the requests


def test_model_errors_compare_prediction_and_measurement() -> None:
    d = Dist(p50=100.0, p99=1000.0, n=50)
    m = LoadMetrics(
        ttft_ms=d,
        tpot_ms=d,
        itl_ms=d,
        e2e_ms=d,
        queue_ms=d,
        output_tokens_per_s=1.0,
        requests_per_s=1.0,
        goodput_rps=1.0,
        token_goodput_per_s=1.0,
        slo_attainment=1.0,
        n_requests=50,
        n_completed=50,
        n_failed=0,
        error_rate=0.0,
        duration_s=1.0,
        mean_in_flight=1.0,
        mean_output_tokens=64.0,
        n_out_source="usage",
        prompt_token_mismatches=0,
    )

    def trial(n: int, measured: float, predicted: float) -> TrialReport:
        p = PredictedReport(
            basis="calibrated",
            build_trials=[0],
            load=1.0,
            tokens_per_s=predicted,
            low=0.0,
            high=None,
            at_load=1.0,
            ttft_ms_p99_at_load=1100.0,
            tpot_ms_p50_at_load=90.0,
        )
        return TrialReport(
            number=n,
            stage="batching",
            params={},
            args=[],
            env={},
            launch_command=[],
            status="ok",
            score_tokens_per_s=measured,
            metrics=m,
            predicted=p,
        )

    errs = model_errors([trial(1, 100.0, 110.0), trial(2, 100.0, 70.0), trial(3, 100.0, 100.0)])
    assert errs["capacity"] == {"median": pytest.approx(0.1), "worst": pytest.approx(0.3), "n": 3.0}
    assert errs["ttft_p99"]["median"] == pytest.approx(0.1)
    assert errs["tpot_p50"]["worst"] == pytest.approx(0.1)


def _probe(st: RunState) -> None:
    """The probe's sweeps "measured" on the baseline's server (the true model)."""
    st.diagnosis = diagnosis_with(write_probe_records(st.out / "probe", TRUE))


def test_the_probe_alone_calibrates_the_baseline_build_before_any_trial(tmp_path: Path) -> None:
    st = _state(tmp_path)
    _probe(st)
    g = Guide(st)
    (fit,) = g.fits().values()
    assert fit.trials == [] and fit.probe
    # a decoding step of 32 sequences (of about 160 tokens each: the sequence count and the
    # context they read are one measure at a single length), from the sweeps alone
    batch = fit.step.step_s(0, 32, 32 * 0.16)
    assert batch == pytest.approx(TRUE.step_s(0, 32, 32 * 0.16), rel=0.1)
    assert g.lengths() == [(*LENGTHS, 0)] * DECODE_REQUESTS  # the decode sweep's (nothing shared)
    c = g.predict({})
    assert c is not None and c.basis == "probe" and c.build_trials == []
    # its interval is wider than a calibrated prediction's (the probe's term), and it is
    # close to what the true model serves at the same knobs
    (tmp_path / "truth").mkdir()
    truth = Guide(_state(tmp_path / "truth"))
    _baseline(truth.st, 600.0)
    own = truth.predict({})
    assert own is not None and own.basis == "calibrated"
    assert c.prediction.spread_model > own.prediction.spread_model
    assert c.prediction.tokens_per_s == pytest.approx(own.prediction.tokens_per_s, rel=0.1)
    # said as the baseline's prediction, the report keeps its basis
    p = g.before({})
    assert p is not None and p.basis == "probe" and p.load == c.prediction.load


def test_a_measured_trial_of_the_probed_build_calibrates_on_both(tmp_path: Path) -> None:
    st = _state(tmp_path)
    _probe(st)
    _baseline(st, 600.0)
    (fit,) = Guide(st).fits().values()
    assert fit.trials == [0] and fit.probe
    assert fit.requests == (3 * 3 + DECODE_REQUESTS) + 3 * 300
    c = Guide(st).predict({})
    assert c is not None and c.basis == "calibrated" and c.build_trials == [0]


def test_a_trial_being_measured_is_aimed_by_its_own_points(tmp_path: Path) -> None:
    """A build twice as fast as the baseline's, measured at one light point: the model
    refitted on that point puts its capacity near where its own step times do, not where the
    baseline's build (the transferred prediction) does."""
    st = _state(tmp_path)
    _baseline(st, 600.0)
    g = Guide(st)
    fast = StepModel(base_s=0.01, per_prefill_token_s=0.0001, per_decode_s=0.0005, overhead_s=0.015)
    params = {"cpu_binding": "all_cores"}
    trial = _trial_at(st, fast, 9.0, 300, seed=7)
    transferred = g.predict(params)
    assert transferred is not None and transferred.basis == "transferred"
    assert transferred.prediction.load is not None
    kept = dict(g.calibration.fits)
    aimed = g.aim(trial)
    assert aimed is not None
    assert g.calibration.fits == kept  # the trial's own fit is kept nowhere
    # the truth: the fast build's own step model, at the same knobs
    own = g._predict(params, BuildFit({}, fast, [1], 300), [(128, 64)], resamples=0)
    assert own is not None and own.prediction.load is not None
    assert aimed == pytest.approx(own.prediction.load, rel=0.15)
    assert aimed > 1.3 * transferred.prediction.load
    # no points yet: nothing to aim with
    assert g.aim(trial.model_copy(update={"points": []})) is None


def test_a_trials_predicted_percentiles_are_those_of_a_point_like_its_own(tmp_path: Path) -> None:
    """A short point near a capacity ends before its batch has grown to the size a long run
    settles at: the model's figures beside it are those of a point of its load and number of
    requests, not of the horizon a capacity is judged over (the README command on the AMD
    box, 2026-12-07: 98 requests at 6.52 requests/s measured p50 TPOT 143 ms, the horizon's
    simulation said 318, one of 98 requests 146)."""
    from tuner.servemodel.predict import Simulator

    st = _state(tmp_path)
    t = _baseline(st, 600.0)
    recs = simulate(poisson(10.0, 60, cycled([(128, 64)]), seed=7), Knobs(128, 2048), TRUE)
    f = st.out / "trials" / "000" / "short.jsonl"
    write_records(f, recs)
    short = _metrics(recs)
    v = Verdict(holds=True, provisional=True, worst_margin=-0.5, checks=[])
    t.points.append(
        PointReport(load={"rate_rps": 10.0}, metrics=short, verdict=v, records_file=str(f))
    )
    t.metrics = short
    g = Guide(st)
    t.predicted = g.before({})
    g.after(t)
    p = t.predicted
    assert p is not None and p.at_load == 10.0 and short.tpot_ms.p50 is not None
    assert p.tpot_ms_p50_at_load == pytest.approx(short.tpot_ms.p50, rel=0.15)
    # the horizon's simulation of the same load: a batch grown well past the short point's
    sim = Simulator(TRUE, Knobs(128, 2048), cycled([(128, 64)]), st.opts.slos, 0.01, "rate")
    assert sim.point(10.0).tpot_ms_p50 > 1.5 * short.tpot_ms.p50
