"""The serving model: the scheduler simulation against hand-computed cases, the step model's
calibration on scripted records, and the prediction's interval with its run-to-run term."""

from __future__ import annotations

import random

import pytest

from probes.client import arrival_offsets
from probes.diagnose import mixed_spread
from probes.kinds import SyntheticWorkload
from probes.records import RequestRecord
from probes.slo import parse_slos
from tuner.servemodel.calibrate import calibrate, decode_observations, idle_observations
from tuner.servemodel.load import Lengths, closed_loop, cycled, poisson
from tuner.servemodel.predict import Spread, predict
from tuner.servemodel.scheduler import Arrival, Knobs, SimulationError, StepTrace, simulate
from tuner.servemodel.steptime import FitError, Observation, StepModel, attention_pairs, fit_steps

FIXED = cycled([(128, 64)])


def model(
    base: float = 0.0,
    prefill: float = 0.0,
    decode: float = 0.0,
    ctx: float = 0.0,
    kpair: float = 0.0,
    overhead: float = 0.0,
    prefill_step: float = 0.0,
) -> StepModel:
    return StepModel(
        base_s=base,
        per_prefill_token_s=prefill,
        per_decode_s=decode,
        per_ctx_ktoken_s=ctx,
        per_prefill_kpair_s=kpair,
        overhead_s=overhead,
        per_prefill_step_s=prefill_step,
    )


def test_one_request_prefill_then_decode_steps() -> None:
    # enters at 0.005; prefill 100 tokens: 0.01 + 0.1; then 3 decode steps of 0.011 each
    recs = simulate(
        [Arrival(0.0, 100, 4)], Knobs(8, 2048), model(0.01, 0.001, 0.001, overhead=0.005)
    )
    (r,) = recs
    assert r.ttft_s == pytest.approx(0.115)
    assert r.tpot_s == pytest.approx(0.011)
    assert r.e2e_s == pytest.approx(0.148)
    assert r.n_out == 4 and r.n_prompt == 100


def test_a_full_batch_makes_the_next_request_wait() -> None:
    arrivals = [Arrival(0.0, 10, 2) for _ in range(3)]
    recs = simulate(arrivals, Knobs(max_num_seqs=2, max_num_batched_tokens=2048), model(0.1))
    # steps of 0.1 s: the first two prefill together, decode together and finish at 0.2;
    # the third is admitted only then
    assert [r.ttft_s for r in recs] == pytest.approx([0.1, 0.1, 0.3])
    assert [r.e2e_s for r in recs] == pytest.approx([0.2, 0.2, 0.4])


def test_the_token_budget_splits_a_prefill() -> None:
    trace = StepTrace()
    (r,) = simulate([Arrival(0.0, 100, 2)], Knobs(8, 64), model(0.01, 0.001, 0.001), trace=trace)
    assert trace.tokens == [64, 36, 1]
    assert r.ttft_s == pytest.approx(0.074 + 0.046)
    assert r.e2e_s == pytest.approx(0.074 + 0.046 + 0.011)


def test_a_long_prefill_is_capped_while_others_share_the_batch() -> None:
    """vLLM's long_prefill_token_threshold: a long prompt takes at most the cap a step, so a
    short one beside it gets its first token at once; alone, it is not capped."""
    knobs = Knobs(8, 2048, long_prefill_threshold=256)
    trace = StepTrace()
    long, short = simulate([Arrival(0.0, 1000, 2), Arrival(0.0, 10, 2)], knobs, model(1.0),
                           trace=trace)  # fmt: skip
    # 256 + 10; then 256 beside the short one's decode; alone once it finished: the rest, 488
    assert trace.tokens == [266, 257, 488, 1]
    assert (short.ttft_s, long.ttft_s) == pytest.approx((1.0, 3.0))
    uncapped = StepTrace()
    both = simulate([Arrival(0.0, 1000, 2), Arrival(0.0, 10, 2)], Knobs(8, 2048), model(1.0),
                    trace=uncapped)  # fmt: skip
    assert uncapped.tokens[0] == 1010 and [r.ttft_s for r in both] == pytest.approx([1.0, 1.0])
    alone = StepTrace()
    simulate([Arrival(0.0, 1000, 2)], knobs, model(1.0), trace=alone)
    assert alone.tokens == [1000, 1]


