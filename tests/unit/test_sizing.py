"""tuner/run/sizing.py's budget decisions on a scripted clock, with the figures of a 13-minute run
on a fresh 2-core AMD machine (a cold first start of 122 s, 42-59 s for every start after it;
vLLM's defaults at 2.73 requests/s, about 196 s for one 505-request confirmation try)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from probes.metrics import Dist, LoadMetrics, Verdict
from tests.unit.run_state import run_state
from tuner.report.schema import PointReport, PredictedReport, TrialReport
from tuner.run import sizing
from tuner.run.state import RunState
from tuner.scoring.capacity import LoadAxis
from tuner.scoring.estimate import Samples

BUDGET_S = 780.0


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _state(tmp_path: Path, clock: Clock, budget_s: float | None = BUDGET_S) -> RunState:
    return run_state(tmp_path, budget_s=budget_s, now=clock)


def _metrics(rate: float, e2e_ms: float, duration_s: float = 20.0) -> LoadMetrics:
    d = Dist(p50=100.0, p99=200.0, n=50)
    return LoadMetrics(
        ttft_ms=d, tpot_ms=d, itl_ms=d, e2e_ms=Dist(p50=e2e_ms, n=50), queue_ms=d,
        output_tokens_per_s=rate * 64, requests_per_s=rate, goodput_rps=rate,
        token_goodput_per_s=rate * 64, slo_attainment=1.0, n_requests=50, n_completed=50,
        n_failed=0, error_rate=0.0, duration_s=duration_s, mean_in_flight=rate * e2e_ms / 1e3,
        mean_output_tokens=64.0, n_out_source="usage", prompt_token_mismatches=0,
    )  # fmt: skip


def _trial(number: int, startup_s: float, rate: float, e2e_ms: float = 11_000.0) -> TrialReport:
    return TrialReport(
        number=number,
        stage="baseline" if number == 0 else "batching",
        params={},
        args=[],
        env={},
        launch_command=[],
        status="ok",
        startup_s=startup_s,
        warmup_s=13.0,
        load={"rate_rps": rate},
        metrics=_metrics(rate, e2e_ms),
        score_tokens_per_s=rate * 64,
    )


def _try(st: RunState, capacity: float, e2e_s: float) -> float:
    """A full-size confirmation try costed at the load margin under a capacity (open loop)."""
    return 505 / (capacity * (1.0 - st.opts.load_margin)) + e2e_s


def _point(rate: float, holds: bool, e2e_ms: float = 8_000.0) -> PointReport:
    verdict = Verdict(
        holds=holds, provisional=False, worst_margin=-0.3 if holds else 0.5, checks=[]
    )
    return PointReport(
        load={"rate_rps": rate}, metrics=_metrics(rate, e2e_ms), verdict=verdict, records_file=""
    )


def _samples(st: RunState, number: int, rate: float, ttft_ms: float) -> None:
    n = 60
    st.add_samples(
        number,
        Samples(
            load=rate,
            duration_s=n / rate,
            ok=np.ones(n, dtype=bool),
            n_out=np.full(n, 64.0),
            values={"ttft": np.full(n, ttft_ms), "tpot": np.full(n, 50.0)},
            itl=[np.zeros(0)] * n,
        ),
    )


def test_a_later_start_is_estimated_from_the_starts_after_the_first(tmp_path: Path) -> None:
    st = _state(tmp_path, Clock())
    assert sizing.start_estimate_s(st) == 60.0  # nothing started yet
    st.baseline = _trial(0, 122.0, 2.73)
    assert sizing.start_estimate_s(st) == 122.0  # all there is to go on
    st.trials = [_trial(1, 55.0, 4.6), _trial(2, 45.0, 4.7)]
    assert sizing.start_estimate_s(st) == 50.0  # the cold first start left out
    assert sizing.start_estimate_s(st, also=_trial(3, 59.0, 4.0)) == 55.0


def test_after_a_cold_baseline_a_trial_fits_where_its_confirmation_on_its_own_server_does(
    tmp_path: Path,
) -> None:
    """287 s in, 493 s left: the baseline's own confirmation now (196 s) would leave too little
    for a trial and two tries of its confirmation, but a trial confirmed on its own server fits
    once the baseline's is put off."""
    clock = Clock()
    st = _state(tmp_path, clock)
    base = _trial(0, 122.0, 2.73)
    clock.t = 287.0
    try_s = sizing.confirm_try_s(st, base)
    x = 2.73 * (1.0 - st.opts.load_margin)  # the try's load, under the capacity
    assert try_s == pytest.approx(int(0.25 * 780.0 * x) / x + 11.0, abs=1.0)  # a quarter's
    reserve = sizing.baseline_confirm_reserve_s(st, base)
    assert not st.budget.fits(try_s, reserve)  # so confirm_on puts the baseline's off
    st.baseline = base
    assert sizing.another_trial_fits(st)
    assert sizing.time_left_reason(st) is None
    clock.t = 780.0 - sizing.trial_min_s(st) - try_s + 1.0
    assert not sizing.another_trial_fits(st)
    assert "time budget" in (sizing.time_left_reason(st) or "")


