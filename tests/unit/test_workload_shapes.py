"""Workloads with the shape of real traffic: lognormal lengths, (input, output) pairs from a
file, prefix groups, multi-turn sessions; each prompt exact in its tokens; the spec grammar,
its errors, and ``describe`` for report.json. (Arrivals: test_arrivals.py; traces:
test_trace.py.)"""

from __future__ import annotations

import hashlib
import json
import math
import random
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from probes.describe import describe
from probes.lengths import Z99, LogNormal, lognormal_sigma
from probes.prefixes import PrefixGroups, Sessions
from probes.workload import (
    FileItem,
    FileWorkload,
    PairsWorkload,
    PreparedRequest,
    SyntheticWorkload,
    Tokenizer,
    WorkloadError,
    check_buildable,
    parse_workload,
    prepare_requests,
)
from tests.fakes.tokenizer import CharTokenizer
from tests.unit.real_tokenizer import TOKENIZERS, tokenizer

PAIRS = Path(__file__).parents[1] / "data" / "pairs.csv"  # (120, 7), (45, 300), (800, 16), (33, 1)


def synthetic(spec: str) -> SyntheticWorkload:
    wl = parse_workload(spec)
    assert isinstance(wl, SyntheticWorkload)
    return wl


def prompts(reqs: list[PreparedRequest]) -> list[str]:
    return [orjson.loads(r.body)["prompt"] for r in reqs]


def token_ids(tok: Tokenizer, reqs: list[PreparedRequest]) -> list[tuple[int, ...]]:
    return [tuple(tok.encode(p, add_special_tokens=True)) for p in prompts(reqs)]


def assert_exact(tok: Tokenizer, reqs: list[PreparedRequest]) -> None:
    """Every prompt has exactly its announced tokens, as the server counts them."""
    for r, ids in zip(reqs, token_ids(tok, reqs), strict=True):
        assert len(ids) == r.prompt_tokens
        assert orjson.loads(r.body)["max_tokens"] == r.max_tokens


# ---------------------------------------------------------------------------- the grammar


def test_existing_specs_prepare_the_same_requests_as_before() -> None:
    """Digests of the bodies probes.workload prepared before the new kinds (the commit
    before them, with this tokenizer): same spec, same seed, same bytes."""
    before = [
        ("synthetic:input=64,output=8", 0, "845d1d5c2fbd13c082ae5c028b6aefeeb8145e3a"),
        ("synthetic:input=64,output=8", 5, "dd561770b5931cf86a2ed3aeb283ceade6f236b3"),
        ("synthetic:input=40,output=20,spread=0.5", 0, "1330d006b68921ba05d321065c6c83622a57c0d7"),
        ("synthetic:input=40,output=20,spread=0.5", 5, "9fee878ae6c3159f38d3aa2d2670c2d619fc6c02"),
    ]  # the first 40 hex digits of each sha256
    for spec, seed, digest in before:
        wl = parse_workload(spec)
        reqs = prepare_requests(wl, 30, model="m", tokenizer=CharTokenizer(), seed=seed)
        assert hashlib.sha256(b"".join(r.body for r in reqs)).hexdigest()[:40] == digest
        assert all(r.shared_tokens == 0 for r in reqs)


@pytest.mark.parametrize(
    "spec",
    [
        "synthetic:input=128,output=64,spread=0.5",
        "synthetic:input=512,output=128,in_p99=4096,in_min=32,in_max=16384",
        "synthetic:input=512,output=128,out_p99=1024,out_min=1,out_max=4096",
        "synthetic:input=512,output=128,in_p99=4096,in_min=100,in_max=8000,out_p99=900,out_min=2,out_max=1000",
        "synthetic:input=512,output=64,prefix_groups=4,prefix_len=256,prefix_share=0.8",
        "synthetic:input=100,output=20,turns=3",
        "synthetic:input=100,output=20,turns=3,sessions=2",
        "synthetic:input=100,output=20,arrivals=gamma,cv=2",
        f"pairs:{PAIRS}",
        f"pairs:{PAIRS},order=sample,prefix_groups=2,prefix_len=20,turns=2,arrivals=gamma,cv=0.5",
    ],
)
def test_a_label_is_the_canonical_spec(spec: str) -> None:
    wl = parse_workload(spec)
    assert wl.label == spec
    assert parse_workload(wl.label) == wl