def test_without_chunking_a_prompt_waits_for_a_step_with_room_for_all_of_it() -> None:
    trace = StepTrace()
    arrivals = [Arrival(0.0, 100, 2), Arrival(0.0, 100, 2)]
    recs = simulate(arrivals, Knobs(8, 128, enable_chunked_prefill=False), model(1.0), trace=trace)
    # step 1: the first prompt (100); 28 left is too little for the second, which waits
    assert trace.tokens == [100, 101, 1]
    assert [r.ttft_s for r in recs] == pytest.approx([1.0, 2.0])
    with pytest.raises(SimulationError, match="exceeds max_num_batched_tokens"):
        simulate([Arrival(0.0, 100, 2)], Knobs(8, 64, enable_chunked_prefill=False), model(1.0))


def test_preemption_when_the_kv_cache_runs_out() -> None:
    # 3 blocks of 4 tokens; each request needs up to 9 tokens (3 blocks) of cache.
    trace = StepTrace()
    arrivals = [Arrival(0.0, 4, 6), Arrival(0.0, 4, 6)]
    first, second = simulate(
        arrivals, Knobs(8, 2048, kv_blocks=3, block_size=4), model(1.0), trace=trace
    )
    assert trace.preemptions == 1
    # The second is preempted in step 2 (it was admitted last), so the first runs alone to
    # the end (step 6); the second prefills its prompt and first output again in step 7
    # and decodes its other four tokens in steps 8-11.
    assert (first.t_first, first.t_last) == (1.0, 6.0)
    assert (second.t_first, second.t_last) == (1.0, 11.0)
    assert trace.tokens[:2] == [8, 1]
    assert trace.tokens[6] == 5  # 4 prompt tokens + 1 output recomputed
    assert second.n_out == 6


def test_a_request_larger_than_the_cache_is_an_error() -> None:
    with pytest.raises(SimulationError, match="KV blocks"):
        simulate([Arrival(0.0, 40, 2)], Knobs(8, 2048, kv_blocks=2, block_size=4), model(1.0))


def test_stream_interval_groups_tokens_into_chunks() -> None:
    (r,) = simulate([Arrival(0.0, 10, 10)], Knobs(8, 2048, stream_interval=4), model(1.0))
    # first token at once, then every 4 tokens, the last when it finishes
    assert r.chunk_times == [1.0, 5.0, 9.0, 10.0]
    assert r.tpot_s == pytest.approx(1.0)


def test_closed_loop_sends_the_next_request_when_one_finishes() -> None:
    first, more = closed_loop(2, 4, cycled([(10, 2)]), seed=1)
    recs = simulate(first, Knobs(8, 2048), model(1.0), on_finish=more)
    assert len(recs) == 4
    assert sorted(r.t_sched for r in recs) == [0.0, 0.0, 2.0, 2.0]


def test_poisson_arrivals_follow_the_load_clients_schedule() -> None:
    arr = poisson(5.0, 100, FIXED, seed=3)
    assert [a.t_s for a in arr] == arrival_offsets(100, 5.0, 3)
    assert all((a.n_in, a.n_out) == (128, 64) for a in arr)


TRUE = model(base=0.02, prefill=0.0002, decode=0.001, ctx=0.002, kpair=0.000002, overhead=0.03)


def scripted_points(
    step: StepModel, knobs: Knobs, rates: tuple[float, ...], lengths: Lengths = FIXED
) -> list:
    return [simulate(poisson(r, 400, lengths, seed=int(r * 10)), knobs, step) for r in rates]


# lengths spread over +-50 %, as a real workload's: prefill and decoding costs can be told apart
_rng = random.Random(7)
SPREAD = cycled([(_rng.randint(64, 192), _rng.randint(32, 96)) for _ in range(300)])