def test_the_baseline_is_confirmed_at_once_only_where_three_trials_like_it_fit_first(
    tmp_path: Path,
) -> None:
    """The README command on the 2-core Xeon (2026-12-05): the baseline's search ended 4 m 39 s
    in, its confirmation took 71 s at once, and the 13 minutes then held two trials. Its
    confirmation now waits where ``TRIALS_FIRST`` trials, each costed as the baseline's own
    start, warm-up and search (77 s + 13 s + three 20 s points here), and two tries on the last
    one's server do not fit after it; with a budget that holds them, it is made at once."""
    clock = Clock()
    st = _state(tmp_path, clock)
    base = _trial(0, 77.0, 6.6, e2e_ms=4_800.0)
    base.points = [_point(5.0, True), _point(6.6, True), _point(7.4, False)]
    clock.t = 333.0
    try_s = sizing.confirm_try_s(st, base)
    one = 77.0 + 13.0 + 3 * 20.0 + sizing.STOP_S
    assert one > sizing.trial_min_s(st, base) + sizing.STOP_S  # the baseline's own cost rules
    reserve = sizing.baseline_confirm_reserve_s(st, base)
    assert reserve == pytest.approx(sizing.TRIALS_FIRST * one + 2 * try_s)
    assert not st.budget.fits(try_s, reserve)  # put off: 447 s left
    # With a 25-minute budget the three trials and the baseline's confirmation all fit.
    long = _state(tmp_path, clock, budget_s=1500.0)
    assert long.budget.fits(try_s, sizing.baseline_confirm_reserve_s(long, base))
    # --trials 1: one trial is kept back, not three.
    st.opts.trials = 1
    assert sizing.baseline_confirm_reserve_s(st, base) == pytest.approx(one + 2 * try_s)
    # A shared study confirms nothing in place: there the fresh start is kept back too.
    st.shared = object()  # type: ignore[assignment]  # only its presence counts
    assert sizing.baseline_confirm_reserve_s(st, base) == pytest.approx(
        one + sizing.confirm_estimate_s(st, best=base)
    )
    # No trial to follow: nothing is kept back.
    st.shared = None
    st.opts.trials = 0
    assert sizing.baseline_confirm_reserve_s(st, base) == 0.0


def test_a_trial_that_leads_is_confirmed_on_its_own_server_only_when_no_trial_fits_after_it(
    tmp_path: Path,
) -> None:
    clock = Clock()
    st = _state(tmp_path, clock)
    st.baseline = base = _trial(0, 122.0, 2.73)
    lead, behind = _trial(1, 55.0, 4.6, e2e_ms=9_000.0), _trial(2, 55.0, 2.0)
    clock.t = 600.0  # 180 s left: less than another trial and one try
    assert sizing.confirm_in_place(st, lead, base)
    assert not sizing.confirm_in_place(st, behind, base)  # the baseline stays the best
    rejected = lead.model_copy(update={"rejected": "quality"})
    assert not sizing.confirm_in_place(st, rejected, base)
    clock.t = 100.0  # a further trial fits: the winner is confirmed on a fresh start later
    assert not sizing.confirm_in_place(st, lead, base)
    unbounded = _state(tmp_path, Clock(), budget_s=None)
    assert not sizing.confirm_in_place(unbounded, lead, base)


def test_a_trial_that_leads_is_confirmed_in_place_where_the_next_gate_would_come_too_late(
    tmp_path: Path,
) -> None:
    """Between the choice and the next trial's gate the server stops: a further trial that
    fits now by less than that slack would not fit when its gate is asked."""
    clock = Clock()
    st = _state(tmp_path, clock)
    st.baseline = base = _trial(0, 122.0, 2.73)
    lead = _trial(1, 55.0, 4.6, e2e_ms=9_000.0)
    gate = sizing.gate_s(st, lead, True)
    clock.t = BUDGET_S - gate - sizing.IN_PLACE_SLACK_S / 2
    assert sizing.another_trial_fits(st, lead, strict=True)  # by a few seconds only
    assert sizing.confirm_in_place(st, lead, base)
    clock.t = BUDGET_S - gate - sizing.IN_PLACE_SLACK_S - 1.0
    assert not sizing.confirm_in_place(st, lead, base)


