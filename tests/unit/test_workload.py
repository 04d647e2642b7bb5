"""probes.workload: --workload parsing, JSONL files, and the prepared request bodies."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from probes.workload import (
    FileWorkload,
    SyntheticWorkload,
    WorkloadError,
    parse_workload,
    prepare_requests,
    synthetic_prompt,
)
from tests.fakes.tokenizer import CharTokenizer

MODEL = "m"

# ---------------------------------------------------------------------------- synthetic specs


@pytest.mark.parametrize(
    "spec",
    [
        "synthetic:input=128,output=64",
        "synthetic:output=64,input=128",
        "synthetic: input = 128 , output = 64 ",
        "synthetic:input=128,output=64,",
    ],
)
def test_synthetic_forms(spec: str) -> None:
    wl = parse_workload(spec)
    assert wl == SyntheticWorkload(input_len=128, output_len=64)
    assert wl.label == "synthetic:input=128,output=64"


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("synthetic:input=128", "lacks output"),
        ("synthetic:output=8", "lacks input"),
        ("synthetic", "lacks input, output"),
        ("synthetic:input=0,output=8", "lengths must be positive"),
        ("synthetic:input=8,output=0", "lengths must be positive"),
        ("synthetic:input=-8,output=8", "bad part 'input=-8'"),
        ("synthetic:input=abc,output=8", "bad part 'input=abc'"),
        ("synthetic:prompt=8,output=8", "bad part 'prompt=8'"),
        ("synthetic:input=8;output=8", "bad part"),
    ],
)
def test_synthetic_errors(spec: str, needle: str) -> None:
    with pytest.raises(WorkloadError) as exc:
        parse_workload(spec)
    assert needle in str(exc.value)
    assert repr(spec) in str(exc.value)  # the message names the spec


def test_bad_part_message_shows_the_form() -> None:
    with pytest.raises(WorkloadError, match=r"form: synthetic:input=128,output=64"):
        parse_workload("synthetic:in=1,output=2")


def test_neither_synthetic_nor_a_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(WorkloadError, match="neither synthetic:input=N,output=M nor an existing"):
        parse_workload(str(missing))


def test_a_file_whose_name_starts_with_synthetic_is_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "synthetic_chat.jsonl").write_text('{"prompt": "hi"}\n')
    monkeypatch.chdir(tmp_path)
    wl = parse_workload("synthetic_chat.jsonl")
    assert isinstance(wl, FileWorkload)


# ---------------------------------------------------------------------------- JSONL files


def write_jsonl(path: Path, *lines: Any) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def test_jsonl_prompt_messages_and_max_tokens(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "w.jsonl",
        {"prompt": "Once upon a time"},
        "",  # blank lines are skipped
        {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5},
    )
    wl = parse_workload(str(f))
    assert isinstance(wl, FileWorkload)
    assert wl.label == str(f)
    assert len(wl.items) == 2
    assert wl.items[0].prompt == "Once upon a time"
    assert wl.items[0].max_tokens is None
    assert wl.items[1].messages == [{"role": "user", "content": "Hi"}]
    assert wl.items[1].max_tokens == 5


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        json.dumps({"prompt": "x", "temperature": 1.0}),  # unknown key
        json.dumps({"prompt": "x", "max_tokens": 0}),
        json.dumps({"prompt": 5}),
        json.dumps(["prompt", "x"]),
    ],
)
def test_a_bad_line_error_names_its_line_number(tmp_path: Path, bad: str) -> None:
    f = write_jsonl(tmp_path / "w.jsonl", {"prompt": "ok"}, "", bad)
    with pytest.raises(WorkloadError) as exc:
        parse_workload(str(f))
    assert f"{f}:3:" in str(exc.value)


@pytest.mark.parametrize(
    "item",
    [
        {"prompt": "x", "messages": [{"role": "user", "content": "y"}]},
        {"max_tokens": 3},
        {},
    ],
)
def test_exactly_one_of_prompt_or_messages(tmp_path: Path, item: dict[str, Any]) -> None:
    f = write_jsonl(tmp_path / "w.jsonl", item)
    with pytest.raises(WorkloadError, match=r":1: give exactly one of 'prompt' or 'messages'"):
        parse_workload(str(f))


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_an_empty_file_is_an_error(tmp_path: Path, content: str) -> None:
    f = tmp_path / "empty.jsonl"
    f.write_text(content)
    with pytest.raises(WorkloadError, match="no requests in the file"):
        parse_workload(str(f))


def test_a_folder_is_not_a_workload(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError):
        parse_workload(str(tmp_path))


# ---------------------------------------------------------------------------- prepared requests


def bodies(reqs: list[Any]) -> list[dict[str, Any]]:
    return [orjson.loads(r.body) for r in reqs]


@pytest.mark.parametrize("n_tokens", [20, 64, 128, 300])
def test_synthetic_prompts_have_exactly_the_asked_token_count(n_tokens: int) -> None:
    tok = CharTokenizer()
    wl = SyntheticWorkload(input_len=n_tokens, output_len=8)
    reqs = prepare_requests(wl, 5, model=MODEL, tokenizer=tok, seed=0)
    assert len(reqs) == 5
    for r, b in zip(reqs, bodies(reqs), strict=True):
        # Counted as the server counts them: special tokens included.
        assert len(tok.encode(b["prompt"], add_special_tokens=True)) == n_tokens
        assert r.prompt_tokens == n_tokens
        assert r.max_tokens == 8
        assert b["max_tokens"] == 8


def test_synthetic_prompts_have_distinct_prefixes() -> None:
    wl = SyntheticWorkload(input_len=64, output_len=4)
    prompts = [
        b["prompt"]
        for b in bodies(prepare_requests(wl, 20, model=MODEL, tokenizer=CharTokenizer(), seed=0))
    ]
    assert len(set(prompts)) == 20
    # no two share even their first 16 characters: a prefix cache cannot help
    assert len({p[:16] for p in prompts}) == 20


def test_the_salt_is_fresh_per_seed_and_reproducible() -> None:
    wl = SyntheticWorkload(input_len=64, output_len=4)
    tok = CharTokenizer()
    a = bodies(prepare_requests(wl, 3, model=MODEL, tokenizer=tok, seed=1))
    b = bodies(prepare_requests(wl, 3, model=MODEL, tokenizer=tok, seed=1))
    c = bodies(prepare_requests(wl, 3, model=MODEL, tokenizer=tok, seed=2))
    assert a == b
    assert {x["prompt"] for x in a}.isdisjoint({x["prompt"] for x in c})


def test_synthetic_body_is_a_streamed_greedy_completion() -> None:
    wl = SyntheticWorkload(input_len=32, output_len=4)
    (req,) = prepare_requests(wl, 1, model=MODEL, tokenizer=CharTokenizer(), seed=0)
    assert req.path == "/v1/completions"
    assert req.chat is False
    b = orjson.loads(req.body)
    assert b["model"] == MODEL
    assert b["stream"] is True
    assert b["stream_options"] == {"include_usage": True}
    assert b["temperature"] == 0.0
    assert "messages" not in b


def test_ignore_eos_only_when_asked() -> None:
    wl = SyntheticWorkload(input_len=32, output_len=4)
    tok = CharTokenizer()
    (on,) = bodies(prepare_requests(wl, 1, model=MODEL, tokenizer=tok, seed=0, ignore_eos=True))
    (off,) = bodies(prepare_requests(wl, 1, model=MODEL, tokenizer=tok, seed=0, ignore_eos=False))
    assert on["ignore_eos"] is True
    assert "ignore_eos" not in off


def test_extra_body_is_merged() -> None:
    wl = SyntheticWorkload(input_len=32, output_len=4)
    (b,) = bodies(
        prepare_requests(
            wl, 1, model=MODEL, tokenizer=CharTokenizer(), seed=0, extra_body={"top_k": 1}
        )
    )
    assert b["top_k"] == 1


def test_synthetic_needs_a_tokenizer() -> None:
    with pytest.raises(WorkloadError, match="needs the model's tokenizer"):
        prepare_requests(
            SyntheticWorkload(input_len=8, output_len=8), 1, model=MODEL, tokenizer=None, seed=0
        )


def test_a_prompt_too_short_for_its_salt_is_an_error() -> None:
    import random

    with pytest.raises(WorkloadError, match="exactly 3 tokens"):
        synthetic_prompt(CharTokenizer(), 3, "[0123abcd-0] ", random.Random(0))


def test_file_items_cycle_and_chat_goes_to_chat_completions(tmp_path: Path) -> None:
    f = write_jsonl(
        tmp_path / "w.jsonl",
        {"prompt": "Tell me a story", "max_tokens": 7},
        {"messages": [{"role": "user", "content": "Hi"}]},
    )
    reqs = prepare_requests(parse_workload(str(f)), 5, model=MODEL, tokenizer=None, seed=0)
    assert [r.path for r in reqs] == [
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/completions",
    ]
    assert [r.chat for r in reqs] == [False, True, False, True, False]
    assert all(r.prompt_tokens is None for r in reqs)  # not counted without a tokenizer
    completion, chat = bodies(reqs[:2])
    salt = completion["prompt"].removesuffix("Tell me a story")
    assert re.fullmatch(r"\[[0-9a-f]{8}-0\] ", salt)  # a salted prefix per request
    assert completion["max_tokens"] == 7
    assert "messages" not in completion
    assert chat["messages"] == [{"role": "user", "content": salt.replace("-0]", "-1]") + "Hi"}]
    assert chat["max_tokens"] == 128  # the default for file items
    assert "prompt" not in chat
    for b in (completion, chat):
        assert b["stream"] is True
        assert b["stream_options"] == {"include_usage": True}
        assert "ignore_eos" not in b  # a file workload keeps the model's own stopping


def test_file_salts_differ_per_request_and_per_seed_unless_prefixes_are_shared(
    tmp_path: Path,
) -> None:
    f = write_jsonl(
        tmp_path / "w.jsonl",
        {"prompt": "Tell me a story"},
        {"prompt": "System prompt shared on purpose", "shared_prefix": True},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]},
    )
    wl = parse_workload(str(f))

    def prompts(seed: int) -> list[str]:
        out = []
        for b in bodies(prepare_requests(wl, 6, model=MODEL, tokenizer=None, seed=seed)):
            out.append(b["prompt"] if "prompt" in b else b["messages"][0]["content"][0]["text"])
        return out

    a, b = prompts(1), prompts(2)
    assert a[1] == a[4] == "System prompt shared on purpose"  # sent as written
    assert a[0] != a[3] and a[0].endswith("Tell me a story")  # the same line, distinct prefixes
    assert a[2].endswith("Hi") and a[2] != "Hi"  # the first text part of a content list
    assert a[0] != b[0]  # another seed (another run's salt), another prefix


def test_spread_draws_lengths_within_the_range_and_keeps_prompt_counts_exact() -> None:
    wl = parse_workload("synthetic:input=40,output=20,spread=0.5")
    assert isinstance(wl, SyntheticWorkload)
    assert wl.spread == 0.5
    assert wl.label == "synthetic:input=40,output=20,spread=0.5"
    tok = CharTokenizer()
    reqs = prepare_requests(wl, 60, model=MODEL, tokenizer=tok, seed=3)
    ins = [r.prompt_tokens for r in reqs]
    outs = [r.max_tokens for r in reqs]
    assert all(i is not None and 20 <= i <= 60 for i in ins)
    assert all(10 <= o <= 30 for o in outs)
    assert len(set(ins)) > 10 and len(set(outs)) > 8  # spread out, not in lockstep
    for r, b in zip(reqs, bodies(reqs), strict=True):
        assert len(tok.encode(b["prompt"])) == r.prompt_tokens  # exact per request
        assert b["max_tokens"] == r.max_tokens


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("synthetic:input=8,output=8,spread=1.5", "spread must be in [0, 1)"),
        ("synthetic:input=8.5,output=8", "bad part 'input=8.5'"),
    ],
)
def test_spread_errors(spec: str, needle: str) -> None:
    with pytest.raises(WorkloadError, match=re.escape(needle)):
        parse_workload(spec)