@pytest.mark.parametrize(
    ("spec", "label"),
    [
        ("synthetic:input=512,output=128,in_p99=4096", "in_p99=4096,in_min=32,in_max=16384"),
        ("synthetic:input=512,output=128,dist=lognormal,out_p99=600", "out_p99=600,out_min=1"),
        ("synthetic: input=64, output=8, turns=1", "synthetic:input=64,output=8"),
        ("synthetic:input=64,output=8,arrivals=poisson", "synthetic:input=64,output=8"),
        ("synthetic:input=64,output=8,dist=fixed", "synthetic:input=64,output=8"),
        ("synthetic:input=64,output=8,dist=uniform,spread=0.2", "output=8,spread=0.2"),
        ("synthetic:input=64,output=8,burstiness=0.25", "arrivals=gamma,cv=2"),
        ("synthetic:input=64,output=8,burstiness=3", "arrivals=gamma,cv=0.57735026918962"),
        (
            "synthetic:input=512,output=8,in_p99=2000,prefix_groups=2,prefix_len=256",
            "in_p99=2000,in_min=288,in_max=8000,prefix_groups=2,prefix_len=256",
        ),
    ],
)
def test_defaults_and_equivalent_forms(spec: str, label: str) -> None:
    wl = parse_workload(spec)
    assert label in wl.label
    assert parse_workload(wl.label) == wl


def test_what_the_keys_mean() -> None:
    wl = synthetic(
        "synthetic:input=512,output=64,in_p99=4096,prefix_groups=4,prefix_len=256,"
        "prefix_share=0.8,turns=3,sessions=5,cv=2"
    )
    assert wl.input_dist == LogNormal(mean=512, p99=4096, lo=32 + 256, hi=4 * 4096)
    assert wl.output_dist is None
    assert wl.prefix == PrefixGroups(groups=4, length=256, share=0.8)
    assert wl.sessions == Sessions(turns=3, width=5)
    assert wl.arrivals is not None and wl.arrivals.cv == 2.0


def test_an_unsalted_single_turn_workload_is_todays() -> None:
    plain = synthetic("synthetic:input=64,output=8,turns=1,arrivals=poisson")
    assert plain == SyntheticWorkload(input_len=64, output_len=8)


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("synthetic:input=512,output=64,p99=4096", "p99= is ambiguous; say which length"),
        ("synthetic:input=512,output=64,in_p99=400", "in_p99=400 must exceed the mean input=512"),
        ("synthetic:input=100,output=64,in_p99=2000", "over 14.97x the mean input=100"),
        ("synthetic:input=512,output=64,in_min=10", "in_min applies to a lognormal input"),
        ("synthetic:input=512,output=64,in_p99=1000,in_max=900", "in_max=900 must be at least"),
        ("synthetic:input=512,output=64,in_p99=1000,in_min=600", "in_min=600 must be below"),
        ("synthetic:input=512,output=64,in_p99=1000,in_min=0", "in_min must be at least 1"),
        ("synthetic:input=20,output=64,in_p99=100", "clipped to at least 32 tokens by default"),
        ("synthetic:input=512,output=64,spread=0.5,out_p99=100", "and out_p99 (lognormal) do not"),
        ("synthetic:input=512,output=64,dist=lognormal", "dist=lognormal needs in_p99="),
        ("synthetic:input=512,output=64,dist=uniform", "dist=uniform needs spread="),
        ("synthetic:input=512,output=64,dist=fixed,spread=0.2", "dist=fixed takes no spread"),
        ("synthetic:input=512,output=64,dist=normal", "dist='normal' is unknown; known: fixed,"),
        ("synthetic:input=512,output=64,prefix_groups=4", "need prefix_groups= and prefix_len="),
        ("synthetic:input=512,output=64,prefix_len=100", "need prefix_groups= and prefix_len="),
        ("synthetic:input=200,output=64,prefix_groups=4,prefix_len=256", "input=200 must exceed"),
        (
            "synthetic:input=300,output=64,spread=0.5,prefix_groups=4,prefix_len=200",
            "the shortest input with the spread (150) must exceed prefix_len=200",
        ),
        (
            "synthetic:input=512,output=64,in_p99=2000,in_min=100,prefix_groups=4,prefix_len=200",
            "in_min=100 must exceed prefix_len=200",
        ),
        ("synthetic:input=512,output=64,prefix_groups=0,prefix_len=10", "must be at least 1"),
        (
            "synthetic:input=512,output=64,prefix_groups=2,prefix_len=10,prefix_share=1.5",
            "prefix_share in (0, 1]",
        ),
        (
            "synthetic:input=512,output=64,prefix_groups=2,prefix_len=10,prefix_share=0",
            "prefix_share in (0, 1]",
        ),
        ("synthetic:input=512,output=64,turns=0", "turns and sessions must be at least 1"),
        ("synthetic:input=512,output=64,turns=2,sessions=0", "turns and sessions must be at least"),
        ("synthetic:input=512,output=64,sessions=4", "sessions= (side by side) needs turns="),
        ("synthetic:input=512,output=64,turns=2.5", "bad part 'turns=2.5'"),
        ("synthetic:input=512,output=64,arrivals=gamma", "arrivals=gamma needs cv="),
        ("synthetic:input=512,output=64,arrivals=poisson,cv=2", "cv= is for arrivals=gamma"),
        ("synthetic:input=512,output=64,cv=2,burstiness=0.25", "give one of cv= and burstiness="),
        ("synthetic:input=512,output=64,cv=0", "cv must be above 0"),
        ("synthetic:input=512,output=64,arrivals=bursty", "arrivals='bursty' is unknown; known"),
        ("synthetic:input=512,output=64,cv=-1", "bad part 'cv=-1'"),
        ("synthetic:input=512,output=64,cv=1e3", "bad part 'cv=1e3'; cv takes a number"),
        ("synthetic:input=512,output=64,turns=x", "bad part 'turns=x'; form:"),
        ("pairs:", "names no file"),
        ("pairs:/no/such/pairs.csv", "is not an existing file"),
        (f"pairs:{PAIRS},order=random", "order='random' is unknown; known: cycle, sample"),
        (f"pairs:{PAIRS},spread=0.5", "bad part 'spread=0.5'"),
        (
            f"pairs:{PAIRS},prefix_groups=2,prefix_len=40",
            "the file's shortest input (33 tokens) must exceed prefix_len=40",
        ),
    ],
)
def test_a_bad_spec_is_one_error_line_naming_the_problem(spec: str, needle: str) -> None:
    with pytest.raises(WorkloadError) as exc:
        parse_workload(spec)
    message = str(exc.value)
    assert needle in message
    assert repr(spec) in message or spec.startswith("pairs:/no/")
    assert "\n" not in message