def test_a_leading_trial_keeps_back_tries_at_its_own_capacity_not_the_best_ones(
    tmp_path: Path,
) -> None:
    """While a trial leads, its search keeps back what a confirmation on its own server at its
    own (higher) capacity needs: one try while its capacity is not bracketed narrowly, two
    once it is. A trial that trails keeps back the best's confirmation on a fresh start."""
    clock = Clock()
    st = _state(tmp_path, clock)
    st.baseline = base = _trial(0, 122.0, 2.73)
    for rate, ttft in ((2.0, 300.0), (2.6, 1500.0), (2.9, 2600.0)):
        _samples(st, 0, rate, ttft)
    fresh = sizing.confirm_estimate_s(st)
    assert fresh == pytest.approx(122.0 + 30.0 + 2 * sizing.confirm_try_s(st, base))
    trial = _trial(1, 55.0, 5.5)
    trial.points = [_point(2.73, True), _point(5.46, True)]
    _samples(st, 1, 2.73, 300.0)
    _samples(st, 1, 5.46, 900.0)
    one_at_5_46 = _try(st, 5.46, 8.0)
    # Censored above (nothing failed yet): one try at its highest load.
    _keeps_back(st, clock, trial, one_at_5_46)
    # A load failed far above (6.9, 1.26x): one try at the fitted capacity, so that a point
    # between the two still fits.
    trial.points.append(_point(6.9, False))
    _samples(st, 1, 6.9, 5000.0)
    est = st.estimate(1)
    assert est is not None and est.censored == "none" and 5.46 < (est.load or 0) < 6.9
    _keeps_back(st, clock, trial, _try(st, est.load or 1, 8.0))
    # Bracketed within the search's resolution (6.1 failed, 1.12x): two tries there.
    trial.points.append(_point(6.1, False))
    _samples(st, 1, 6.1, 3000.0)
    est = st.estimate(1)
    assert est is not None and est.censored == "none" and 5.46 < (est.load or 0) < 6.1
    _keeps_back(st, clock, trial, 2 * _try(st, est.load or 1, 8.0))
    # Trailing the baseline: the baseline's fresh confirmation is what must fit, with one try
    # while the run has measured fewer than three trials (``fresh_tries``), two after.
    slow = _trial(2, 55.0, 1.0)
    slow.points = [_point(1.0, True), _point(2.0, False)]
    _samples(st, 2, 1.0, 300.0)
    _samples(st, 2, 2.0, 5000.0)
    _keeps_back(st, clock, slow, fresh - sizing.confirm_try_s(st, base))
    st.trials = [_trial(n, 55.0, 1.0) for n in (3, 4, 5)]  # starts of 55 s from now on
    two = 55.0 + 30.0 + 2 * sizing.confirm_try_s(st, base)
    assert sizing.confirm_estimate_s(st) == pytest.approx(two)
    _keeps_back(st, clock, slow, two)


def _keeps_back(st: RunState, clock: Clock, trial: TrialReport, reserve_s: float) -> None:
    """The search takes a next point (its last one's 20 s) only with ``reserve_s`` left after."""
    clock.t = BUDGET_S - 20.0 - reserve_s - 1.0
    assert sizing.points_time_left(st, trial) is None
    clock.t += 2.0
    assert sizing.points_time_left(st, trial) is not None


