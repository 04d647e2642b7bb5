"""The prompts of the workloads that share prefixes on purpose, or take their lengths from a
file or a trace: which text each request sends, and how many of its tokens an earlier request
of the set starts with too.

Every prompt has exactly its request's number of tokens (probes.prompts builds and checks the
text); where it extends another (a session's turn), or starts with shared segments (a prefix
group's system prompt, a trace's prefix blocks), those tokens are unchanged. A request's own
part carries its salt, so nothing is shared by accident; a generated prompt of a pairs file or
a trace too short for the salt goes without it (see ``PromptBuilder.fresh``).
"""

from __future__ import annotations

from collections.abc import Callable

from probes.kinds import Generated, PreparedRequest, SyntheticWorkload
from probes.prompts import Prompt, PromptBuilder
from probes.trace import TraceWorkload

# (prompt text, its tokens, the output tokens asked, its shared tokens) -> the request
Emit = Callable[[str, int, int, int], PreparedRequest]


def prepare_generated(
    wl: Generated, n: int, builder: PromptBuilder, run_salt: str, emit: Emit
) -> list[PreparedRequest]:
    """``n`` requests of a synthetic or pairs workload, with its prefix groups and sessions.

    A session's first turn is built like any request (in a group or not); its later turns
    extend the turn before by that turn's output (a stand-in for its answer) and their own
    drawn input. Lengths are drawn in request order from ``builder.rng``.
    """
    rng = builder.rng
    seen_groups: set[int] = set()
    last_turn: dict[int, tuple[Prompt, int]] = {}  # session -> its latest prompt and output
    out: list[PreparedRequest] = []
    for i in range(n):
        n_in, n_out = wl.lengths(rng) if isinstance(wl, SyntheticWorkload) else wl.pair(i, rng)
        salt = f"[{run_salt}-{i}] "
        session, turn = wl.sessions.place(i) if wl.sessions else (i, 0)
        group = wl.prefix.pick(session, rng) if wl.prefix and turn == 0 else None
        if turn > 0:
            before, answer = last_turn.pop(session)
            prompt = builder.extend(before, answer + n_in)
            shared = len(before.ids)
        elif wl.prefix is not None and group is not None:
            head = builder.shared([(f"{run_salt}:g{group}", wl.prefix.length)], check=False)
            prompt = builder.extend(head, n_in - len(head.ids), salt)
            shared = len(head.ids) if group in seen_groups else 0
            seen_groups.add(group)
        else:
            optional = not isinstance(wl, SyntheticWorkload)
            prompt = builder.fresh(n_in, salt, salt_optional=optional)
            shared = 0
        if wl.sessions and turn + 1 < wl.sessions.turns:
            last_turn[session] = (prompt, n_out)
        out.append(emit(prompt.text, len(prompt.ids), n_out, shared))
    return out


def prepare_trace(
    wl: TraceWorkload, n: int, builder: PromptBuilder, run_salt: str, emit: Emit
) -> list[PreparedRequest]:
    """``n`` requests of a trace, its rows in time order (cycled past its end).

    A row's first hash ids that fit whole in its input become shared blocks of ``wl.block``
    tokens, each the same text wherever its id is (after the same ids before it, as the
    trace's chained ids are); the rest of the input is the request's own.
    """
    n_special = len(builder.specials)
    seen: set[int] = set()  # the block chains sent so far, each as the hash of its ids
    out: list[PreparedRequest] = []
    for i in range(n):
        row = wl.rows[i % len(wl.rows)]
        k = min(len(row.hash_ids), (row.input - n_special) // wl.block)
        if k <= 0:
            prompt = builder.fresh(row.input, f"[{run_salt}-{i}] ", salt_optional=True)
            out.append(emit(prompt.text, len(prompt.ids), row.output, 0))
            continue
        chain = row.hash_ids[:k]
        tail = row.input - n_special - k * wl.block
        head = builder.shared([(f"{run_salt}#{h}", wl.block) for h in chain], check=tail == 0)
        prompt = head if tail == 0 else builder.extend(head, tail)
        keys, key = [], 0
        for h in chain:
            key = hash((key, h))
            keys.append(key)
        reused = next((j for j, c in enumerate(keys) if c not in seen), k)
        seen.update(keys)
        shared = n_special + reused * wl.block if reused else 0
        out.append(emit(prompt.text, len(prompt.ids), row.output, shared))
    return out
