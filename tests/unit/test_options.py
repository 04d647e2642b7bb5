"""TuneOptions checks its own values, so the Python API refuses what the CLI refuses, with the
same one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from probes.slo import parse_slos
from probes.workload import parse_workload
from tuner.options import (
    TuneOptions,
    check_compare,
    check_engine,
    check_error_rate,
    check_probe,
    check_report,
    problem,
)


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
        ({"headroom": 1.0}, "--headroom must be in [0%, 100%), got 100%"),
        ({"load_margin": -0.05}, "--load-margin must be in [0%, 100%), got -5%"),
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
        ({"load_model": "burst"}, "--load 'burst' is unknown; known: rate, concurrency"),
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


PROBE_OK: dict[str, Any] = {
    "model": "m",
    "endpoint": None,
    "concurrency": None,
    "rate": None,
    "requests": 200,
    "warmup": 8,
    "params": [],
}


@pytest.mark.parametrize(
    ("kw", "line"),
    [
        ({"model": None}, "give either --model (to start a server) or --endpoint"),
        ({"endpoint": "http://h:1"}, "give either --model (to start a server) or --endpoint"),
        ({"concurrency": 4, "rate": 1.0}, "give --concurrency or --rate, not both"),
        ({"concurrency": 0}, "--concurrency must be >= 1, got 0"),
        ({"rate": 0.0}, "--rate must be > 0, got 0.0"),
        ({"requests": 0}, "--requests must be >= 1 and --warmup >= 0"),
        ({"warmup": -1}, "--requests must be >= 1 and --warmup >= 0"),
        ({"model": None, "endpoint": "http://h:1", "params": ["a=1"]}, "--param goes with --model"),
    ],
)
def test_the_probe_commands_options_are_checked_here(kw: dict[str, Any], line: str) -> None:
    check_probe(**PROBE_OK)  # the defaults pass
    with pytest.raises(ValueError) as exc:
        check_probe(**{**PROBE_OK, **kw})
    assert line in str(exc.value)


REPORT_OK: dict[str, Any] = {
    "fmt": "md,html,json",
    "formats": {"md", "html", "json"},
    "run_dir": Path("run"),
    "storage": None,
    "study": None,
    "slo": [],
    "max_error_rate": None,
}


@pytest.mark.parametrize(
    ("kw", "line"),
    [
        ({"fmt": "pdf", "formats": {"pdf"}}, "--format 'pdf': give json, md or html"),
        ({"fmt": ",", "formats": set()}, "--format ',': give json, md or html"),
        ({"run_dir": None}, "give a run folder, or --storage URL --study NAME"),
        ({"storage": "sqlite:///x.db"}, "give a run folder, or --storage URL --study NAME"),
        ({"run_dir": None, "storage": "sqlite:///x.db"}, "--storage goes with --study NAME"),
        (
            {"run_dir": None, "storage": "sqlite:///x.db", "study": "s", "slo": ["ttft=1s"]},
            "--storage goes with --study NAME (and no --slo)",
        ),
        ({"max_error_rate": 1.0}, "--max-error-rate must be in [0, 1), got 1"),
    ],
)
def test_the_report_commands_options_are_checked_here(kw: dict[str, Any], line: str) -> None:
    check_report(**REPORT_OK)
    check_report(**{**REPORT_OK, "run_dir": None, "storage": "sqlite:///x.db", "study": "s"})
    with pytest.raises(ValueError) as exc:
        check_report(**{**REPORT_OK, **kw})
    assert line in str(exc.value)


def test_the_other_checks_the_cli_calls() -> None:
    check_compare([Path("a"), Path("b")])
    with pytest.raises(ValueError, match="give two or more run folders to compare"):
        check_compare([Path("a")])
    check_engine("vllm")
    with pytest.raises(ValueError, match="engine 'vlm' is unknown; known: endpoint, transformers"):
        check_engine("vlm")
    check_error_rate(0.0)
    with pytest.raises(ValueError, match=r"--max-error-rate must be in \[0, 1\), got -0.1"):
        check_error_rate(-0.1)
