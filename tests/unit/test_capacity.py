"""tuner.scoring.capacity.find_capacity against fake systems whose capacity is known in advance."""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from functools import partial

import pytest

from tuner.scoring.capacity import (
    AIM_BELOW,
    CONCURRENCY,
    NEAR_DESCEND,
    RATE_STEP,
    RESOLUTION,
    LoadAxis,
    PointOutcome,
    consistent_best,
    find_capacity,
)


class System:
    """A fake engine under load: the worst margin grows with concurrency, tokens/s by f(c).

    The SLO holds iff c <= capacity (the margin crosses zero there). Every measurement is
    logged, so a test can see what the search tried.
    """

    def __init__(
        self,
        capacity: float,
        tokens_per_s: Callable[[int], float] = lambda c: 10.0 * c,
        exponent: float = 1.5,
    ) -> None:
        self.capacity = capacity
        self.tokens_per_s = tokens_per_s
        self.exponent = exponent
        self.measured: list[float] = []

    def __call__(self, c: float) -> PointOutcome:
        self.measured.append(c)
        m = (c / self.capacity) ** self.exponent - 1.0
        return PointOutcome(
            c, holds=m <= 0, worst_margin=m, output_tokens_per_s=self.tokens_per_s(c)
        )


def assert_found(
    system: System, best: PointOutcome | None, points: list[PointOutcome], resolution: float
) -> None:
    """best is the highest held point, and the lowest failed point above it is within resolution."""
    assert best is not None
    assert best.holds
    assert best.load <= system.capacity
    assert best.load == max(p.load for p in points if p.holds)
    above = [p.load for p in points if not p.holds and p.load > best.load]
    assert above, "the capacity was never bracketed from above"
    hi = min(above)
    assert hi > system.capacity
    assert hi <= best.load * resolution or hi - best.load <= 1


def test_finds_a_known_capacity_within_the_resolution() -> None:
    system = System(capacity=37, exponent=1.0)
    res = find_capacity(system, start=8)
    assert res.best is not None
    assert_found(system, res.best, res.points, resolution=1.15)
    assert res.best.load == 37  # a linear margin is interpolated exactly
    assert res.score == pytest.approx(370.0)
    assert res.abandoned is None
    assert len(res.points) <= 7


@pytest.mark.parametrize(
    ("capacity", "start"),
    list(itertools.product([1, 2, 5, 17, 37, 100, 250], [1, 8, 64])),
)
def test_finds_the_capacity_from_any_start(capacity: int, start: int) -> None:
    system = System(capacity=capacity + 0.5)  # between two integers: no ties at the limit
    res = find_capacity(system, start=start, max_points=14)
    if capacity == 1 and start == 1:
        # held at 1 then failed at 2: bracketed with nothing in between
        assert [p.load for p in res.points] == [1, 2]
    assert_found(system, res.best, res.points, resolution=1.15)


@pytest.mark.parametrize("resolution", [1.05, 1.15, 1.5])
def test_resolution_decides_when_refining_stops(resolution: float) -> None:
    system = System(capacity=200.5, exponent=3.0)
    res = find_capacity(system, start=16, resolution=resolution, max_points=20)
    assert_found(system, res.best, res.points, resolution=resolution)


def test_everything_fails_ends_at_concurrency_one_with_no_best() -> None:
    def never(c: int) -> PointOutcome:
        return PointOutcome(c, holds=False, worst_margin=2.0, output_tokens_per_s=5.0 * c)

    res = find_capacity(never, start=16)
    assert [p.load for p in res.points] == [16, 8, 4, 2, 1]
    assert res.best is None
    assert res.score == 0.0


def test_fails_at_one_measures_only_one_point() -> None:
    system = System(capacity=0.5)
    res = find_capacity(system, start=1)
    assert system.measured == [1]
    assert res.best is None


def test_descends_from_a_failing_start() -> None:
    system = System(capacity=10.5)
    res = find_capacity(system, start=64, max_points=12)
    assert system.measured[:4] == [64, 32, 16, 8]
    assert_found(system, res.best, res.points, resolution=1.15)


