"""TuneOptions checks its own values, so the Python API refuses what the CLI refuses, with the
same one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from probes.slo import parse_slos
from probes.workload import parse_workload
from tuner.options import TuneOptions, problem


def _opts(**kw: Any) -> TuneOptions:
    base: dict[str, Any] = {
        "model": "smollm2-135m",
        "slos": parse_slos(["ttft=2s"]),
        "workload": parse_workload("synthetic:input=16,output=8"),
    }
    return TuneOptions(**{**base, **kw})


@pytest.mark.parametrize(
    ("kw", "line"),
    [
        ({"trials": -1}, "--trials must be >= 0, got -1"),
        ({"time_budget_s": 0}, "--time-budget must be > 0, got 0"),
        ({"max_error_rate": 1.5}, "--max-error-rate must be in [0, 1), got 1.5"),
        ({"headroom": 1.0}, "--headroom must be < 1, got 1"),
        ({"salt": "a b"}, "--salt 'a b': use 1-32 letters"),
        ({"stages": ["batching", "Turbo!"]}, "not stage names ['Turbo!']"),
        ({"space_file": Path("no/such.yaml")}, "--search-space no/such.yaml does not exist"),
        ({"slos": parse_slos(["quality=1%"])}, "give at least one latency SLO"),
        ({"engine": "endpoint"}, "--engine endpoint needs --endpoint URL"),
        ({"engine": "endpoint", "endpoint": "localhost:1"}, "is not an http(s) URL"),
        ({"endpoint": "http://127.0.0.1:1"}, "--endpoint is for --engine endpoint"),
        ({"model": ""}, "--model is required"),
        ({"draft_model": "./no/such/draft"}, "--draft-model ./no/such/draft is not a folder"),
        ({"neighbour_cpu_pct": 150.0}, "--neighbour-cpu must be <= 100, got 150"),
        ({"load_model": "burst"}, "--load-model: input should be 'rate' or 'concurrency'"),
    ],
)
def test_bad_values_are_refused_with_one_line(kw: dict[str, Any], line: str) -> None:
    with pytest.raises(ValidationError) as exc:
        _opts(**kw)
    msg = problem(exc.value)
    assert line in msg
    assert "\n" not in msg


def test_a_local_model_folder_is_made_absolute_and_a_hub_id_kept(tmp_path: Path) -> None:
    folder = tmp_path / "draft"
    folder.mkdir()
    o = _opts(draft_model=str(folder / ".." / "draft"), eagle_model="org/eagle-head")
    assert o.draft_model == str(folder.resolve())
    assert o.eagle_model == "org/eagle-head"


def test_good_values_pass() -> None:
    o = _opts(engine="endpoint", endpoint="http://127.0.0.1:8000", model="", stages=["batching"])
    assert o.endpoint == "http://127.0.0.1:8000" and o.stages == ["batching"]


def test_the_neighbour_auto_decides_is_8_percent_on_a_2_core_machine_it_starts_a_server_on() -> (
    None
):
    from tuner.options import AUTO_NEIGHBOUR_PCT, auto_neighbour

    pct, why = auto_neighbour(launches=True, cores=2)
    assert pct == AUTO_NEIGHBOUR_PCT == 8.0
    assert why is not None and "8 %" in why and "--neighbour-cpu 0" in why
    assert auto_neighbour(launches=True, cores=1)[0] == 8.0
    assert auto_neighbour(launches=True, cores=16) == (0.0, None)  # the client's share is small
    assert auto_neighbour(launches=False, cores=2) == (0.0, None)  # an endpoint: load from afar