def test_calibration_recovers_what_decides_the_step_time() -> None:
    fit = calibrate(scripted_points(TRUE, Knobs(128, 2048), (2.0, 6.0, 10.0), SPREAD))
    assert fit.fit_rel_rms is not None and fit.fit_rel_rms < 0.05
    assert fit.base_s == pytest.approx(TRUE.base_s, rel=0.1)
    assert fit.overhead_s == pytest.approx(TRUE.overhead_s, rel=0.15)
    # a full batch's step, what the capacity depends on, is right within a few per cent
    b, ctx = 100, 160
    assert fit.step_s(0, b, b * ctx / 1000) == pytest.approx(
        TRUE.step_s(0, b, b * ctx / 1000), rel=0.05
    )


@pytest.mark.parametrize(
    "knobs", [Knobs(16, 2048), Knobs(32, 256), Knobs(256, 8192), Knobs(128, 2048, False)]
)
def test_a_calibrated_model_predicts_knobs_it_was_not_fitted_on(knobs: Knobs) -> None:
    fit = calibrate(scripted_points(TRUE, Knobs(128, 2048), (2.0, 6.0, 10.0)))
    slos = parse_slos(["ttft=2s"])
    truth = predict(TRUE, knobs, FIXED, slos, 0.01, "rate", mean_lengths=(128, 64))
    guess = predict(fit, knobs, FIXED, slos, 0.01, "rate", mean_lengths=(128, 64))
    assert truth.load is not None and guess.load is not None
    assert guess.tokens_per_s == pytest.approx(truth.tokens_per_s, rel=0.05)


def test_idle_requests_give_the_overhead_and_busy_ones_do_not() -> None:
    recs = simulate(
        [Arrival(0.0, 100, 4), Arrival(0.05, 100, 4), Arrival(10.0, 50, 4)],
        Knobs(8, 2048),
        model(0.01, 0.001, 0.001, overhead=0.005),
    )
    idle = idle_observations(recs)
    assert [o.prefill_tokens for o in idle] == [100.0, 50.0]  # the second arrived mid-flight
    assert all(o.overhead == 1.0 for o in idle)
    assert idle[0].duration_s == pytest.approx(0.115)
    dec = decode_observations(recs)
    assert len(dec) == 3
    # the first request's decode interval holds the second one's prefill
    # the first request's decode steps (0.115-0.250 s) hold the second one's prefill and two
    # of its decodes besides its own three: read off the records as 100 tokens and ~2 decodes
    assert dec[0].prefill_tokens == 100
    assert dec[0].decode_seqs == pytest.approx(5.0, abs=0.1)
    assert dec[0].steps == 3


def test_a_step_with_prompt_tokens_costs_its_prefill_step_once() -> None:
    step = model(base=0.01, prefill=0.001, decode=0.002, prefill_step=0.02)
    assert step.step_s(0, 5) == pytest.approx(0.01 + 0.01)
    assert step.step_s(1, 5) == pytest.approx(0.01 + 0.001 + 0.02 + 0.01)
    assert step.step_s(100, 5) == pytest.approx(0.01 + 0.1 + 0.02 + 0.01)
    # a request decoding while another joins: its step with the prompt costs the extra 20 ms
    first, second = simulate(
        [Arrival(0.0, 10, 4), Arrival(0.025, 10, 2)], Knobs(8, 2048), step
    )  # fmt: skip
    # first: prefill 0.01 + 0.01 + 0.02 = 0.04; its first decode step holds the second's
    # prompt: 0.01 + 0.01 + 0.02 + 0.002 = 0.042 (to 0.082); then steps of 0.014 and 0.012
    assert first.t_first == pytest.approx(0.04)
    assert second.t_first == pytest.approx(0.082)
    assert first.t_last == pytest.approx(0.082 + 0.014 + 0.012)


def test_prefill_steps_are_counted_from_first_tokens_that_came_together() -> None:
    step = model(base=0.01, prefill=0.0001, decode=0.001, prefill_step=0.02)
    # a long request decoding while two prompts join in one step, then one in another
    arrivals = [Arrival(0.0, 50, 40), Arrival(0.1, 50, 3), Arrival(0.1, 50, 3), Arrival(0.3, 50, 3)]
    recs = simulate(arrivals, Knobs(8, 2048), step)
    long = decode_observations(recs)[0]
    assert long.prefill_tokens == 150 and long.prefill_steps == 2
    assert all(o.prefill_steps == 1 for o in idle_observations(recs))