def test_a_start_at_a_prediction_steps_down_by_less() -> None:
    system = System(capacity=10.5)
    res = find_capacity(system, start=14, max_points=12, descend=0.8)
    assert system.measured[:2] == [14, 11]  # floor(14 x 0.8): not 7
    assert_found(system, res.best, res.points, resolution=1.15)


def test_saturation_stops_climbing() -> None:
    # Throughput stops growing past 16 while the SLOs keep holding.
    system = System(capacity=10_000, tokens_per_s=lambda c: 10.0 * min(c, 16))
    res = find_capacity(system, start=4, max_points=10)
    assert system.measured == [4, 8, 16, 32]
    assert res.best is not None
    assert res.best.output_tokens_per_s == pytest.approx(160.0)


def test_growth_above_the_saturation_gain_keeps_climbing() -> None:
    # +5 % per step is growth (gain 1.03): the climb goes on up to max_concurrency.
    system = System(capacity=10_000, tokens_per_s=lambda c: 100.0 * 1.05 ** int(c).bit_length())
    res = find_capacity(system, start=1, axis=LoadAxis("concurrency", maximum=64), max_points=20)
    assert system.measured == [1, 2, 4, 8, 16, 32, 64]
    assert res.best is not None and res.best.load == 64


def test_max_concurrency_caps_the_climb_and_the_start() -> None:
    system = System(capacity=10_000)
    res = find_capacity(system, start=1000, axis=LoadAxis("concurrency", maximum=48))
    assert system.measured == [48]
    assert res.best is not None and res.best.load == 48


def test_start_below_one_is_one() -> None:
    system = System(capacity=0.5)
    find_capacity(system, start=0)
    assert system.measured == [1]


def test_climbs_less_than_double_when_the_limit_is_near() -> None:
    # margin -0.1 at 32: latency would hit the limit near 35, so the next step is +25 %, not x2
    def near(c: int) -> PointOutcome:
        m = c / 35.5 - 1.0 if c != 32 else -0.1
        return PointOutcome(c, holds=m <= 0, worst_margin=m, output_tokens_per_s=float(c))

    res = find_capacity(near, start=32)
    assert res.points[1].load == 40


def test_refines_where_the_margin_crosses_zero() -> None:
    margins = {10: -0.5, 20: 0.5}

    def measure(c: int) -> PointOutcome:
        m = margins.get(c, (c - 15) / 10)
        return PointOutcome(c, holds=m <= 0, worst_margin=m, output_tokens_per_s=float(c))

    res = find_capacity(measure, start=10, growth=2.0)
    assert [p.load for p in res.points][:3] == [10, 20, 15]


def test_abandon_stops_after_the_first_point() -> None:
    system = System(capacity=100.5)
    seen: list[PointOutcome] = []

    def abandon(points: list[PointOutcome]) -> str | None:
        seen.append(points[-1])
        return "clearly beaten: 40 tokens/s against 900"

    res = find_capacity(system, start=4, abandon=abandon)
    assert system.measured == [4]
    assert [p.load for p in seen] == [4]
    assert res.abandoned == "clearly beaten: 40 tokens/s against 900"
    assert res.best is not None and res.best.load == 4  # it held


def test_abandoned_failing_point_is_no_best() -> None:
    system = System(capacity=2.5)
    res = find_capacity(system, start=8, abandon=lambda points: "beaten")
    assert res.best is None
    assert res.abandoned == "beaten"


def test_abandon_returning_none_lets_the_search_go_on() -> None:
    system = System(capacity=37.5)
    calls: list[int] = []

    def abandon(points: list[PointOutcome]) -> str | None:
        calls.append(points[-1].load)
        return None

    res = find_capacity(system, start=8, abandon=abandon, max_points=12)
    assert calls == [p.load for p in res.points]  # consulted after every point
    assert res.abandoned is None
    assert_found(system, res.best, res.points, resolution=1.15)


@pytest.mark.parametrize("max_points", [1, 2, 3, 4, 5, 7, 9])
def test_max_points_is_respected(max_points: int) -> None:
    system = System(capacity=400.5)  # from 1 it needs about ten points
    res = find_capacity(system, start=1, max_points=max_points)
    assert len(system.measured) == len(res.points) == max_points


