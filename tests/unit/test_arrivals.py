"""probes.arrivals: Poisson (the load client's own schedule, unchanged), gamma (vLLM's
burstiness) and a trace's times at a time scale; and probes.workload's arrival_schedule."""

from __future__ import annotations

import itertools
import random
import statistics
from collections.abc import Callable

import pytest

from probes.arrivals import Gamma, gamma_offsets, offsets, poisson_offsets, trace_offsets
from probes.client import arrival_offsets
from probes.workload import SyntheticWorkload, arrival_schedule, load_axis, parse_workload


def old_arrival_offsets(n: int, rate_rps: float, seed: int) -> list[float]:
    """probes.client.arrival_offsets as it was before probes.arrivals, word for word."""
    rng = random.Random(seed)
    gaps = [rng.expovariate(rate_rps) for _ in range(n)]
    scale = (n / rate_rps) / sum(gaps) if n else 1.0
    offsets, t = [], 0.0
    for g in gaps:
        offsets.append(t)
        t += g * scale
    return offsets


@pytest.mark.parametrize("n", [0, 1, 2, 7, 505])
@pytest.mark.parametrize("rate", [0.3, 3.72, 40.0])
def test_poisson_is_bit_for_bit_the_old_client_schedule(n: int, rate: float) -> None:
    for seed in (0, 1, 7, 1_000_003, 2**40 + 5):
        old = old_arrival_offsets(n, rate, seed)
        assert poisson_offsets(n, rate, seed) == old  # ==, not approx: the same floats
        assert arrival_offsets(n, rate, seed) == old
        assert offsets(None, n, rate, seed) == old


def test_a_workload_without_its_own_arrivals_gets_the_client_schedule() -> None:
    for spec in ("synthetic:input=64,output=8", "synthetic:input=64,output=8,arrivals=poisson"):
        wl = parse_workload(spec)
        assert load_axis(wl) == "rate_rps"
        assert arrival_schedule(wl, 300, 2.5, 11) == arrival_offsets(300, 2.5, 11)


def gaps_of(offs: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(offs)]


@pytest.mark.parametrize("cv", [0.5, 2.0, 3.0])
def test_gamma_gaps_have_the_asked_coefficient_of_variation_and_rate(cv: float) -> None:
    n, rate = 50_000, 8.0
    offs = gamma_offsets(n, rate, cv, seed=3)
    gaps = gaps_of(offs)
    assert offs[0] == 0.0
    assert all(g >= 0 for g in gaps)
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=0.01)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(cv, rel=0.06)
    assert offs[-1] < n / rate  # the n-th gap, after the last arrival, ends at n / rate


def test_poisson_gaps_have_a_coefficient_of_variation_of_one() -> None:
    """The reference the gamma cases differ from: a broken gamma that fell back to
    exponential gaps would show cv 1 here and fail above."""
    gaps = gaps_of(poisson_offsets(50_000, 8.0, 3))
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.03)


def test_gamma_follows_vllms_burstiness_definition() -> None:
    """vllm bench serve: gap ~ Gamma(shape=b, scale=1/(rate*b)); here b = 1/cv², and the
    gaps are then scaled to span n / rate."""
    n, rate, b, seed = 400, 5.0, 0.25, 9
    rng = random.Random(seed)
    raw = [rng.gammavariate(b, 1 / (rate * b)) for _ in range(n)]
    k = n / rate / sum(raw)
    expected = [k * sum(raw[:i]) for i in range(n)]
    assert gamma_offsets(n, rate, 2.0, seed) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert Gamma(cv=2.0).burstiness == pytest.approx(b)
    wl = parse_workload("synthetic:input=64,output=8,arrivals=gamma,burstiness=0.25")
    assert isinstance(wl, SyntheticWorkload)
    assert wl.arrivals == Gamma(cv=2.0)
    assert arrival_schedule(wl, n, rate, seed) == gamma_offsets(n, rate, 2.0, seed)


def test_gamma_is_seeded() -> None:
    assert gamma_offsets(50, 2.0, 2.0, 1) == gamma_offsets(50, 2.0, 2.0, 1)
    assert gamma_offsets(50, 2.0, 2.0, 1) != gamma_offsets(50, 2.0, 2.0, 2)


def test_cv_implies_gamma_arrivals_in_a_spec() -> None:
    wl = parse_workload("synthetic:input=64,output=8,cv=2")
    assert isinstance(wl, SyntheticWorkload)
    assert wl.arrivals == Gamma(cv=2.0)
    assert wl.label == "synthetic:input=64,output=8,arrivals=gamma,cv=2"
    assert arrival_schedule(wl, 100, 3.0, 4) == gamma_offsets(100, 3.0, 2.0, 4)
    assert arrival_schedule(wl, 100, 3.0, 4) != arrival_offsets(100, 3.0, 4)


def test_trace_offsets_are_the_trace_times_divided_by_the_scale() -> None:
    times = [0.0, 0.5, 1.25, 3.0]
    assert trace_offsets(times, 4, 1.0) == [0.0, 0.5, 1.25, 3.0]
    assert trace_offsets(times, 4, 2.0) == [0.0, 0.25, 0.625, 1.5]
    assert trace_offsets(times, 2, 0.5) == [0.0, 1.0]
    # past its end the trace starts again one mean gap (3 s / 3) after its last arrival
    assert trace_offsets(times, 6, 2.0) == [0.0, 0.25, 0.625, 1.5, 2.0, 2.25]
    assert trace_offsets([5.0, 5.0], 3, 1.0) == [0.0, 0.0, 0.0]  # all at once, every time


@pytest.mark.parametrize(
    "call",
    [
        lambda: offsets(None, 5, 0.0, 1),
        lambda: offsets(Gamma(cv=2.0), 5, -1.0, 1),
        lambda: trace_offsets([0.0, 1.0], 2, 0.0),
        lambda: trace_offsets([], 2, 1.0),
        lambda: gamma_offsets(5, 1.0, 0.0, 1),
    ],
)
def test_a_load_or_a_process_out_of_range_is_an_error(call: Callable[[], object]) -> None:
    with pytest.raises(ValueError):
        call()