def test_after_the_first_trial_another_needs_room_for_the_unconfirmed_best_on_a_fresh_start(
    tmp_path: Path,
) -> None:
    """The first trial is a gamble the probe backs: it needs only its own confirmation. A
    later one that loses must still leave the best (unconfirmed) a fresh start and a try; from
    the run's third trial on, two tries."""
    clock = Clock()
    st = _state(tmp_path, clock)
    st.baseline = _trial(0, 122.0, 2.73)
    first = sizing.trial_min_s(st) + sizing.confirm_try_s(st)
    clock.t = BUDGET_S - first - 1.0
    assert sizing.another_trial_fits(st)  # no trial measured yet
    st.trials = [_trial(1, 60.0, 2.5)]  # measured, and behind the baseline
    assert sizing.start_estimate_s(st) == 60.0
    one_try = sizing.trial_min_s(st) + 60.0 + 30.0 + sizing.confirm_try_s(st)
    assert sizing.confirm_try_s(st) > 10.0  # the second try is no rounding error here
    _fits_until(st, clock, one_try)
    st.trials.append(_trial(2, 60.0, 2.5))
    _fits_until(st, clock, sizing.trial_min_s(st) + 60.0 + 30.0 + sizing.confirm_try_s(st))
    # From the third trial on, a first try at the edge of the noise leaves room for a second.
    st.trials.append(_trial(3, 60.0, 2.5))
    two_tries = sizing.trial_min_s(st) + 60.0 + 30.0 + 2 * sizing.confirm_try_s(st)
    _fits_until(st, clock, two_tries)
    # The baseline confirmed already: only the next trial's own confirmation must fit.
    st.baseline_confirmed = object()  # type: ignore[assignment]  # only its presence counts
    assert sizing.another_trial_fits(st)


def test_a_trial_just_measured_counts_towards_the_second_try(tmp_path: Path) -> None:
    """``confirm_in_place`` asks before the trial it measured is in the run's list: that trial
    counts, so the third trial's question is costed with two tries, as the next one's is."""
    st = _state(tmp_path, Clock())
    st.baseline = _trial(0, 122.0, 2.73)
    st.trials = [_trial(1, 60.0, 2.5)]
    third = _trial(2, 60.0, 3.0)
    assert sizing.fresh_tries(st) == 1
    assert sizing.fresh_tries(st, third) == 1
    st.trials.append(third)
    assert sizing.fresh_tries(st, third) == 1  # in the list already: counted once
    assert sizing.fresh_tries(st, _trial(3, 60.0, 3.0)) == 2
    assert sizing.fresh_tries(st, st.baseline) == 1  # the baseline is no trial


def _fits_until(st: RunState, clock: Clock, need_s: float) -> None:
    """Another trial fits with ``need_s`` left, and not with a second less."""
    clock.t = BUDGET_S - need_s - 0.5
    assert sizing.another_trial_fits(st)
    clock.t += 1.0
    assert not sizing.another_trial_fits(st)


def test_a_rate_point_spans_three_lifetimes_of_the_failed_point_above_it(tmp_path: Path) -> None:
    """Seed 61's trial 1 on the AMD machines: held at 6.49 requests/s (E2E p50 4.9 s), broke
    at 9.09 (10.3 s). A point between the two spans three of the failed point's lifetimes (the
    held one's understate them there); a point above every failed one, or in a trial with
    none, three of the held point's."""
    st = _state(tmp_path, Clock())
    trial = _trial(1, 50.0, 6.49)
    assert sizing.n_search(st, 6.49, trial) == math.ceil(15.0 * 6.49)  # nothing measured yet
    trial.points = [_point(6.49, True, e2e_ms=4_900.0)]
    assert sizing.n_search(st, 9.09, trial) == math.ceil(15.0 * 9.09)  # 3 x 4.9 s < 15 s
    trial.points.append(_point(9.09, False, e2e_ms=10_300.0))
    assert sizing.n_search(st, 8.02, trial) == math.ceil(3 * 10.3 * 8.02)
    assert sizing.n_search(st, 12.0, trial) == math.ceil(15.0 * 12.0)
    trial.points.append(_point(8.02, True, e2e_ms=9_000.0))
    assert sizing.n_search(st, 8.5, trial) == math.ceil(3 * 10.3 * 8.5)
    # At most four times the point's span, however long a failed point's requests lived.
    trial.points.append(_point(8.8, False, e2e_ms=90_000.0))
    assert sizing.n_search(st, 8.5, trial) == math.ceil(60.0 * 8.5)


def _with_requests(p: PointReport, n: int) -> PointReport:
    return p.model_copy(update={"metrics": p.metrics.model_copy(update={"n_requests": n})})