def noisy_system(seed: int) -> Callable[[int], PointOutcome]:
    """Not monotone at all: each concurrency holds or fails at random, margins random."""
    rng = random.Random(seed)
    cache: dict[int, PointOutcome] = {}

    def measure(c: int) -> PointOutcome:
        if c not in cache:
            m = rng.uniform(-1.0, 1.0) if rng.random() < 0.9 else float("inf")
            cache[c] = PointOutcome(
                c, holds=m <= 0, worst_margin=m, output_tokens_per_s=rng.uniform(1.0, 1000.0)
            )
        return cache[c]

    return measure


@pytest.mark.parametrize("seed", range(40))
def test_never_measures_the_same_concurrency_twice(seed: int) -> None:
    rng = random.Random(1000 + seed)
    measured: list[int] = []
    inner = noisy_system(seed) if seed % 2 else System(capacity=rng.uniform(0.5, 600))
    max_c = rng.choice([8, 64, 512])

    def measure(c: int) -> PointOutcome:
        assert c not in measured, f"measured {c} twice: {measured}"
        assert 1 <= c <= max_c
        measured.append(c)
        return inner(c)

    res = find_capacity(
        measure,
        start=rng.randint(0, 700),
        axis=LoadAxis("concurrency", maximum=max_c),
        resolution=rng.choice([1.05, 1.15, 1.5]),
        max_points=rng.randint(1, 15),
    )
    lowest_fail = min((p.load for p in res.points if not p.holds), default=float("inf"))
    held = [p for p in res.points if p.holds and p.load < lowest_fail]
    if held:
        assert res.best is not None
        assert res.best.load == max(p.load for p in held)
    else:
        assert res.best is None


def test_abandon_after_a_later_point_stops_there() -> None:
    system = System(capacity=37.5)

    def abandon(points: list[PointOutcome]) -> str | None:
        return "beaten" if len(points) == 3 else None

    res = find_capacity(system, start=8, abandon=abandon, max_points=12)
    assert len(res.points) == 3
    assert res.abandoned == "beaten"


def test_a_held_point_above_a_failed_one_is_not_the_best() -> None:
    outcomes = {8: True, 16: False, 24: True}
    points = [PointOutcome(c, h, -0.1 if h else 0.1, 10.0 * c) for c, h in outcomes.items()]
    best = consistent_best(points)
    assert best is not None and best.load == 8


def rate_system(capacity_rps: float) -> Callable[[float], PointOutcome]:
    def measure(r: float) -> PointOutcome:
        m = r / capacity_rps - 1.0
        return PointOutcome(r, holds=m <= 0, worst_margin=m, output_tokens_per_s=64.0 * r)

    return measure


@pytest.mark.parametrize("capacity", [0.37, 2.9, 4.45, 40.0])
@pytest.mark.parametrize("start", [0.5, 3.0, 20.0])
def test_finds_a_request_rate_capacity(capacity: float, start: float) -> None:
    axis = LoadAxis("rate", minimum=0.05, maximum=200.0)
    # Steps of at most 1.4x up: 80x from the start to the capacity takes 13 of them.
    res = find_capacity(rate_system(capacity), start=start, axis=axis, max_points=20)
    assert res.best is not None
    assert res.best.load <= capacity
    above = [p.load for p in res.points if not p.holds and p.load > res.best.load]
    assert above and min(above) <= res.best.load * 1.15
    assert all(axis.quantize(p.load) == p.load for p in res.points)  # 3 significant figures


def open_loop_system(
    capacity_rps: float, limit_ms: float = 2000.0
) -> Callable[[float], PointOutcome]:
    """p99 TTFT flat far under saturation and steep near it (like one queue's 1 / (1 - load)),
    about as vLLM's client saw it on the AMD machines: 615 ms at 0.6 of capacity, 2 s at it."""

    def measure(r: float) -> PointOutcome:
        rho = min(r / capacity_rps, 0.999)
        p99 = 450.0 + 155.0 * rho / (1.0 - rho) * (1.0 - 0.9 * rho)
        m = p99 / limit_ms - 1.0
        return PointOutcome(r, holds=m <= 0, worst_margin=m, output_tokens_per_s=64.0 * r)

    return measure