def test_calibration_tells_a_prefill_steps_cost_from_its_tokens() -> None:
    """Poisson points (a prompt in most steps) and a closed loop whose prompts join in waves:
    the fit finds the cost of a step with prompts apart from its tokens' and the overhead."""
    true = model(base=0.02, prefill=0.0002, decode=0.001, overhead=0.005, prefill_step=0.025)
    points = scripted_points(true, Knobs(128, 2048), (2.0, 6.0, 10.0))
    first, more = closed_loop(32, 128, cycled([(128, 16)]), seed=2)
    points.append(simulate(first, Knobs(128, 2048), true, on_finish=more))
    fit = calibrate(points)
    assert fit.per_prefill_step_s == pytest.approx(0.025, rel=0.15)
    # a lone request's TTFT (the overhead and its prefill step), whichever way it is split
    kp = attention_pairs(0, 128) / 1000.0
    idle = true.overhead_s + true.step_s(128, 0, 0.0, kp)
    assert fit.overhead_s + fit.step_s(128, 0, 0.0, kp) == pytest.approx(idle, rel=0.05)
    # a step of 60 decoding sequences with one prompt joining, and one without
    assert fit.step_s(128, 60, 0.0, kp) == pytest.approx(true.step_s(128, 60, 0.0, kp), rel=0.05)
    assert fit.step_s(0, 60) == pytest.approx(true.step_s(0, 60), rel=0.05)


def _probe_sweeps(true: StepModel, mixed: Lengths) -> list[list[RequestRecord]]:
    """The probe's sweeps (probes/diagnose.py) on a simulated engine: lone prompts of four
    lengths, closed loops of 128/64 at 1, 4, 8 and 32, and the mixed point at 32."""
    knobs = Knobs(128, 2048)
    points = [
        simulate([Arrival(5.0 * i, n, 2) for i in range(3)], knobs, true)
        for n in (64, 128, 256, 1024)
    ]
    for c in (1, 4, 8, 32):
        first, more = closed_loop(c, max(2 * c, 4), FIXED, seed=c)
        points.append(simulate(first, knobs, true, on_finish=more))
    first, more = closed_loop(32, 128, mixed, seed=9)
    points.append(simulate(first, knobs, true, on_finish=more))
    return points


def test_the_probes_spread_mixed_point_tells_the_overhead_from_a_prefill_step() -> None:
    """A lone request's TTFT holds both the first-token overhead and its prefill step; only
    steps that compute a prompt beside decoding sequences tell them apart. A mixed point of
    fixed lengths joins its prompts in lockstep waves, and its fit is the same for a 10 ms
    overhead with a 90 ms prefill step as for the reverse; spread as the probe spreads it
    (probes/diagnose.py ``mixed_spread``), prompts join one or two at a time, and the fit finds
    which it was."""
    slos = parse_slos(["ttft=2s"])
    knobs = Knobs(128, 2048)

    def capacity(step: StepModel) -> float:
        p = predict(step, knobs, FIXED, slos, 0.01, "rate", mean_lengths=(128, 64))
        assert p.load is not None
        return p.load

    # the probe's own mixed point for 128/64: 16 outputs, its lengths spread
    mixed = SyntheticWorkload(input_len=128, output_len=16, spread=mixed_spread(128, 16, 8176))
    in_step: list[float] = []
    for overhead, prefill_step in ((0.010, 0.090), (0.090, 0.010)):
        true = model(0.017, 0.0005, 0.0022, kpair=0.002, overhead=overhead)
        true = true.model_copy(update={"per_prefill_step_s": prefill_step})
        fit = calibrate(_probe_sweeps(true, mixed.lengths))
        assert fit.overhead_s == pytest.approx(overhead, abs=0.015)
        assert capacity(fit) == pytest.approx(capacity(true), rel=0.1)
        in_step.append(calibrate(_probe_sweeps(true, cycled([(128, 16)]))).overhead_s)
    # in lockstep the two truths, 80 ms apart in their overhead, fit alike
    assert abs(in_step[0] - in_step[1]) < 0.005