# ---------------------------------------------------------------------------- lognormal


@pytest.mark.parametrize(("mean", "p99"), [(512, 4096), (128, 1024), (1000, 1500), (64, 900)])
def test_lognormal_sigma_gives_the_asked_mean_and_p99(mean: int, p99: int) -> None:
    sigma = lognormal_sigma(mean, p99)
    mu = math.log(mean) - sigma**2 / 2
    assert math.exp(mu + sigma**2 / 2) == pytest.approx(mean)
    assert math.exp(mu + Z99 * sigma) == pytest.approx(p99)


def test_lognormal_lengths_have_the_asked_mean_and_p99_over_many_draws() -> None:
    wl = synthetic("synthetic:input=512,output=128,in_p99=4096,out_p99=1024")
    rng = random.Random(7)
    draws = [wl.lengths(rng) for _ in range(40_000)]
    ins, outs = [d[0] for d in draws], [d[1] for d in draws]
    assert statistics.fmean(ins) == pytest.approx(512, rel=0.04)
    assert np.percentile(ins, 99) == pytest.approx(4096, rel=0.05)
    assert statistics.fmean(outs) == pytest.approx(128, rel=0.04)
    assert np.percentile(outs, 99) == pytest.approx(1024, rel=0.05)
    assert np.percentile(ins, 50) < 0.6 * 512  # a heavy tail: the median far under the mean
    assert min(ins) == 32 and max(ins) <= 4 * 4096  # clipped to [in_min, in_max]
    assert min(outs) >= 1 and max(outs) <= 4 * 1024
    again = random.Random(7)
    assert [wl.lengths(again) for _ in range(100)] == draws[:100]  # seeded


def test_only_the_length_with_a_p99_is_lognormal() -> None:
    wl = synthetic("synthetic:input=300,output=50,out_p99=400")
    rng = random.Random(1)
    draws = [wl.lengths(rng) for _ in range(500)]
    assert {d[0] for d in draws} == {300}
    assert len({d[1] for d in draws}) > 100