def test_an_open_loop_climb_does_not_leap_past_a_flat_latency() -> None:
    # The AMD runs: a trial started at the baseline's 3.5 requests/s, 60 % under the limit,
    # doubled to 6.5-6.6 and broke far above a capacity of about 4.45, leaving a bracket whose
    # straight-line crossing lay 15 % under it. On the rate axis the step up is at most 1.4x.
    axis = LoadAxis("rate", minimum=0.05, maximum=200.0)
    res = find_capacity(open_loop_system(4.45), start=3.5, axis=axis, max_points=2)
    assert res.points[0].holds and res.points[0].worst_margin < -0.5
    assert res.points[1].load == pytest.approx(3.5 * RATE_STEP, rel=0.01)
    # Near the limit it steps by less: a point 15 % under the limit moves up by under 1.2x.
    near = PointOutcome(4.0, True, -0.15, 256.0)
    res = find_capacity(
        lambda r: near if r == 4.0 else PointOutcome(r, False, 0.3, 64.0 * r),
        start=4.0,
        axis=axis,
        max_points=2,
    )
    assert 4.0 < res.points[1].load < 4.0 * 1.2
    # A caller may allow a larger step (CI's loose SLOs climb a long way).
    res = find_capacity(open_loop_system(4.45), start=3.5, axis=axis, max_points=2, rate_step=2.0)
    assert res.points[1].load == pytest.approx(7.0, rel=0.01)


def test_a_short_held_end_of_a_bracket_is_measured_once_more() -> None:
    # A short point at 6.66 holds, a long one there breaks (the queue shows only on a longer
    # run); everything over 6 breaks. While the bracket over 6.66 is wide, a refining point
    # (full-size) goes between; once it is narrow and rests on the short point, 6.66 is
    # measured again, once, and the bracket moves down under it.
    axis = LoadAxis("rate", minimum=0.05, maximum=200.0)
    seen: list[float] = []

    def measure(r: float) -> PointOutcome:
        seen.append(r)
        if r == 6.66:
            again = seen.count(r) > 1
            return PointOutcome(r, not again, 0.4 if again else -0.4, 420.0)
        return PointOutcome(r, r < 6.0, -0.6 if r < 6.0 else 0.8, 64.0 * min(r, 6.0))

    res = find_capacity(
        measure,
        start=4.76,
        axis=axis,
        max_points=8,
        rate_step=1.4,
        too_short=lambda x: x == 6.66,
    )
    assert seen[:2] == [4.76, 6.66] and seen[2] > 1.15 * 6.66  # a wide bracket
    assert 6.66 < seen[3] < seen[2] and seen[3] <= 1.15 * 6.66  # refined: narrow now
    assert seen[4] == 6.66  # what it rests on, measured again
    assert seen.count(6.66) == 2  # once more, not again and again
    assert res.best is not None and res.best.load < 6.0
    # Without it the search stops on the short point's word: 6.66 "holds".
    seen.clear()
    res = find_capacity(measure, start=4.76, axis=axis, max_points=8, rate_step=1.4)
    assert seen.count(6.66) == 1
    assert res.best is not None and res.best.load >= 6.66


def test_the_rate_axis_rounds_and_floors() -> None:
    axis = LoadAxis("rate", minimum=0.05, maximum=100.0)
    assert axis.quantize(3.14159) == 3.14
    assert axis.floor(3.149) == 3.14
    assert axis.floor(0.01) == 0.05  # never under the minimum
    assert axis.key == "rate_rps" and CONCURRENCY.key == "concurrency"
    assert CONCURRENCY.floor(22.99) == 22.0