def test_a_held_point_too_short_for_the_failure_above_it_is_measured_again(
    tmp_path: Path,
) -> None:
    """Seed 64's trial 1 on the AMD machines: 164 requests at 6.66 requests/s held while every
    load had held; then 7.98 broke with requests living 25 s. Three of those lifetimes at 6.66
    are 400 arrivals (the 60 s cap), so 164 is too short; 164 + 400 is not."""
    st = _state(tmp_path, Clock())
    trial = _trial(1, 50.0, 6.66)
    trial.points = [_with_requests(_point(6.66, True, e2e_ms=9_000.0), 164)]
    assert not sizing.too_short(st, trial, 6.66)  # nothing failed above: sized as it should be
    trial.points.append(_with_requests(_point(7.98, False, e2e_ms=25_000.0), 393))
    assert sizing.n_search(st, 6.66, trial) == math.ceil(60.0 * 6.66)
    assert sizing.too_short(st, trial, 6.66)
    trial.points.append(_with_requests(_point(6.66, True, e2e_ms=12_000.0), 400))
    assert not sizing.too_short(st, trial, 6.66)  # both points at 6.66 together
    # Two thirds of what the rule asks for are enough.
    trial.points = [
        _with_requests(_point(6.66, True, e2e_ms=9_000.0), 270),
        _with_requests(_point(7.98, False, e2e_ms=25_000.0), 393),
    ]
    assert not sizing.too_short(st, trial, 6.66)
    # A closed loop's point size does not depend on lifetimes: never measured again.
    st.axis = LoadAxis("concurrency", minimum=1, maximum=64)
    assert not sizing.too_short(st, trial, 6.66)


def test_the_baseline_search_keeps_back_the_first_trials_gate(tmp_path: Path) -> None:
    """The 2-core Intel Xeon's run (2026-12-02): a 163 s cold start, the probe, then the
    baseline's points from 240 s in. Kept nothing back, it took every point the budget held,
    and no trial fitted after it. Now it stops while the first trial's gate still fits, and
    trials disabled it keeps nothing back."""
    clock = Clock()
    st = _state(tmp_path, clock)
    base = _trial(0, 163.0, 4.65, e2e_ms=7_000.0)
    base.metrics = None  # scored only once its search ends
    ladder = [(2.37, True, 20.0), (3.32, True, 20.0), (4.65, True, 20.0), (6.51, False, 35.0)]
    ladder += [(4.65, True, 68.0), (5.12, True, 68.0), (5.47, False, 68.0)] * 3
    clock.t = 240.0
    for rate, holds, duration_s in ladder:
        if base.points and sizing.points_time_left(st, base) is not None:
            break
        point = _point(rate, holds, e2e_ms=7_000.0)
        point.metrics.duration_s = duration_s
        base.points.append(point)
        clock.t += duration_s
    else:
        raise AssertionError("the baseline's search never stopped")
    clock.t += sizing.STOP_S
    base.metrics = _metrics(4.65, 7_000.0)
    st.baseline = base
    assert sizing.another_trial_fits(st)
    assert 4 <= len(base.points) < len(ladder)
    # No trials to follow: the baseline keeps back what its own confirmation needs, as before.
    st.baseline = None
    st.opts.trials = 0
    clock.t = BUDGET_S - base.points[-1].metrics.duration_s - 1.0  # room for one more point
    assert sizing.points_time_left(st, base) is None


def test_a_confirmation_try_grows_by_what_the_time_left_holds_and_at_most_its_size() -> None:
    """Seed 91's try: 505 requests at 4.21 req/s with 120 s spare could grow by the 157 that
    one request over 2 s asked for; 40 s spare holds 168 more; none past the budget."""
    assert sizing.growth_room(505, None, 4.21) == 505  # no budget: up to the try's own size
    assert sizing.growth_room(505, 40.0, 4.21) == math.floor(40.0 * 4.21)
    assert sizing.growth_room(505, 1e6, 4.21) == 505
    assert sizing.growth_room(505, -3.0, 4.21) == 0


def test_a_first_point_just_above_a_prediction_is_sized_for_the_edge(tmp_path: Path) -> None:
    """The README command on the Xeon: 161 requests at 10.7 requests/s, just above the probe's
    prediction, held; 595 there broke. A first point started from a calibrated or probe
    prediction spans three of the lifetimes predicted at capacity (TPOT p50 x the output per
    request); one from a transferred prediction (not where the search starts) does not."""
    st = _state(tmp_path, Clock())
    t = _trial(0, 40.0, 9.0)
    t.points = []
    short = sizing.n_search(st, 10.7, t)
    assert short == math.ceil(st.opts.search_point_s * 10.7)
    t.predicted = PredictedReport(
        basis="probe", build_trials=[], load=10.0, tokens_per_s=640.0, low=520.0, high=780.0,
        tpot_ms_p50=200.0,
    )  # fmt: skip
    life_s = 0.200 * 64  # 12.8 s
    assert sizing.n_search(st, 10.7, t) == math.ceil(3 * life_s * 10.7)
    t.predicted.basis = "transferred"
    assert sizing.n_search(st, 10.7, t) == short
    # once a point is measured, the measured lifetimes rule
    t.predicted.basis = "probe"
    t.points = [_point(10.7, True, e2e_ms=4_000.0)]
    assert sizing.n_search(st, 10.7, t) == short