def test_fit_needs_enough_observations() -> None:
    with pytest.raises(FitError):
        fit_steps([Observation(1.0, 1, 1, 1, 0, 0)])


def test_fit_of_exact_observations_is_exact() -> None:
    rng = random.Random(0)
    obs = []
    for _ in range(40):
        steps, tok, seq, ctx, kp = (
            rng.randint(1, 9),
            rng.randint(1, 900),
            rng.randint(1, 50),
            rng.random() * 20,
            rng.random(),
        )
        total = TRUE.step_s(tok, seq, ctx, kp) - TRUE.base_s + steps * TRUE.base_s
        obs.append(Observation(total, steps, tok, seq, ctx, kp))
    fit = fit_steps(obs)
    assert fit.per_prefill_token_s == pytest.approx(TRUE.per_prefill_token_s, rel=1e-6)
    assert fit.per_decode_s == pytest.approx(TRUE.per_decode_s, rel=1e-6)
    assert fit.per_ctx_ktoken_s == pytest.approx(TRUE.per_ctx_ktoken_s, rel=1e-6)
    assert fit.fit_rel_rms == pytest.approx(0.0, abs=1e-9)


def test_the_interval_holds_the_run_to_run_spread() -> None:
    slos = parse_slos(["ttft=2s"])
    plain = predict(TRUE, Knobs(128, 2048), FIXED, slos, 0.01, "rate", mean_lengths=(128, 64))
    wide = predict(
        TRUE,
        Knobs(128, 2048),
        FIXED,
        slos,
        0.01,
        "rate",
        mean_lengths=(128, 64),
        spread=Spread(run_to_run=0.15, model=0.08),
    )
    assert wide.tokens_per_s == pytest.approx(plain.tokens_per_s)
    rel = (0.15**2 + 0.08**2) ** 0.5
    assert wide.low == pytest.approx(plain.tokens_per_s * (1 - rel))
    assert wide.high is not None and wide.high == pytest.approx(plain.tokens_per_s * (1 + rel))
    assert plain.low > wide.low
    assert wide.spread_run_to_run == 0.15


def test_a_prediction_is_judged_like_a_measured_trial() -> None:
    slos = parse_slos(["ttft=2s"])
    p = predict(TRUE, Knobs(128, 2048), FIXED, slos, 0.01, "rate", mean_lengths=(128, 64))
    assert p.load is not None and p.censored == "none"
    assert p.binding == "ttft@p99"
    held = [q for q in p.points if q.holds]
    broke = [q for q in p.points if not q.holds]
    assert held and broke
    assert max(q.load for q in held) <= p.load <= min(q.load for q in broke)
    assert p.at_capacity is not None and p.at_capacity.ttft_ms_p99 is not None
    assert p.at_capacity.ttft_ms_p99 <= 2000.0
    # the score is the rate times the output tokens per request (the open-loop window)
    assert p.tokens_per_s == pytest.approx(p.load * 64, rel=0.02)


def test_closed_loop_prediction_is_a_concurrency() -> None:
    slos = parse_slos(["ttft=2s"])
    p = predict(TRUE, Knobs(128, 2048), FIXED, slos, 0.01, "concurrency", mean_lengths=(128, 64))
    assert p.load_kind == "concurrency" and p.load is not None
    assert all(q.load == int(q.load) for q in p.points)