@pytest.mark.parametrize("capacity", [9.35, 9.8, 10.0, 10.5])
def test_a_start_just_above_a_good_prediction_brackets_it_in_two_points(capacity: float) -> None:
    from tuner.run.start import PREDICTED_ABOVE, PREDICTED_DESCEND

    # predicted 10 req/s; the capacity within 6 % of it, under or over
    axis = LoadAxis("rate", minimum=0.05, maximum=200.0)
    start = axis.floor(10.0 * PREDICTED_ABOVE)
    res = find_capacity(
        rate_system(capacity), start=start, axis=axis, max_points=8, descend=PREDICTED_DESCEND
    )
    assert [p.holds for p in res.points] == [False, True]
    assert res.best is not None and res.best.load <= capacity < res.points[0].load
    assert res.points[0].load <= 1.15 * res.best.load


def _short_sample_at_13(seen: list[float], capacity: float) -> Callable[[float], PointOutcome]:
    """A system whose capacity is ``capacity`` req/s, whose first point at 13 req/s holds (a
    short sample's word) and breaks when measured again; every load measured goes to ``seen``."""

    def measure(r: float) -> PointOutcome:
        seen.append(r)
        if r == 13.0 and seen.count(r) == 1:
            return PointOutcome(r, True, -0.4, 570.0)
        held = r <= capacity
        return PointOutcome(r, held, -0.2 if held else 0.6, 48.0 * min(r, capacity))

    return measure


def test_a_held_load_that_breaks_when_measured_again_is_stepped_under_by_a_little() -> None:
    """The 25-minute README command on the Xeon: 13 req/s held on a short point, 15.8 broke,
    13 measured again broke (here the step up is the margin's); the capacity lies just under
    13, so the next load is 0.88 of it, not half."""
    axis = LoadAxis("rate", minimum=0.05, maximum=200.0)
    seen: list[float] = []
    measure = _short_sample_at_13(seen, 11.6)
    res = find_capacity(
        measure, start=13.0, axis=axis, max_points=6, rate_step=1.22,
        too_short=lambda x: x == 13.0,
    )  # fmt: skip
    assert seen[0] == 13.0 and seen[1] > 13.0 * 1.15 and 13.0 < seen[2] <= 13.0 * 1.15
    assert seen[3] == 13.0  # the narrow bracket's short end, measured again
    assert seen[4] == axis.floor(13.0 * NEAR_DESCEND)  # 11.4, not 6.5
    assert res.best is not None and res.best.load == seen[4]


def test_a_held_load_measured_again_is_not_counted_against_the_points() -> None:
    """CI's robust integration test (2026-12-07): a short point held, the refining points over
    it broke, it broke when measured again, and the step under it broke too, with the search's
    points spent: nothing held. The point measured again checked what the search had; the
    search keeps the step it cost and finds a load that holds."""
    axis = LoadAxis("rate", minimum=0.05, maximum=200.0)
    seen: list[float] = []
    measure = _short_sample_at_13(seen, 10.0)
    res = find_capacity(
        measure, start=13.0, axis=axis, max_points=5, rate_step=1.22,
        too_short=lambda x: x == 13.0,
    )  # fmt: skip
    assert seen[3] == 13.0 and seen.count(13.0) == 2  # measured again: broke
    assert not any(p.holds for p in res.points[1:5])  # the steps spent, nothing held since
    assert len(seen) == 6  # five steps of the search, and the point measured again
    assert res.best is not None and res.best.load == seen[5] <= 10.0


def queueing_system(capacity_rps: float) -> Callable[[float], PointOutcome]:
    """Open-loop latency as it looks: far under the limit until close to the capacity, then
    over it at once (the margin gives a climb little warning)."""

    def measure(r: float) -> PointOutcome:
        m = -0.6 if r <= 0.9 * capacity_rps else -0.6 + 6.0 * (r / capacity_rps - 0.9)
        return PointOutcome(
            r, holds=r <= capacity_rps, worst_margin=m, output_tokens_per_s=64.0 * r
        )

    return measure