def test_the_next_point_is_costed_at_its_own_size_not_the_last_ones(tmp_path: Path) -> None:
    """The README command on the Xeon (21:38): a point costed as the last one (35 s) fitted;
    measured again with more requests it took 59 s, and the trial that then led had time for
    108 of the 505 requests its confirmation needed. The next point is costed at its own size."""
    clock = Clock()
    st = _state(tmp_path, clock)
    st.baseline = _trial(0, 40.0, 6.0)
    t = _trial(1, 40.0, 6.0)
    t.points = [_point(6.0, True, e2e_ms=8_000.0), _point(8.0, False, e2e_ms=12_000.0)]
    reserve = sizing.reserve_s(st, t)
    last_s = t.points[-1].metrics.duration_s  # 20 s
    planned_s = sizing.n_search(st, 6.0, t) / 6.0 + 12.0  # 36 s of arrivals, and a lifetime
    assert planned_s > last_s + 20.0
    clock.t = BUDGET_S - reserve - last_s - 5.0  # room for a point as long as the last one
    assert sizing.points_time_left(st, t) is None  # costed as the last one: it would go on
    assert "time budget" in (sizing.points_time_left(st, t, 6.0) or "")
    clock.t = BUDGET_S - reserve - planned_s - 5.0
    assert sizing.points_time_left(st, t, 6.0) is None


def test_the_baseline_keeps_nothing_back_for_trials_until_one_of_its_loads_holds(
    tmp_path: Path,
) -> None:
    """The README command on a slow Xeon (2026-12-06): 2.0 and 1.57 requests/s broke, 460 s
    into 780; keeping the first trial's gate back would stop the baseline with no figure."""
    clock = Clock()
    st = _state(tmp_path, clock)
    base = _trial(0, 125.0, 1.57, e2e_ms=35_000.0)
    base.metrics = None
    base.points = [_point(2.0, False, e2e_ms=38_000.0), _point(1.57, False, e2e_ms=36_000.0)]
    for p in base.points:
        p.metrics.duration_s = 60.0
    clock.t = 460.0
    assert sizing.points_time_left(st, base) is None  # one more point fits the budget itself
    base.points.append(_point(1.38, True, e2e_ms=30_000.0))
    base.points[-1].metrics.duration_s = 60.0
    clock.t = 520.0
    # Now it has a figure: the first trial's gate is kept back again, and does not fit.
    assert "time budget" in (sizing.points_time_left(st, base) or "")


def test_a_quantised_trial_whose_gain_is_not_paid_keeps_the_fresh_confirmation_back(
    tmp_path: Path,
) -> None:
    """The README command on a fast AMD box (2026-12-07 16:25): an fp8 KV cache ahead of a
    batching trial whose one point held kept back one try on its own server, as a leader does,
    took two more points, and was then not carried (its quality cost unpaid): the best's fresh
    start had time for 387 of the 459 requests its p99 needs. A trial that would not lead keeps
    the best's fresh confirmation back."""
    from probes.quality import QualityCheck

    clock = Clock()
    st = _state(tmp_path, clock)
    st.baseline = _trial(0, 40.0, 5.0)
    _samples(st, 0, 5.0, 300.0)
    ref = _trial(2, 40.0, 10.0)
    _samples(st, 2, 10.0, 900.0)  # its one point held: a lower bound
    ref.estimate = st.estimate(2)
    assert ref.estimate is not None and ref.estimate.censored == "above"
    st.trials = [ref]
    fp8 = _trial(3, 40.0, 11.0)
    fp8.status = "running"
    fp8.points = [_point(11.0, True), _point(13.4, False)]
    _samples(st, 3, 11.0, 900.0)
    _samples(st, 3, 13.4, 4_000.0)
    est = st.estimate(3)
    assert est is not None and est.tokens_per_s > st.to_beat(ref)  # ahead of the best
    leader = sizing.reserve_s(st, fp8)
    assert leader < sizing.end_reserve_s(st)  # costing no quality, it leads: tries in place
    fp8.quality = QualityCheck(
        metric="perplexity", value=48.88, baseline_value=48.66, degradation_pct=0.46,
        limit_pct=1.0, holds=True, n_tokens=900, n_texts=24,
    )  # fmt: skip
    assert sizing.reserve_s(st, fp8) == sizing.end_reserve_s(st) > leader
