"""benchmarks/sweep.py's capacity search (vLLM's client's side) against scripted servers."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from bench_client import LOAD_MODELS, read_report
from sweep import SweepOptions, find_capacity

RATE, CONC = LOAD_MODELS["rate"], LOAD_MODELS["concurrency"]


def server(capacity: float) -> tuple[list[float], object]:
    """A point holds iff its load is at most ``capacity``; every load asked for is logged."""
    tried: list[float] = []

    def measure(x: float, phase: str) -> tuple[bool, dict]:
        tried.append(x)
        return x <= capacity, {"load": x, "phase": phase}

    return tried, measure


def test_the_ladder_climbs_to_the_first_break_then_bisects() -> None:
    tried, measure = server(5.3)
    opts = SweepOptions(ladder=[2.0, 4.0, 6.0, 8.0], min_prompts=10, prompts_per_load=0)
    found = find_capacity(measure, RATE, opts)
    assert tried[:3] == [2.0, 4.0, 6.0]  # 8 is never tried: 6 broke
    assert found["held"] <= 5.3 < found["broke"]
    assert found["broke"] / found["held"] - 1 <= 0.15


@pytest.mark.parametrize(("start", "capacity"), [(6.0, 7.6), (6.0, 3.1), (7.6, 7.7)])
def test_from_a_start_it_steps_up_or_down_to_a_bracket_then_bisects(
    start: float, capacity: float
) -> None:
    tried, measure = server(capacity)
    opts = SweepOptions(ladder=[1.0], min_prompts=10, prompts_per_load=0, start=start)
    found = find_capacity(measure, RATE, opts)
    assert tried[0] == start
    assert 1.0 not in tried  # the ladder is not used
    assert found["held"] <= capacity < found["broke"]
    assert found["broke"] / found["held"] - 1 <= opts.resolution
    # Steps of 1.2 until the bracket, then halving it: far fewer points than a ladder.
    assert len(tried) <= 8


def test_a_start_above_a_near_zero_capacity_steps_down_until_the_axis_ends() -> None:
    tried, measure = server(0.0)
    opts = SweepOptions(ladder=[1.0], min_prompts=10, prompts_per_load=0, start=2.0, max_steps=5)
    found = find_capacity(measure, RATE, opts)
    assert found["capacity"] is None and found["broke"] is not None
    assert len(tried) <= 5 + opts.bisect_steps
    assert all(b < a for a, b in zip(tried, tried[1:][:4], strict=False))  # always down


def test_concurrency_steps_by_at_least_one_client() -> None:
    tried, measure = server(4)
    opts = SweepOptions(ladder=[1.0], min_prompts=10, prompts_per_load=0, start=2)
    found = find_capacity(measure, CONC, opts)
    assert found["held"] == 4 and found["broke"] == 5
    assert len(set(tried)) == len(tried)  # no load measured twice


def test_a_first_step_that_breaks_is_bisected_towards_the_floor() -> None:
    """seeds.py steps up from the claim (4.05 req/s): 4.86 broke with 1,000 prompts, and the
    bisection went to 2.43, half-way to zero, instead of half-way back to the claim."""
    tried, measure = server(4.6)
    opts = SweepOptions(
        ladder=[4.86], min_prompts=10, prompts_per_load=0, bisect_steps=1, floor=4.05
    )
    found = find_capacity(measure, RATE, opts)
    assert tried == [4.86, RATE.rounded((4.05 + 4.86) / 2)]
    assert found["held"] == RATE.rounded((4.05 + 4.86) / 2) and found["broke"] == 4.86
    tried0, measure0 = server(4.6)
    find_capacity(
        measure0,
        RATE,
        SweepOptions(ladder=[4.86], min_prompts=10, prompts_per_load=0, bisect_steps=1),
    )
    assert tried0 == [4.86, RATE.rounded(4.86 / 2)]  # no floor: half-way to zero, as before


def test_a_report_is_read_from_its_file_or_its_run_folder_and_anything_else_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = argparse.ArgumentParser(prog="bench")
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.json").write_text(json.dumps({"run_id": "r"}))
    assert read_report(p, run) == {"run_id": "r"}
    assert read_report(p, run / "report.json") == {"run_id": "r"}
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "text.json").write_text("not json")
    for bad in (tmp_path, *(tmp_path / n for n in ("list.json", "text.json", "missing.json"))):
        with pytest.raises(SystemExit) as exc:
            read_report(p, bad)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith(f"bench: error: {bad}: not an autotune report.json")
