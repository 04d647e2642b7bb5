"""The front end's admission delay: the simulation's hand-computed cases, and its fit by replay
on scripted points (tuner/servemodel/admission.py, tuner/servemodel/scheduler.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tuner.servemodel.admission import Replay, arrivals_of, fit_admission
from tuner.servemodel.load import cycled, poisson
from tuner.servemodel.scheduler import Arrival, Knobs, StepTrace, simulate
from tuner.servemodel.steptime import StepModel

STEP = StepModel(base_s=0.1, per_prefill_token_s=0.0, per_decode_s=0.0)
TRUE = StepModel(
    base_s=0.02, per_prefill_token_s=0.0002, per_decode_s=0.001, per_ctx_ktoken_s=0.002
)
KNOBS = Knobs(256, 2048)
ADMIT = 0.002


def _with(step: StepModel, admit: float) -> StepModel:
    return step.model_copy(update={"admit_per_seq_s": admit})


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize(
    ("admit", "ttft"),
    [
        # steps of 0.1 s from 0; A is running when B arrives at 0.15
        (0.0, 0.15),  # B reaches the engine during the step ending 0.2, joins the next
        (0.04, 0.15),  # at 0.19: still in time for the step starting at 0.2
        (0.06, 0.25),  # at 0.21: misses it, joins the step starting at 0.3
    ],
)
def test_a_request_arriving_beside_a_running_one_waits_its_delay(
    admit: float, ttft: float, fast: bool
) -> None:
    trace = StepTrace()
    a, b = simulate(
        [Arrival(0.0, 10, 6), Arrival(0.15, 10, 2)],
        Knobs(8, 2048),
        _with(STEP, admit),
        trace=trace,
        fast=fast,
    )
    assert a.ttft_s == pytest.approx(0.1)  # nothing ran when A arrived: no delay
    assert b.ttft_s == pytest.approx(ttft)
    assert trace.running_at_arrival == {0: 0, 1: 1}


def test_the_delay_grows_with_the_requests_running() -> None:
    # three running when the fourth arrives: 3 x 0.02 s takes it past the step's end
    arrivals = [Arrival(0.0, 10, 6) for _ in range(3)] + [Arrival(0.15, 10, 2)]
    *_, alone = simulate(arrivals, Knobs(8, 2048), _with(STEP, 0.0))
    *_, late = simulate(arrivals, Knobs(8, 2048), _with(STEP, 0.02))
    assert alone.ttft_s == pytest.approx(0.15)
    assert late.ttft_s == pytest.approx(0.25)


def _points(step: StepModel, rates: tuple[float, ...]) -> list[Replay]:
    return [
        Replay(simulate(poisson(r, 400, cycled([(128, 64)]), seed=int(r * 10)), KNOBS, step), KNOBS)
        for r in rates
    ]


def test_arrivals_of_replays_a_point_in_the_order_it_was_sent() -> None:
    recs = simulate(poisson(5.0, 50, cycled([(128, 64), (40, 9)]), seed=3), KNOBS, TRUE)
    arrivals, ttfts = arrivals_of(list(reversed(recs)))
    assert [a.t_s for a in arrivals] == sorted(a.t_s for a in arrivals)
    assert arrivals[0].t_s == 0.0
    assert [(a.n_in, a.n_out) for a in arrivals[:2]] == [(128, 64), (40, 9)]
    assert ttfts == pytest.approx([r.ttft_s for r in recs])


def test_the_fit_recovers_the_delay_the_points_were_measured_with() -> None:
    measured = _points(_with(TRUE, ADMIT), (6.0, 10.0))
    assert fit_admission([(TRUE, measured)]) == pytest.approx(ADMIT, rel=0.25)


def test_points_without_a_delay_fit_none() -> None:
    assert fit_admission([(TRUE, _points(TRUE, (6.0, 10.0)))]) == pytest.approx(0.0, abs=1e-4)


def test_one_delay_fits_the_points_of_several_builds() -> None:
    light = _points(_with(TRUE, ADMIT), (1.0,))
    other = TRUE.model_copy(update={"base_s": 0.015, "per_decode_s": 0.0008})
    heavy = _points(_with(other, ADMIT), (12.0,))
    # each build's points replayed with its own step model; one delay for both
    assert fit_admission([(TRUE, light), (other, heavy)]) == pytest.approx(ADMIT, rel=0.25)
    assert fit_admission([(other, light), (TRUE, heavy)]) != pytest.approx(ADMIT, rel=0.25)


def test_nothing_running_fits_no_delay() -> None:
    lone = [Replay(simulate([Arrival(0.0, 50, 4)], KNOBS, TRUE), KNOBS)]
    assert fit_admission([(TRUE, lone)]) == 0.0


def test_a_point_with_a_failed_request_is_not_replayed() -> None:
    (point,) = _points(_with(TRUE, ADMIT), (10.0,))
    assert fit_admission([(TRUE, [point])]) == pytest.approx(ADMIT, rel=0.25)
    recs = list(point.records)
    recs[5] = dataclasses.replace(recs[5], error="timeout")
    assert fit_admission([(TRUE, [Replay(recs, KNOBS)])]) == 0.0