@pytest.mark.parametrize("tok_name", TOKENIZERS)
def test_lognormal_prompts_are_exact(tok_name: str) -> None:
    tok = tokenizer(tok_name)
    wl = synthetic("synthetic:input=200,output=20,in_p99=1500,out_p99=200")
    check_buildable(wl, tok)
    reqs = prepare_requests(wl, 40, model="m", tokenizer=tok, seed=2)
    assert_exact(tok, reqs)
    assert len({r.prompt_tokens for r in reqs}) > 30 and len({r.max_tokens for r in reqs}) > 20
    assert len({p[:16] for p in prompts(reqs)}) == 40  # salted: nothing shared


# ---------------------------------------------------------------------------- prefix groups


@pytest.mark.parametrize("tok_name", TOKENIZERS)
def test_prefix_groups_share_exactly_their_prefix_on_the_asked_share(tok_name: str) -> None:
    tok = tokenizer(tok_name)
    wl = synthetic("synthetic:input=300,output=8,prefix_groups=3,prefix_len=120,prefix_share=0.75")
    check_buildable(wl, tok)
    n = 40
    reqs = prepare_requests(wl, n, model="m", tokenizer=tok, seed=3)
    assert_exact(tok, reqs)
    assert all(r.prompt_tokens == 300 for r in reqs)
    ids = token_ids(tok, reqs)
    texts = prompts(reqs)
    k = len(tok.encode("", add_special_tokens=True)) + 120  # the special tokens and the prefix
    heads = [i[:k] for i in ids]
    counts = {h: heads.count(h) for h in set(heads)}
    groups = [h for h, c in counts.items() if c > 1]
    assert len(groups) == 3  # three distinct system prompts, each on several requests
    members = [j for j in range(n) if heads[j] in groups]
    assert len(members) == math.floor(n * 0.75)  # the share, exactly
    loners = [j for j in range(n) if j not in members]
    # a group's prefix is the same text too; each member goes on with a part of its own
    for g in groups:
        same = [texts[j] for j in members if heads[j] == g]
        prefix = tok.decode(list(g))
        assert all(t.startswith(prefix) for t in same)
        assert len(set(same)) == len(same)
        assert len({i[k : k + 24] for i, h in zip(ids, heads, strict=True) if h == g}) == len(same)
    # the others share nothing with anyone beyond the run's salt (its first 9 characters)
    assert len({texts[j][:16] for j in loners} | {texts[members[0]][:16]}) == len(loners) + 1
    # shared tokens: the prefix, from a group's second request on
    first_of_group = {heads[j]: j for j in reversed(members)}
    for j, r in enumerate(reqs):
        expected = k if j in members and first_of_group[heads[j]] != j else 0
        assert r.shared_tokens == expected
    # salted per run: another seed, other system prompts
    other = token_ids(tok, prepare_requests(wl, n, model="m", tokenizer=tok, seed=4))
    assert not {i[:k] for i in other} & set(groups)


def test_a_prefix_group_of_everyone_by_default() -> None:
    tok = CharTokenizer()
    wl = synthetic("synthetic:input=100,output=8,prefix_groups=1,prefix_len=50")
    reqs = prepare_requests(wl, 10, model="m", tokenizer=tok, seed=0)
    texts = prompts(reqs)
    assert len({t[:50] for t in texts}) == 1 and len({t[:70] for t in texts}) == 10
    assert [r.shared_tokens for r in reqs] == [0] + [51] * 9


def test_a_prompt_too_short_for_its_prefix_and_own_part_is_caught_before_the_run() -> None:
    wl = synthetic("synthetic:input=121,output=8,prefix_groups=1,prefix_len=120")
    with pytest.raises(WorkloadError) as exc:
        check_buildable(wl, CharTokenizer())  # its BOS leaves no token of the request's own
    assert "the shortest that can is 122 tokens" in str(exc.value)
    assert "1 special token" in str(exc.value)
    tok = tokenizer("smollm2")  # no special tokens: one token of its own fits
    check_buildable(wl, tok)
    assert_exact(tok, prepare_requests(wl, 3, model="m", tokenizer=tok, seed=0))


# ---------------------------------------------------------------------------- sessions