@pytest.mark.parametrize(("predicted", "capacity"), [(14.2, 13.6), (14.2, 12.9), (12.0, 11.0)])
def test_an_aimed_climb_brackets_the_capacity_in_fewer_points(
    predicted: float, capacity: float
) -> None:
    """The model, refitted on the first light point, predicts 4-10 % high (as on the Xeon):
    the climb goes just under its prediction in one step, then one step of at most
    ``AIM_STEP``, and the capacity is bracketed within the resolution in three points;
    unaimed, the climb takes x1.4 steps and refines (four points where the capacity lies just
    over a step, as the README command's candidate build at 13.6 requests/s)."""
    from tuner.scoring.capacity import AIM_BELOW, AIM_STEP

    axis = LoadAxis("rate", minimum=0.05, maximum=200.0)
    aimed = find_capacity(
        queueing_system(capacity), start=9.0, axis=axis, max_points=8, aim=lambda: predicted
    )
    loads = [p.load for p in aimed.points]
    assert loads[1] == axis.floor(predicted * AIM_BELOW)
    assert aimed.best is not None and aimed.best.load <= capacity
    assert min(p.load for p in aimed.points if not p.holds) <= 1.15 * aimed.best.load
    assert all(b <= a * AIM_STEP * 1.001 for a, b in itertools.pairwise(loads[1:]) if b > a)
    blind = find_capacity(queueing_system(capacity), start=9.0, axis=axis, max_points=8)
    assert blind.best is not None and blind.best.load <= capacity
    assert len(aimed.points) == 3 and len(aimed.points) <= len(blind.points)


def test_the_readme_commands_candidate_build_is_bracketed_in_one_point_less_aimed() -> None:
    axis = LoadAxis("rate", minimum=0.05, maximum=200.0)
    run = partial(find_capacity, queueing_system(13.6), start=8.99, axis=axis, max_points=8)
    assert len(run(aim=lambda: 14.2).points) == 3
    assert len(run().points) == 4


def test_an_aimed_descent_goes_to_just_under_the_prediction() -> None:
    from tuner.scoring.capacity import AIM_BELOW

    axis = LoadAxis("rate", minimum=0.05, maximum=200.0)
    res = find_capacity(queueing_system(7.9), start=11.0, axis=axis, max_points=6, aim=lambda: 8.0)
    assert [p.load for p in res.points][:2] == [11.0, axis.floor(8.0 * AIM_BELOW)]
    # a prediction above the failed load says nothing about where under it to go: halved
    res = find_capacity(queueing_system(5.0), start=11.0, axis=axis, max_points=6, aim=lambda: 12.0)
    assert res.points[1].load == 5.5
    # and one far under is not followed past half
    res = find_capacity(queueing_system(2.0), start=11.0, axis=axis, max_points=6, aim=lambda: 1.0)
    assert res.points[1].load == 5.5


def test_an_aimed_descent_stops_at_the_load_that_brackets_the_failure() -> None:
    """The README command's baseline on the AMD box (2026-12-07 08:20): 4.49 requests/s broke
    and the refitted model put the capacity at 3.99. Just under it, 3.75, held and left a
    bracket 1.2x wide to refine; the lowest load that brackets 4.49 within the resolution,
    3.91, is under the model's capacity, so the descent goes there and a hold ends the
    search. Where the model puts the capacity under that load, the descent follows the
    model."""
    axis = LoadAxis("rate", minimum=0.05, maximum=200.0)
    res = find_capacity(
        queueing_system(3.98), start=4.49, axis=axis, max_points=6, aim=lambda: 3.99
    )
    assert [p.load for p in res.points] == [4.49, 3.91] and res.points[1].holds
    assert RESOLUTION * 3.91 >= 4.49 and RESOLUTION * 3.9 < 4.49
    res = find_capacity(queueing_system(3.7), start=4.49, axis=axis, max_points=6, aim=lambda: 3.85)
    assert res.points[1].load == axis.floor(3.85 * AIM_BELOW)  # 3.91 lies over 3.85


def test_the_axes_round_up_onto_themselves() -> None:
    axis = LoadAxis("rate", minimum=0.05, maximum=100.0)
    assert axis.ceil(4.49 / 1.15) == 3.91
    assert axis.ceil(3.9) == 3.9 and axis.ceil(9.991) == 10.0 and axis.ceil(0.01) == 0.05
    assert axis.ceil(250.0) == 100.0
    assert CONCURRENCY.ceil(22.01) == 23.0 and CONCURRENCY.ceil(22.0) == 22.0
