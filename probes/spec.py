"""Parsing ``--workload`` specs of the generated kinds: ``synthetic:``, ``pairs:``, ``trace:``.

A spec is a kind, a colon, and comma-separated ``key=value`` parts (a file first, for pairs
and traces: its name holds no comma). Every mistake is one ``WorkloadError`` line that names
the spec and the part at fault. The grammar is in probes/workload.py's docstring.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from probes.arrivals import Gamma
from probes.kinds import MIN_OWN_TOKENS, PairsWorkload, SyntheticWorkload
from probes.lengths import LogNormal, check_lognormal, load_pairs
from probes.prefixes import PrefixGroups, Sessions
from probes.prompts import WorkloadError
from probes.trace import TraceWorkload, load_trace

SYN_FORM = "synthetic:input=128,output=64[,spread=0.5]"
DEFAULT_MAX_RATIO = 4  # a lognormal length is clipped to 4 x its p99 unless in_max/out_max say
_PART = re.compile(r"\s*(\w+)\s*=\s*([\w.]+)\s*")
_FLOAT = re.compile(r"\d+(?:\.\d+)?")
_INT = re.compile(r"\d+")

Kinds = dict[str, str | tuple[str, ...]]  # key: "int", "float", or the values it may take
SHAPE_KEYS: Kinds = {
    "prefix_groups": "int",
    "prefix_len": "int",
    "prefix_share": "float",
    "turns": "int",
    "sessions": "int",
    "arrivals": ("poisson", "gamma"),
    "cv": "float",
    "burstiness": "float",
}
SYN_KEYS: Kinds = {
    "input": "int",
    "output": "int",
    "spread": "float",
    "dist": ("fixed", "uniform", "lognormal"),
    **{f"{side}_{k}": "int" for side in ("in", "out") for k in ("p99", "min", "max")},
    **SHAPE_KEYS,
}
PAIRS_KEYS: Kinds = {"order": ("cycle", "sample"), **SHAPE_KEYS}
TRACE_KEYS: Kinds = {"scale": "float", "block": "int"}
_HINTS = {"p99": "say which length: in_p99= and/or out_p99="}


def parts(spec: str, body: str, kinds: Kinds, form: str) -> dict[str, Any]:
    """The ``key=value`` parts of ``body``, typed (the last of a repeated key counts).

    Raises:
        WorkloadError: the first bad part, with the form and the keys.
    """
    values: dict[str, Any] = {}
    for part in filter(None, body.split(",")):
        m = _PART.fullmatch(part)
        if m and m[1] in _HINTS:
            raise WorkloadError(f"workload {spec!r}: {m[1]}= is ambiguous; {_HINTS[m[1]]}")
        kind = kinds.get(m[1]) if m else None
        if m is None or kind is None or (kind == "int" and not _INT.fullmatch(m[2])):
            raise WorkloadError(
                f"workload {spec!r}: bad part {part!r}; form: {form}; keys: {', '.join(kinds)}"
            )
        key, value = m[1], m[2]
        if kind == "float" and not _FLOAT.fullmatch(value):
            raise WorkloadError(f"workload {spec!r}: bad part {part!r}; {key} takes a number")
        if isinstance(kind, tuple) and value not in kind:
            raise WorkloadError(
                f"workload {spec!r}: {key}={value!r} is unknown; known: {', '.join(kind)}"
            )
        if key == "spread" and not 0.0 <= float(value) < 1.0:
            raise WorkloadError(f"workload {spec!r}: spread must be in [0, 1), e.g. 0.5")
        values[key] = int(value) if kind == "int" else float(value) if kind == "float" else value
    return values


def parse_synthetic(spec: str) -> SyntheticWorkload:
    """``synthetic:input=N,output=M[,...]``.

    Raises:
        WorkloadError: naming the spec and what is wrong with it.
    """
    v = parts(spec, spec[len("synthetic") :].lstrip(":"), SYN_KEYS, SYN_FORM)
    missing = [k for k in ("input", "output") if k not in v]
    if missing:
        raise WorkloadError(f"workload {spec!r} lacks {', '.join(missing)}")
    if min(v["input"], v["output"]) <= 0:
        raise WorkloadError(f"workload {spec!r}: lengths must be positive")
    prefix, sessions, arrivals = _shape(spec, v)
    spread = v.get("spread", 0.0)
    lognormal = [k for k in v if k.startswith(("in_", "out_"))]
    dist = v.get("dist")
    if spread and lognormal:
        raise WorkloadError(
            f"workload {spec!r}: spread (uniform lengths) and {lognormal[0]} (lognormal) do not mix"
        )
    if dist == "fixed" and (spread or lognormal):
        extra = "spread" if spread else lognormal[0]
        raise WorkloadError(f"workload {spec!r}: dist=fixed takes no {extra}")
    if dist == "uniform" and not spread:
        raise WorkloadError(f"workload {spec!r}: dist=uniform needs spread= (e.g. 0.5)")
    if dist == "lognormal" and "in_p99" not in v and "out_p99" not in v:
        raise WorkloadError(f"workload {spec!r}: dist=lognormal needs in_p99= and/or out_p99=")
    floor = MIN_OWN_TOKENS + (prefix.length if prefix else 0)
    wl = SyntheticWorkload(
        input_len=v["input"],
        output_len=v["output"],
        spread=spread,
        input_dist=_lognormal(spec, v, "in", v["input"], floor),
        output_dist=_lognormal(spec, v, "out", v["output"], 1),
        prefix=prefix,
        sessions=sessions,
        arrivals=arrivals,
    )
    if prefix and wl.shortest_input <= prefix.length:
        drawn = (
            f"input={wl.input_len}"
            if wl.shortest_input == wl.input_len
            else f"in_min={wl.shortest_input}"
            if wl.input_dist
            else f"the shortest input with the spread ({wl.shortest_input})"
        )
        raise WorkloadError(
            f"workload {spec!r}: {drawn} must exceed prefix_len={prefix.length} (each "
            "prefix-group prompt starts with its shared prefix, then a part of its own)"
        )
    return wl


def _lognormal(spec: str, v: dict[str, Any], side: str, mean: int, floor: int) -> LogNormal | None:
    """The lognormal of one length, where its keys ask for one."""
    keys = [k for k in v if k.startswith(f"{side}_")]
    if not keys:
        return None
    mean_key = "input" if side == "in" else "output"
    if f"{side}_p99" not in v:
        raise WorkloadError(
            f"workload {spec!r}: {keys[0]} applies to a lognormal {mean_key}; give {side}_p99="
        )
    p99 = v[f"{side}_p99"]
    lo = v.get(f"{side}_min", floor)
    hi = v.get(f"{side}_max", DEFAULT_MAX_RATIO * p99)
    if not lo < mean and f"{side}_min" not in v:
        raise WorkloadError(
            f"workload {spec!r}: a lognormal {mean_key} is clipped to at least {lo} tokens by "
            f"default, which must be below the mean {mean_key}={mean}; give {side}_min="
        )
    if lo < 1:
        raise WorkloadError(f"workload {spec!r}: {side}_min must be at least 1")
    try:
        check_lognormal(side, mean, p99, lo, hi)
    except WorkloadError as exc:
        raise WorkloadError(f"workload {spec!r}: {exc}") from None
    return LogNormal(mean=mean, p99=p99, lo=lo, hi=hi)


def _shape(
    spec: str, v: dict[str, Any]
) -> tuple[PrefixGroups | None, Sessions | None, Gamma | None]:
    """The options every generated workload takes: prefix groups, sessions, arrivals."""
    prefix = None
    if any(k.startswith("prefix_") for k in v):
        if "prefix_groups" not in v or "prefix_len" not in v:
            raise WorkloadError(
                f"workload {spec!r}: prefix groups need prefix_groups= and prefix_len= (e.g. "
                "prefix_groups=4,prefix_len=256[,prefix_share=0.8])"
            )
        share = v.get("prefix_share", 1.0)
        if min(v["prefix_groups"], v["prefix_len"]) < 1 or not 0.0 < share <= 1.0:
            raise WorkloadError(
                f"workload {spec!r}: prefix_groups and prefix_len must be at least 1 and "
                "prefix_share in (0, 1]"
            )
        prefix = PrefixGroups(groups=v["prefix_groups"], length=v["prefix_len"], share=share)
    sessions = None
    if "sessions" in v and "turns" not in v:
        raise WorkloadError(f"workload {spec!r}: sessions= (side by side) needs turns=")
    if "turns" in v:
        width = v.get("sessions", Sessions.model_fields["width"].default)
        if v["turns"] < 1 or width < 1:
            raise WorkloadError(f"workload {spec!r}: turns and sessions must be at least 1")
        sessions = Sessions(turns=v["turns"], width=width) if v["turns"] > 1 else None
    arrivals = None
    given = [k for k in ("cv", "burstiness") if k in v]
    if v.get("arrivals") == "poisson" and given:
        raise WorkloadError(f"workload {spec!r}: {given[0]}= is for arrivals=gamma")
    if v.get("arrivals") == "gamma" and not given:
        raise WorkloadError(
            f"workload {spec!r}: arrivals=gamma needs cv= (e.g. 2) or burstiness= (vLLM's, 1/cv²)"
        )
    if len(given) == 2:
        raise WorkloadError(f"workload {spec!r}: give one of cv= and burstiness= (1/cv²)")
    if given:
        x = v[given[0]]
        if x <= 0:
            raise WorkloadError(f"workload {spec!r}: {given[0]} must be above 0")
        arrivals = Gamma(cv=x if given[0] == "cv" else 1.0 / math.sqrt(x))
    return prefix, sessions, arrivals


def _file_and_rest(spec: str, kind: str, form: str) -> tuple[Path, str]:
    path, _, rest = spec[len(kind) + 1 :].partition(",")
    if not path.strip():
        raise WorkloadError(f"workload {spec!r} names no file; form: {form}")
    return Path(path.strip()), rest


def parse_pairs(spec: str) -> PairsWorkload:
    """``pairs:FILE[,order=sample][,...]``.

    Raises:
        WorkloadError: naming the spec, or the file and its line.
    """
    form = "pairs:FILE[,order=cycle|sample]"
    path, rest = _file_and_rest(spec, "pairs", form)
    v = parts(spec, rest, PAIRS_KEYS, form)
    prefix, sessions, arrivals = _shape(spec, v)
    wl = PairsWorkload(
        path=str(path),
        pairs=load_pairs(path),
        order=v.get("order", "cycle"),
        prefix=prefix,
        sessions=sessions,
        arrivals=arrivals,
    )
    if prefix and wl.shortest_input <= prefix.length:
        raise WorkloadError(
            f"workload {spec!r}: the file's shortest input ({wl.shortest_input} tokens) must "
            f"exceed prefix_len={prefix.length} (each prefix-group prompt starts with its "
            "shared prefix, then a part of its own)"
        )
    return wl


def parse_trace(spec: str) -> TraceWorkload:
    """``trace:FILE[,scale=S][,block=B]``.

    Raises:
        WorkloadError: naming the spec, or the file and its line or missing column.
    """
    form = "trace:FILE[,scale=1.0][,block=512]"
    path, rest = _file_and_rest(spec, "trace", form)
    v = parts(spec, rest, TRACE_KEYS, form)
    if v.get("scale", 1.0) <= 0 or v.get("block", 1) < 1:
        raise WorkloadError(f"workload {spec!r}: scale must be above 0 and block at least 1")
    return load_trace(path, scale=v.get("scale", 1.0), block=v.get("block", 512))