@pytest.mark.parametrize("tok_name", TOKENIZERS)
def test_a_sessions_later_turns_carry_its_earlier_ones(tok_name: str) -> None:
    tok = tokenizer(tok_name)
    wl = synthetic("synthetic:input=60,output=10,turns=3,sessions=2")
    check_buildable(wl, tok)
    reqs = prepare_requests(wl, 12, model="m", tokenizer=tok, seed=5)
    assert_exact(tok, reqs)
    ids, texts = token_ids(tok, reqs), prompts(reqs)
    # two sessions side by side: request i's next turn is request i + 2
    assert [r.prompt_tokens for r in reqs] == [60, 60, 130, 130, 200, 200] * 2
    for i in [0, 1, 2, 3, 6, 7, 8, 9]:
        assert texts[i + 2].startswith(texts[i])  # the earlier turn, word for word
        assert ids[i + 2][: len(ids[i])] == ids[i]  # and token for token
        assert reqs[i + 2].shared_tokens == reqs[i].prompt_tokens
    assert [reqs[i].shared_tokens for i in (0, 1, 6, 7)] == [0, 0, 0, 0]
    firsts = [texts[i] for i in (0, 1, 6, 7)]
    assert len({t[:16] for t in firsts}) == 4  # a new session shares nothing
    assert not texts[6].startswith(texts[4][:30])


@pytest.mark.parametrize("tok_name", TOKENIZERS)
def test_sessions_in_prefix_groups_with_drawn_lengths(tok_name: str) -> None:
    tok = tokenizer(tok_name)
    wl = synthetic(
        "synthetic:input=200,output=30,spread=0.3,prefix_groups=2,prefix_len=100,turns=2,sessions=4"
    )
    check_buildable(wl, tok)
    reqs = prepare_requests(wl, 16, model="m", tokenizer=tok, seed=6)
    assert_exact(tok, reqs)
    ids = token_ids(tok, reqs)
    k = len(tok.encode("", add_special_tokens=True)) + 100
    for i in [0, 1, 2, 3, 8, 9, 10, 11]:
        assert ids[i + 4][: len(ids[i])] == ids[i]
        assert reqs[i + 4].shared_tokens == len(ids[i])
        own = len(ids[i + 4]) - len(ids[i]) - reqs[i].max_tokens
        assert 140 <= own <= 260  # the later turn's own input, drawn over the spread
        assert reqs[i].shared_tokens in (0, k)  # a first turn: its group's prefix, if seen
    assert 1 <= len({i[:k] for i in ids}) <= 2  # every session in one of the two groups


# ---------------------------------------------------------------------------- pairs


@pytest.mark.parametrize("tok_name", TOKENIZERS)
def test_pairs_are_sent_in_the_files_order_exactly(tok_name: str) -> None:
    tok = tokenizer(tok_name)
    wl = parse_workload(f"pairs:{PAIRS}")
    assert isinstance(wl, PairsWorkload)
    check_buildable(wl, tok)
    reqs = prepare_requests(wl, 9, model="m", tokenizer=tok, seed=1)
    assert_exact(tok, reqs)
    pairs = [(120, 7), (45, 300), (800, 16), (33, 1)]
    assert [(r.prompt_tokens, r.max_tokens) for r in reqs] == (pairs * 3)[:9]
    assert len({p[:16] for p in prompts(reqs)}) == 9


def test_pairs_drawn_at_random() -> None:
    wl = parse_workload(f"pairs:{PAIRS},order=sample")
    reqs = prepare_requests(wl, 200, model="m", tokenizer=CharTokenizer(), seed=1)
    got = [(r.prompt_tokens, r.max_tokens) for r in reqs]
    assert set(got) == {(120, 7), (45, 300), (800, 16), (33, 1)}
    assert got[:8] != [(120, 7), (45, 300), (800, 16), (33, 1)] * 2
    assert all(40 <= got.count(p) <= 60 for p in set(got))


def test_pairs_from_jsonl_with_usage_names_and_prompts_too_short_for_a_salt(
    tmp_path: Path,
) -> None:
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"prompt_tokens": 3, "completion_tokens": 5}\n'
        '{"prompt_tokens": 90, "completion_tokens": 1}\n'
    )
    tok = CharTokenizer()
    wl = parse_workload(f"pairs:{f}")
    check_buildable(wl, tok)
    reqs = prepare_requests(wl, 2, model="m", tokenizer=tok, seed=0)
    assert_exact(tok, reqs)
    assert [r.prompt_tokens for r in reqs] == [3, 90]
    assert not prompts(reqs)[0].startswith("[")  # two characters: no room for the salt
    assert prompts(reqs)[1].startswith("[")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("in,out\n1,2\n", "no column 'input' (or input_tokens"),
        ("input,tokens\n1,2\n", "no column 'output' (or output_tokens"),
        ("input,output\n1,2\nx,3\n", ":3: input must be a whole number, got 'x'"),
        ("input,output\n0,2\n", ":2: input must be at least 1"),
        ("input,output\n1,\n", ":2: no value for 'output'"),
        ("input,output\n", "no requests in the file"),
        ('{"input": 5, "output": 1}\n[1, 2]\n', ":2: not a JSON object"),
        ('{"input": 5, "output": 2.5}\n', ":1: output must be a whole number"),
    ],
)
def test_a_bad_pairs_file_is_one_error_naming_the_file(
    tmp_path: Path, text: str, needle: str
) -> None:
    f = tmp_path / ("p.jsonl" if text.startswith("{") else "p.csv")
    f.write_text(text)
    with pytest.raises(WorkloadError) as exc:
        parse_workload(f"pairs:{f}")
    assert needle in str(exc.value) and str(f) in str(exc.value)
    assert "\n" not in str(exc.value)


