"""probes.trace: Azure and Mooncake traces replayed at their own times (scaled), each request
exact in its tokens, Mooncake's hash ids as shared prefix blocks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from probes.describe import describe
from probes.workload import (
    TraceWorkload,
    WorkloadError,
    arrival_schedule,
    check_buildable,
    load_axis,
    parse_workload,
    prepare_requests,
)
from tests.unit.real_tokenizer import TOKENIZERS, tokenizer

DATA = Path(__file__).parents[1] / "data"
AZURE = DATA / "azure_trace.csv"
MOONCAKE = DATA / "mooncake_trace.jsonl"


def trace(spec: str) -> TraceWorkload:
    wl = parse_workload(spec)
    assert isinstance(wl, TraceWorkload)
    return wl


def azure_rows() -> list[tuple[float, int, int]]:
    """The fixture's rows as (seconds from its first, input, output), in time order, read
    independently of probes.trace (numpy's datetime64, to the nanosecond)."""
    lines = AZURE.read_text().splitlines()[1:]
    stamps = [np.datetime64(line.split(",")[0].replace(" ", "T"), "ns") for line in lines]
    first = min(stamps)
    rows = [
        ((s - first) / np.timedelta64(1, "ns") * 1e-9, int(c), int(g))
        for s, (_, c, g) in zip(stamps, (line.split(",") for line in lines), strict=True)
    ]
    return sorted(rows, key=lambda r: r[0])


def mooncake_rows() -> list[dict[str, Any]]:
    rows = [orjson.loads(line) for line in MOONCAKE.read_text().splitlines()]
    return sorted(rows, key=lambda r: r["timestamp"])


@pytest.mark.parametrize("scale", [1.0, 2.0, 0.25])
def test_azure_arrivals_keep_the_traces_schedule(scale: float) -> None:
    wl = trace(f"trace:{AZURE},scale={scale:g}")
    assert wl.format == "azure" and load_axis(wl) == "time_scale"
    expected = [t / scale for t, _, _ in azure_rows()]
    got = arrival_schedule(wl, len(expected), scale, seed=0)
    assert got == pytest.approx(expected, abs=1e-3)  # within 1 ms of the trace's own
    assert got == pytest.approx(expected, abs=1e-6)  # in fact to the microsecond
    assert got[-1] == pytest.approx(16.3194110 / scale, abs=1e-6)  # 18:16:03.0000010, last


def test_mooncake_arrivals_keep_the_traces_schedule() -> None:
    wl = trace(f"trace:{MOONCAKE}")
    assert wl.format == "mooncake"
    expected = [r["timestamp"] / 1000 for r in mooncake_rows()]
    assert arrival_schedule(wl, 6, 1.0, 0) == pytest.approx(expected, abs=1e-3)
    assert arrival_schedule(wl, 6, 4.0, 0) == pytest.approx([t / 4 for t in expected], abs=1e-3)
    assert wl.duration_s == pytest.approx(4.001)
    assert wl.rate_rps == pytest.approx(5 / 4.001)


def test_rows_are_replayed_in_time_order_and_ties_keep_the_files_order() -> None:
    wl = trace(f"trace:{AZURE}")
    assert [(r.input, r.output) for r in wl.rows] == [(c, max(g, 1)) for _, c, g in azure_rows()]
    assert [r.input for r in wl.rows][2:4] == [879, 1]  # the same time: as in the file
    assert [r.input for r in wl.rows][-2:] == [12, 2048]  # the file had them the other way


@pytest.mark.parametrize("tok_name", TOKENIZERS)
@pytest.mark.parametrize("path", [AZURE, MOONCAKE])
def test_every_request_has_exactly_its_rows_tokens(tok_name: str, path: Path) -> None:
    tok = tokenizer(tok_name)
    wl = trace(f"trace:{path}")
    check_buildable(wl, tok)
    n = len(wl.rows) + 2  # the trace starts again past its end
    reqs = prepare_requests(wl, n, model="m", tokenizer=tok, seed=4)
    for i, r in enumerate(reqs):
        row = wl.rows[i % len(wl.rows)]
        body = orjson.loads(r.body)
        assert len(tok.encode(body["prompt"], add_special_tokens=True)) == row.input
        assert r.prompt_tokens == row.input
        assert r.max_tokens == body["max_tokens"] == row.output
        assert body["ignore_eos"] is True


def test_a_rows_zero_output_is_sent_as_one_token() -> None:
    wl = trace(f"trace:{AZURE}")
    assert 0 in [g for _, _, g in azure_rows()]
    assert min(r.output for r in wl.rows) == 1


@pytest.mark.parametrize("tok_name", TOKENIZERS)
def test_hash_ids_become_shared_prefix_blocks(tok_name: str) -> None:
    tok = tokenizer(tok_name)
    wl = trace(f"trace:{MOONCAKE}")
    reqs = prepare_requests(wl, 6, model="m", tokenizer=tok, seed=1)
    ids = [tuple(tok.encode(orjson.loads(r.body)["prompt"], add_special_tokens=True)) for r in reqs]
    sp = len(tok.encode("", add_special_tokens=True))
    block = sp + 512  # the special tokens and the first block
    # rows 0 and 1 start with block 0; row 3 with blocks 0 and 1 (as row 0 does), in tokens
    assert ids[0][:block] == ids[1][:block] == ids[3][:block]
    assert ids[0][block : block + 512] != ids[1][block : block + 512]  # blocks 1 and 3
    if sp == 0:  # row 3's 1024 tokens are blocks 0 and 1 whole: all of row 0's first 1024
        assert ids[3] == ids[0][:1024]
    else:  # with a BOS only block 0 fits whole; the rest is row 3's own
        assert ids[3][block:] != ids[0][block : 1024 + sp]
    # rows without a block in common share nothing past the run's salt (its first 9 characters)
    for a, b in [(0, 2), (0, 4), (2, 4), (2, 5)]:
        assert ids[a][: sp + 16] != ids[b][: sp + 16]
    # what each request shares with the ones before it
    expected = [0, block, 0, block + (512 if sp == 0 else 0), 0, 0]
    assert [r.shared_tokens for r in reqs] == expected
    # the blocks are salted per run: another seed, other text
    other = prepare_requests(wl, 1, model="m", tokenizer=tok, seed=2)[0]
    assert tok.encode(orjson.loads(other.body)["prompt"])[:block] != list(ids[0][:block])


def test_a_repeated_row_shares_its_blocks_but_not_its_own_part() -> None:
    tok = tokenizer("char")
    wl = trace(f"trace:{MOONCAKE}")
    reqs = prepare_requests(wl, 8, model="m", tokenizer=tok, seed=1)
    p = [orjson.loads(r.body)["prompt"] for r in reqs]
    assert p[6][:1024] == p[0][:1024]  # row 0 again: blocks 0 and 1
    assert p[6] != p[0]
    assert reqs[6].shared_tokens == 1 + 1024  # BOS and blocks 0 and 1
    assert p[7] != p[1] and p[7][:512] == p[1][:512]


def test_block_size_is_configurable() -> None:
    tok = tokenizer("char")
    wl = trace(f"trace:{MOONCAKE},block=100")
    assert wl.block == 100 and wl.label == f"trace:{MOONCAKE},block=100"
    reqs = prepare_requests(wl, 2, model="m", tokenizer=tok, seed=1)
    p = [orjson.loads(r.body)["prompt"] for r in reqs]
    assert p[0][:100] == p[1][:100] and p[0][:200] != p[1][:200]
    assert reqs[1].shared_tokens == 1 + 100


def test_describe_a_trace() -> None:
    tok = tokenizer("char")
    wl = trace(f"trace:{MOONCAKE},scale=2")
    reqs = prepare_requests(wl, 6, model="m", tokenizer=tok, seed=1)
    d = describe(wl, reqs)
    orjson.dumps(d)  # JSON-ready
    assert d["kind"] == "trace" and d["spec"] == f"trace:{MOONCAKE},scale=2"
    assert parse_workload(d["spec"]) == wl
    p = d["parameters"]
    assert (p["format"], p["rows"], p["scale"], p["block"]) == ("mooncake", 6, 2.0, 512)
    ins = [1200, 1100, 600, 1024, 300, 2]
    assert d["sent"]["input_tokens"]["mean"] == pytest.approx(np.mean(ins))
    assert d["sent"]["input_tokens"]["p50"] == pytest.approx(np.percentile(ins, 50))
    assert d["sent"]["input_tokens"]["p99"] == pytest.approx(np.percentile(ins, 99))
    assert d["sent"]["output_tokens"]["mean"] == pytest.approx(np.mean([30, 12, 5, 40, 64, 1]))
    assert d["sent"]["prefix_share"] == pytest.approx((513 + 513) / sum(ins))


@pytest.mark.parametrize(
    ("stamp", "seconds"),
    [
        ("2024-05-10 00:00:01.009930+00:00", 1.00993),
        ("2024-05-10T02:00:02.5+02:00", 2.5),  # the same instant as 00:00:02.5 UTC
        ("2024-05-10 00:00:03Z", 3.0),
        ("2024-05-09 23:59:59.5-00:00", -0.5),
    ],
)
def test_azure_timestamps_with_an_offset_or_decimals(
    tmp_path: Path, stamp: str, seconds: float
) -> None:
    f = tmp_path / "t.csv"
    f.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00,5,5\n{stamp},5,5\n")
    wl = trace(f"trace:{f}")
    expected = [x - min(0.0, seconds) for x in sorted([0.0, seconds])]
    assert arrival_schedule(wl, 2, 1.0, 0) == pytest.approx(expected, abs=1e-6)


def test_azure_timestamps_may_be_seconds(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n100.25,5,5\n101.5,6,6\n")
    assert arrival_schedule(trace(f"trace:{f}"), 2, 1.0, 0) == [0.0, 1.25]


def test_mooncake_columns_in_a_csv_and_azure_columns_in_jsonl(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_text('timestamp,input_length,output_length,hash_ids\n0,600,4,"[1, 2]"\n500,9,2,\n')
    wl = trace(f"trace:{f}")
    assert [r.hash_ids for r in wl.rows] == [(1, 2), ()]
    g = tmp_path / "a.jsonl"
    g.write_text('{"TIMESTAMP": "2023-11-16 18:15:46.5", "ContextTokens": 7, "GeneratedTokens": 1}')
    assert trace(f"trace:{g}").format == "azure"


def write(tmp: Path, name: str, text: str) -> str:
    (tmp / name).write_text(text)
    return str(tmp / name)


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("a.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,5\n", "column 'GeneratedTokens'"),
        ("m.jsonl", '{"timestamp": 0, "input_length": 5}\n', "no column 'output_length'"),
        ("x.csv", "time,in,out\n0,1,2\n", "neither Azure's columns"),
        ("e.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "no requests in the file"),
        ("b.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,5,5\n", ":2: TIMESTAMP"),
        ("c.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,0,5\n", ":2: ContextTokens"),
        ("d.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1.0,5.5,5\n", ":2: ContextTokens"),
        ("f.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{bad\n', ":2:"),
        (
            "h.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "x"}\n',
            ":1: hash_ids",
        ),
        (
            "g.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n',
            ":2: no value for 'input_length'",
        ),
    ],
)
def test_a_bad_trace_is_one_error_naming_the_file(
    tmp_path: Path, name: str, text: str, needle: str
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(WorkloadError) as exc:
        parse_workload(f"trace:{path}")
    assert needle in str(exc.value)
    assert path in str(exc.value)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("trace:", "names no file"),
        ("trace:/no/such/trace.csv", "is not an existing file"),
        (f"trace:{AZURE},scale=0", "scale must be above 0"),
        (f"trace:{AZURE},scale=fast", "bad part 'scale=fast'"),
        (f"trace:{AZURE},speed=2", "bad part 'speed=2'"),
        (f"trace:{AZURE},block=0", "block at least 1"),
    ],
)
def test_bad_trace_specs(spec: str, needle: str) -> None:
    with pytest.raises(WorkloadError) as exc:
        parse_workload(spec)
    assert needle in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_trace_needs_the_tokenizer() -> None:
    wl = trace(f"trace:{AZURE}")
    with pytest.raises(WorkloadError, match="a trace workload needs the model's tokenizer"):
        check_buildable(wl, None)
    with pytest.raises(WorkloadError, match="a trace workload needs the model's tokenizer"):
        prepare_requests(wl, 1, model="m", tokenizer=None, seed=0)
