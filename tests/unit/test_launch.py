"""tuner/spaces/launch.py: the one launch builder tuning and `autotune probe` share."""

from __future__ import annotations

from pathlib import Path

import yaml

from tuner.spaces.launch import launch_settings, without_flags
from tuner.spaces.space import load_space

SPACE = {
    "engine": "vllm",
    "device": "cpu",
    "common": {"args": ["--seed", "0"], "env": {"COMMON": "1"}},
    "baseline": {"args": ["--max-num-seqs", "64", "--enforce-eager"], "env": {"KV": "4"}},
    "stages": [
        {
            "name": "batching",
            "knobs": [
                {"name": "max_num_seqs", "type": "int", "low": 8, "high": 256, "default": 256,
                 "flag": "--max-num-seqs"},
                {"name": "kv", "type": "int", "low": 1, "high": 8, "default": 4, "env": "KV"},
            ],
        }
    ],
}  # fmt: skip


def _space(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(SPACE))
    return load_space(path)


def test_the_baseline_is_common_then_baseline_settings(tmp_path: Path) -> None:
    args, env = launch_settings(_space(tmp_path), {}, {})
    assert args == ["--seed", "0", "--max-num-seqs", "64", "--enforce-eager"]
    assert env == {"COMMON": "1", "KV": "4"}


def test_a_knob_overrides_the_baseline_flag_and_variable_never_passing_one_twice(
    tmp_path: Path,
) -> None:
    args, env = launch_settings(_space(tmp_path), {"max_num_seqs": 128, "kv": 2}, {})
    assert args.count("--max-num-seqs") == 1
    assert args[args.index("--max-num-seqs") + 1] == "128"
    assert "--enforce-eager" in args and args[:2] == ["--seed", "0"]
    assert env == {"COMMON": "1", "KV": "2"}


def test_without_flags_drops_a_flag_and_its_value_only() -> None:
    base = ["--a", "1", "--b", "--c", "3"]
    assert without_flags(base, ["--a", "9"]) == ["--b", "--c", "3"]
    assert without_flags(base, ["--b"]) == ["--a", "1", "--c", "3"]
