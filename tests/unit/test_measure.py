"""tuner.run.measure: a confirmation's point grows to what its requests over the limit need."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from probes.client import LoadClient
from probes.metrics import judge
from probes.slo import parse_slos
from probes.workload import FileItem, FileWorkload
from tests.fakes.openai_server import FakeOpenAIServer
from tuner.run import stop
from tuner.run.measure import Measured, PointMeasurer
from tuner.scoring.capacity import LoadAxis

SLOS = parse_slos(["ttft@p90=150ms"])  # 44 requests with none over, 64 with one, 81 with two
MODEL = "fake-model"


@pytest.fixture
def server() -> Iterator[Any]:
    with FakeOpenAIServer(ttft_ms=2, itl_ms=1, slow_ms=600) as srv:
        yield SimpleNamespace(base_url=srv.base_url, served_model=MODEL)


def measure(
    server: Any, room: int, cut: bool = False, slow: tuple[int, ...] = (5,), skip: int = 0
) -> Measured:
    """44 requests at 20/s, requests 5 and 45 slow (600 ms to the first token)."""
    items = [FileItem(prompt="a b c", max_tokens=2)] * 40
    for i in slow:
        items[i] = FileItem(prompt="SLOW a b", max_tokens=2)
    m = PointMeasurer(
        client=LoadClient(server.base_url),
        axis=LoadAxis("rate", minimum=0.1),
        slos=SLOS,
        max_error_rate=0.01,
        workload=FileWorkload(path="inline.jsonl", items=tuple(items)),
        tokenizer=None,
        ignore_eos=False,
        series=None,
        seeds=itertools.count(1).__next__,
    )
    return m.measure(server, 20.0, 44, MODEL, room=room, cut=cut, cut_skip=skip)


@pytest.mark.timeout(60)
def test_without_room_one_slow_request_leaves_the_point_provisional(server: Any) -> None:
    m = measure(server, room=0)
    assert len(m.records) == 44
    assert m.metrics.over_limit == {"ttft@p90": 1}
    assert judge(m.metrics, SLOS, 0.01).provisional  # 64 needed


@pytest.mark.timeout(60)
def test_with_room_the_point_grows_until_the_rule_is_met(server: Any) -> None:
    m = measure(server, room=100)
    assert len(m.records) == 81  # one over: 64; by then two over: 81
    assert m.metrics.over_limit == {"ttft@p90": 2}
    verdict = judge(m.metrics, SLOS, 0.01)
    assert verdict.holds and not verdict.provisional


@pytest.mark.timeout(60)
def test_the_room_caps_the_growth(server: Any) -> None:
    assert len(measure(server, room=10).records) == 54


@pytest.mark.timeout(60)
def test_a_first_ctrl_c_stops_the_growth(server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stop.STOP, "requested", True)
    assert len(measure(server, room=100).records) == 44


@pytest.mark.timeout(60)
def test_a_search_point_stops_sending_once_its_slow_requests_break_it(server: Any) -> None:
    """p90 of 44: six over break it whatever the others do. Requests 2-7 are slow: known
    over by about 0.6 s in, when about 10 of the 44 (2.2 s of arrivals) are sent."""
    slow = (2, 3, 4, 5, 6, 7)
    m = measure(server, room=0, cut=True, slow=slow)
    assert 7 <= len(m.records) < 30
    assert all(r.ok for r in m.records)
    v = judge(m.metrics, SLOS, 0.01)
    assert not v.holds  # the verdict the whole point would have had
    whole = measure(server, room=0, slow=slow)
    assert len(whole.records) == 44 and not judge(whole.metrics, SLOS, 0.01).holds


@pytest.mark.timeout(60)
def test_a_confirmation_try_is_not_cut_for_slow_requests_in_its_first_requests(
    server: Any,
) -> None:
    """``cut_skip``: the requests before it do not decide the cut (a stall at a try's start is
    set aside, which needs the try whole: probes/transient.py); the same slow requests later
    in the try cut it."""
    early = measure(server, room=0, cut=True, slow=(2, 3, 4, 5, 6, 7), skip=9)
    assert len(early.records) == 44
    late = measure(server, room=0, cut=True, slow=(12, 13, 14, 15, 16, 17), skip=9)
    assert 17 <= len(late.records) < 40
    assert not judge(late.metrics, SLOS, 0.01).holds
