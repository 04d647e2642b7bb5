"""A build's step model, fitted from the per-request records of its measured points.

No engine series is needed: the records the load client writes say enough.

- **A decoding request is in every step.** From its first token to its last, request ``i``
  takes part in each of the ``n_out - 1`` steps that produce its other tokens, so
  ``t_last - t_first`` is the sum of those steps' times. What the steps computed is read off
  the other requests' records over the same interval: each request ``j`` decoding beside it
  adds the tokens it produced in the overlap (its own token rate times the overlap), each one
  attending to its prompt and the tokens before it, and each request whose first token came
  inside the interval adds its prompt (prefilled in the step that gave its first token). The
  sum of the step formula over those steps is linear in the coefficients: one observation per
  request. How many of those steps computed prompts (``prefill_steps``) is counted from the
  first-token times of the requests prefilled in it: the first tokens of one step reach the
  client together, so times closer than half the interval's mean step are one step.
- **An idle server shows the overhead.** A request sent while no other was in flight waits for
  nothing but its own prefill step: its TTFT is ``overhead_s`` plus one step of ``n_in``
  tokens. Those requests (every request of a concurrency-1 sweep, a few at light load) are
  observations with the overhead column set.

Both kinds go to ``steptime.fit_steps`` together.

- **A prefix cache computes a shared prefix once.** Where the build caches prefixes (``block``:
  its cache block, in tokens), a request's prompt tokens shared with others (its record's
  ``n_prompt_shared``) were computed by an earlier request, in whole blocks (and never the
  prompt's last token), as the scheduler simulates them (tuner/servemodel/scheduler.py): its
  prefill counts only the rest, attending to the cached tokens before it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from probes.records import RequestRecord
from tuner.servemodel.steptime import Observation, StepModel, attention_pairs, fit_steps

IDLE_TOLERANCE_S = 1e-3
MIN_DECODE_TOKENS = 3  # a request with fewer output tokens spans too few steps to say much
STEP_SHARE = 0.5  # first tokens closer than this share of a mean step came from one step


def cached_tokens(r: RequestRecord, block: int | None) -> int:
    """The prompt tokens of ``r`` a prefix cache of ``block``-token blocks held (None: no
    cache): its shared prefix in whole blocks, never the prompt's last token."""
    n = int(r.n_prompt or 0)
    if block is None or not r.n_prompt_shared or n < 2:
        return 0
    return (min(int(r.n_prompt_shared), n - 1) // block) * block


def decode_observations(
    records: Sequence[RequestRecord], block: int | None = None
) -> list[Observation]:
    """One observation per completed request with at least ``MIN_DECODE_TOKENS`` outputs;
    ``block``: the build's prefix cache block (None: no cache)."""
    ok = [r for r in records if r.ok and r.n_out >= 1 and r.n_prompt]
    if not ok:
        return []
    tf = np.array([r.t_first for r in ok])
    tl = np.array([r.t_last for r in ok])
    nin = np.array([float(r.n_prompt or 0) for r in ok])
    cached = np.array([float(cached_tokens(r, block)) for r in ok])
    nout = np.array([float(r.n_out) for r in ok])
    span = tl - tf
    rate = np.where(span > 0, (nout - 1) / np.where(span > 0, span, 1.0), 0.0)
    out: list[Observation] = []
    for i in np.nonzero((nout >= MIN_DECODE_TOKENS) & (span > 0))[0]:
        lo, hi = tf[i], tl[i]
        overlap = np.clip(np.minimum(hi, tl) - np.maximum(lo, tf), 0.0, None)
        decoded = overlap * rate  # tokens each request produced inside i's interval
        # each such token attends to its prompt and the outputs before it (taken mid-overlap)
        mid = np.maximum(lo, tf) + overlap / 2.0
        ctx = nin + 1.0 + (mid - tf) * rate
        prefilled = (tf > lo) & (tf <= hi)
        p_tokens = nin[prefilled] - cached[prefilled]
        p_cached = cached[prefilled]
        firsts = np.sort(tf[prefilled])
        gap = STEP_SHARE * span[i] / (nout[i] - 1)
        p_steps = float(len(firsts) and 1 + np.count_nonzero(np.diff(firsts) >= gap))
        out.append(
            Observation(
                duration_s=float(span[i]),
                steps=float(nout[i] - 1),
                prefill_tokens=float(p_tokens.sum()),
                decode_seqs=float(decoded.sum()),
                ctx_ktokens=float((decoded * ctx).sum()) / 1000.0,
                prefill_kpairs=sum(
                    attention_pairs(int(c), int(p)) for c, p in zip(p_cached, p_tokens, strict=True)
                )
                / 1000.0,
                prefill_steps=p_steps,
            )
        )
    return out


def idle_observations(
    records: Sequence[RequestRecord], block: int | None = None
) -> list[Observation]:
    """A TTFT observation for each request sent while no other request was in flight;
    ``block``: the build's prefix cache block (None: no cache)."""
    ok = [r for r in records if r.ok and r.n_prompt]
    if not ok:
        return []
    ok.sort(key=lambda r: r.t_sched)
    out: list[Observation] = []
    busy_until = -np.inf
    for r in ok:
        # a closed loop schedules the next request the moment the last one ended: idle too
        if r.t_sched >= busy_until - IDLE_TOLERANCE_S:
            n, c = int(r.n_prompt or 0), cached_tokens(r, block)
            out.append(
                Observation(
                    duration_s=r.ttft_s,
                    steps=1.0,
                    prefill_tokens=float(n - c),
                    decode_seqs=0.0,
                    ctx_ktokens=0.0,
                    prefill_kpairs=attention_pairs(c, n - c) / 1000.0,
                    overhead=1.0,
                    prefill_steps=1.0,
                )
            )
        busy_until = max(busy_until, r.t_end if np.isfinite(r.t_end) else r.t_last)
    return out


def calibrate(points: Sequence[Sequence[RequestRecord]], block: int | None = None) -> StepModel:
    """The step model of one build from the records of its measured points; ``block``: its
    prefix cache block (None: it caches no prefix).

    Raises:
        steptime.FitError: too few usable requests.
    """
    obs: list[Observation] = []
    for records in points:
        obs += decode_observations(records, block)
        obs += idle_observations(records, block)
    return fit_steps(obs)
