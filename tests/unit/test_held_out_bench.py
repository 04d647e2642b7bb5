"""benchmarks/held_out.py: the shapes it sends through vLLM's client as a ``custom`` dataset
(exact token counts by the embedded default's tokenizer, the shared prefixes, the bursts), and
the shapes it refuses."""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from held_out import SHAPES, ShapedClient, parse_shapes, starts, summarize

from tests.unit.real_tokenizer import smollm2

SLOS = [{"metric": "ttft", "percentile": 99, "limit_ms": 2000.0}]


def _client(name: str) -> ShapedClient:
    wl = parse_shapes([f"{name}={SHAPES[name]}"])[name]
    return ShapedClient(wl, smollm2(), tokenizer="t", input_len=128, output_len=64, slos=SLOS)


def _lines(client: ShapedClient, tmp_path: Path, n: int, seed: int) -> tuple[list[dict], list]:
    args = client.dataset_args(n, seed, tmp_path, f"p{seed}")
    path = Path(args[args.index("--dataset-path") + 1])
    assert args[args.index("--dataset-name") + 1] == "custom"
    assert args[args.index("--custom-output-len") + 1] == "-1"  # each line's own output
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return lines, args


def test_heavy_tailed_lengths_are_exact_in_the_models_tokens(tmp_path: Path) -> None:
    lines, args = _lines(_client("heavy"), tmp_path, 200, seed=3)
    assert len(lines) == 200 and "--burstiness" not in args
    tok = smollm2()
    inputs = [len(tok(x["prompt"], add_special_tokens=False).input_ids) for x in lines]
    outputs = [x["output_tokens"] for x in lines]
    # lognormal of mean 128 (p99 512) and 64 (p99 256): a tail, and means near the asked
    assert max(inputs) > 2 * 128 and min(inputs) < 128
    assert statistics.mean(inputs) == pytest.approx(128, rel=0.25)
    assert statistics.mean(outputs) == pytest.approx(64, rel=0.25)
    assert max(outputs) > 2 * 64


def test_shared_prefixes_and_fresh_prompts_every_call(tmp_path: Path) -> None:
    client = _client("prefix")
    a, _ = _lines(client, tmp_path, 50, seed=1)
    b, _ = _lines(client, tmp_path, 50, seed=2)
    tok = smollm2()
    ids = [tok(x["prompt"], add_special_tokens=False).input_ids for x in a]
    assert all(len(i) == 384 for i in ids)
    heads = [tuple(i[:200]) for i in ids]
    shared = [h for h in set(heads) if heads.count(h) > 1]
    assert 1 <= len(shared) <= 4  # the system prompts, each shared by several requests
    assert sum(heads.count(h) for h in shared) >= 0.5 * len(ids)
    assert not {x["prompt"] for x in a} & {x["prompt"] for x in b}  # a fresh call, fresh prompts


def test_bursts_are_vllms_burstiness(tmp_path: Path) -> None:
    _, args = _lines(_client("bursty"), tmp_path, 10, seed=1)
    assert float(args[args.index("--burstiness") + 1]) == pytest.approx(0.25)  # 1 / cv^2


def test_shapes_it_cannot_send_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="NAME=WORKLOAD"):
        parse_shapes(["heavy"])
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "hello"}\n')
    with pytest.raises(ValueError, match="synthetic"):
        parse_shapes([f"file={prompts}"])
    with pytest.raises(ValueError, match="turns"):
        parse_shapes(["chat=synthetic:input=64,output=16,turns=3"])
    assert set(parse_shapes(None)) == set(SHAPES)


def _found(scores: dict[str, dict[str, float]]) -> dict[str, dict]:
    return {
        label: {"then": {n: {"score_tokens_per_s": v} for n, v in by.items()}, "startup_s": 30.0}
        for label, by in scores.items()
    }


def test_a_run_tuned_on_a_shape_against_another_runs_recommendation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--against``: both recommendations' gains over the same defaults, and whether the run
    tuned on the shape gains at least as much (issue 32)."""
    found = _found(
        {
            "defaults": {"mixed": 300.0, "heavy": 350.0},
            "recommended": {"mixed": 450.0, "heavy": 360.0},
            "against": {"mixed": 420.0, "heavy": 420.0},
        }
    )
    out = summarize(found, ["mixed", "heavy"])
    assert out["workloads"]["mixed"]["gain"] == pytest.approx(1.5)
    assert out["workloads"]["mixed"]["against_gain"] == pytest.approx(1.4)
    assert out["workloads"]["heavy"]["against_gain"] == pytest.approx(1.2)
    assert "gains less than the other's on: heavy" in capsys.readouterr().out
    found["against"]["then"]["heavy"]["score_tokens_per_s"] = 300.0
    summarize(found, ["mixed", "heavy"])
    printed = capsys.readouterr().out
    assert "at least as much as the other's on every shape" in printed
    assert "loses to vLLM's defaults" not in printed
    summarize(_found({"defaults": {"mixed": 300.0}, "recommended": {"mixed": 250.0}}), ["mixed"])
    assert "loses to vLLM's defaults on: mixed" in capsys.readouterr().out


def test_each_shape_starts_at_the_capacity_known_there() -> None:
    """A robust run's own figures on a shape start its search there; a configuration with none
    there starts at the run's recommendation's figure there, else the defaults', and a shape no
    run searched at its tuned rate."""
    long = "synthetic:input=512,output=32"
    clients = {
        "long": ShapedClient(parse_shapes([f"long={long}"])["long"], smollm2(), tokenizer="t",
                             input_len=128, output_len=64, slos=SLOS),
        "heavy": _client("heavy"),
    }  # fmt: skip

    def across(x: float) -> list[dict]:
        return [{"workload": long, "score_tokens_per_s": 20.0, "load": {"rate_rps": x}}]

    robust = {
        "baseline": {"number": 0, "across": across(0.5)},
        "trials": [{"number": 2, "across": across(0.9)}],
        "recommended": {"from_trial": 2},
    }
    readme = {"baseline": {"number": 0}, "trials": [], "recommended": {"from_trial": 1}}
    assert starts(robust, robust["baseline"], robust, clients, 3.4) == {"long": 0.5, "heavy": 3.4}
    assert starts(robust, robust["recommended"], robust, clients, 5.0) == {
        "long": 0.9,
        "heavy": 5.0,
    }
    assert starts(robust, readme["recommended"], readme, clients, 5.1) == {
        "long": 0.9,  # the robust run's recommendation's capacity there
        "heavy": 5.1,
    }
    robust["trials"] = []  # not searched there: the defaults' capacity there
    assert starts(robust, readme["recommended"], readme, clients, 5.1)["long"] == 0.5