def test_new_kinds_need_the_tokenizer() -> None:
    for spec in (f"pairs:{PAIRS}", "synthetic:input=64,output=8,prefix_groups=1,prefix_len=9"):
        wl = parse_workload(spec)
        with pytest.raises(WorkloadError, match=f"a {wl.kind} workload needs the model's"):
            check_buildable(wl, None)
        with pytest.raises(WorkloadError, match=f"a {wl.kind} workload needs the model's"):
            prepare_requests(wl, 1, model="m", tokenizer=None, seed=0)


# ---------------------------------------------------------------------------- describe


def test_describe_says_what_was_sent_and_the_prefix_share() -> None:
    tok = CharTokenizer()
    spec = "synthetic:input=300,output=8,prefix_groups=3,prefix_len=120,prefix_share=0.75"
    wl = synthetic(spec)
    reqs = prepare_requests(wl, 40, model="m", tokenizer=tok, seed=3)
    d = describe(wl, reqs)
    json.dumps(d)  # JSON-ready: plain numbers and strings
    assert d["kind"] == "synthetic" and d["spec"] == spec
    assert parse_workload(d["spec"]) == wl
    assert d["parameters"]["prefix"] == {"groups": 3, "length": 120, "share": 0.75}
    assert d["parameters"]["input_len"] == 300 and d["parameters"]["input_dist"] is None
    sent = d["sent"]
    assert sent["requests"] == 40
    assert sent["input_tokens"] == {"mean": 300.0, "p50": 300.0, "p99": 300.0}
    assert sent["output_tokens"] == {"mean": 8.0, "p50": 8.0, "p99": 8.0}
    # 30 members in 3 groups: all but each group's first reuse BOS and the 120-token prefix
    assert sent["prefix_share"] == pytest.approx((30 - 3) * 121 / (40 * 300))


def test_describe_drawn_lengths_and_sessions() -> None:
    tok = CharTokenizer()
    wl = synthetic("synthetic:input=100,output=20,in_p99=700,turns=2,sessions=1")
    reqs = prepare_requests(wl, 50, model="m", tokenizer=tok, seed=8)
    d = describe(wl, reqs)
    ins = [r.prompt_tokens for r in reqs]
    assert d["sent"]["input_tokens"]["mean"] == pytest.approx(np.mean(ins))
    assert d["sent"]["input_tokens"]["p99"] == pytest.approx(np.percentile(ins, 99))
    shared = sum(ins[i] for i in range(0, 50, 2))  # each second turn reuses the first whole
    assert d["sent"]["prefix_share"] == pytest.approx(shared / sum(ins))
    assert d["parameters"]["input_dist"]["p99"] == 700
    assert d["parameters"]["sessions"] == {"turns": 2, "width": 1}


def test_describe_pairs_and_a_file_of_prompts() -> None:
    wl = parse_workload(f"pairs:{PAIRS}")
    d = describe(wl, prepare_requests(wl, 4, model="m", tokenizer=CharTokenizer(), seed=0))
    assert d["parameters"] == {
        "path": str(PAIRS),
        "pairs": 4,
        "order": "cycle",
        "prefix": None,
        "sessions": None,
        "arrivals": None,
    }
    assert d["sent"]["input_tokens"]["mean"] == pytest.approx((120 + 45 + 800 + 33) / 4)
    assert d["sent"]["prefix_share"] == 0.0
    f = FileWorkload(path="w.jsonl", items=(FileItem(prompt="hi", max_tokens=3),))
    d2: dict[str, Any] = describe(f, prepare_requests(f, 2, model="m", tokenizer=None, seed=0))
    assert d2["parameters"] == {"path": "w.jsonl", "items": 1}
    assert d2["sent"]["input_tokens"] is None and d2["sent"]["prefix_share"] is None
    assert d2["sent"]["output_tokens"]["mean"] == 3.0