@pytest.mark.parametrize(
    "knobs",
    [
        Knobs(128, 2048),
        Knobs(8, 64, stream_interval=4),
        Knobs(64, 512, kv_blocks=40, block_size=16, stream_interval=8),
        Knobs(32, 8192, enable_chunked_prefill=False),
    ],
)
def test_fast_forward_gives_the_records_of_stepping_one_at_a_time(knobs: Knobs) -> None:
    rng = random.Random(5)
    lengths = [(rng.randint(10, 300), rng.randint(1, 90)) for _ in range(50)]
    arrivals = poisson(6.0, 200, cycled(lengths), seed=9)
    step = model(base=0.01, prefill=0.0002, decode=0.0007, ctx=0.002, kpair=0.00001, overhead=0.01)
    slow_trace, fast_trace = StepTrace(), StepTrace()
    slow = simulate(arrivals, knobs, step, fast=False, trace=slow_trace)
    fast = simulate(arrivals, knobs, step, trace=fast_trace)
    assert fast_trace.preemptions == slow_trace.preemptions
    assert fast_trace.tokens == slow_trace.tokens
    for a, b in zip(slow, fast, strict=True):
        assert (a.index, a.n_out, a.n_prompt) == (b.index, b.n_out, b.n_prompt)
        assert b.t_first == pytest.approx(a.t_first, abs=1e-9)
        assert b.t_last == pytest.approx(a.t_last, abs=1e-9)
        assert b.chunk_times == pytest.approx(a.chunk_times, abs=1e-9)


def test_fast_forward_in_a_closed_loop() -> None:
    step = model(base=0.01, prefill=0.0002, decode=0.0007, overhead=0.01)
    first, more = closed_loop(16, 100, cycled([(128, 64), (40, 10)]), seed=2)
    slow = simulate(first, Knobs(64, 2048), step, on_finish=more, fast=False)
    first, more = closed_loop(16, 100, cycled([(128, 64), (40, 10)]), seed=2)
    fast = simulate(first, Knobs(64, 2048), step, on_finish=more)
    assert [r.t_last for r in fast] == pytest.approx([r.t_last for r in slow], abs=1e-9)


# ---------------------------------------------------------------- the prefix cache
def test_a_prefix_cache_skips_the_shared_prompts_whole_blocks() -> None:
    # 300 prompt tokens, 200 of them shared; blocks of 128: one block (128 tokens) is held,
    # so the prefill computes 172 tokens: 0.01 + 0.172 s, after the 0.005 s overhead
    step = model(0.01, 0.001, 0.001, overhead=0.005)
    arrival = [Arrival(0.0, 300, 2, cached_tokens=200)]
    on = Knobs(8, 2048, block_size=128, prefix_caching=True)
    trace = StepTrace()
    (r,) = simulate(arrival, on, step, trace=trace)
    assert trace.tokens[0] == 172
    assert r.ttft_s == pytest.approx(0.005 + 0.01 + 0.172)
    assert r.n_prompt_shared == 200  # the record says what was shared, as a measured one does
    # with the cache off, the whole prompt is computed
    (off,) = simulate(arrival, Knobs(8, 2048, block_size=128), step)
    assert off.ttft_s == pytest.approx(0.005 + 0.01 + 0.300)
    # never the prompt's last token: a prompt shared whole still computes its last block
    trace = StepTrace()
    simulate([Arrival(0.0, 256, 2, cached_tokens=256)], on, step, trace=trace)
    assert trace.tokens[0] == 128


def test_measured_shared_tokens_reach_the_simulation() -> None:
    # (prompt, output, shared) as lengths_of reads them off the records: cached where on
    lengths = cycled([(300, 2, 200)])
    (r,) = simulate(poisson(1.0, 1, lengths, seed=1), Knobs(8, 2048, prefix_caching=True), TRUE)
    assert r.n_prompt_shared == 200


def test_calibration_counts_only_the_prompt_tokens_a_prefix_cache_did_not_hold() -> None:
    # records of a build with its cache on, 192 of every 256-token prompt shared (one block of
    # 128 held): fitted as computed (128 tokens each), the prefill cost is recovered; fitted
    # as if every prompt token were computed, it is about halved
    shared = cycled([(256, _rng.randint(32, 96), 192) for _ in range(300)])
    knobs = Knobs(128, 2048, block_size=128, prefix_caching=True)
    points = scripted_points(TRUE, knobs, (2.0, 6.0, 10.0), shared)
    right = calibrate(points, block=128)
    wrong = calibrate(points)
    assert right.per_prefill_token_s == pytest.approx(TRUE.per_prefill_token_s, rel=0.2)
    assert wrong.per_prefill_token_s < 0.75 * TRUE.per_prefill_token_s
    idle = idle_observations(points[0], block=128)
    assert idle and all(o.prefill_tokens == 128 for o in idle)
