"""How long a request waits, under load, before the engine sees it: fitted by replay.

A step model fitted on decoding spans and idle TTFTs (tuner/servemodel/calibrate.py) times the
steps well, yet the measured TTFT under load is longer than the simulation's: the front end
that tokenises a new request and hands it to the engine is the process that detokenises and
streams every running sequence's outputs, on the same cores, so the busier the batch the later
the request reaches the scheduler, and the more often it misses the step it would have joined.
Replayed with their own arrival times and lengths, the README command's points on the AMD and
Xeon boxes (2026-12-06 and 07, 5,261 requests) put the measured TTFT over the simulated one by
a median of 3 ms with under 10 requests running, 123 ms with 30-60, 138 ms with 60-100 and
271 ms with 100-200: about 1.7 ms for each running request, while the simulated TPOT matched
the measured one within a few per cent.

``StepModel.admit_per_seq_s`` is that delay per running request (tuner/servemodel/scheduler.py
applies it). It is fitted here by replay: each measured point's requests, sent at their own
times with their own lengths, are simulated with their build's step model, and the delay is
the one under which the simulated TTFTs add up to the measured ones (a delay of ``d`` adds
about ``d`` to a request's mean TTFT: it misses the next step with a probability of ``d`` over
the step's time). One correction after the first estimate settles it.

A point with a failed request is not replayed: without it the simulation would carry less load
than the server did, and read the difference as delay. Only the trials' points are replayed:
the probe's closed loops send every client's first prompt at once, a burst of prefills the
step model is not fitted for (replayed, the baseline's TTFTs there came out up to 1.5 s over
the simulated ones with nothing yet running, which would read as a delay of 13 ms a request).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from probes.records import RequestRecord
from tuner.servemodel.scheduler import Arrival, Knobs, SimulationError, StepTrace, simulate
from tuner.servemodel.steptime import StepModel

ROUNDS = 2  # the first estimate, and one correction
MAX_ADMIT_S = 0.05  # per running request: far above anything measured (1.7 ms)


@dataclass(frozen=True)
class Replay:
    """One measured point to replay: its requests' records and the knobs it ran with."""

    records: Sequence[RequestRecord]
    knobs: Knobs


def arrivals_of(records: Sequence[RequestRecord]) -> tuple[list[Arrival], list[float]]:
    """The completed requests of a point as arrivals in the order they were sent (from the
    first one's time), and their measured TTFTs (seconds) in the same order."""
    ok = sorted(
        (r for r in records if r.ok and r.n_prompt and r.n_out >= 1 and math.isfinite(r.t_first)),
        key=lambda r: r.t_sched,
    )
    if not ok:
        return [], []
    t0 = ok[0].t_sched
    arrivals = [
        Arrival(r.t_sched - t0, int(r.n_prompt or 0), r.n_out, int(r.n_prompt_shared or 0))
        for r in ok
    ]
    return arrivals, [r.ttft_s for r in ok]


def _gaps(step: StepModel, replays: Sequence[Replay]) -> tuple[float, float]:
    """Summed over every replayed request: measured minus simulated TTFT (seconds), and the
    requests running when it arrived."""
    gap = running = 0.0
    for rp in replays:
        if not all(r.ok for r in rp.records):
            continue  # replayed without its failed requests it would carry less than it did
        arrivals, measured = arrivals_of(rp.records)
        if not arrivals:
            continue
        trace = StepTrace()
        try:
            sim = simulate(arrivals, rp.knobs, step, trace=trace)
        except SimulationError:
            continue
        for s, m in zip(sim, measured, strict=True):
            if math.isfinite(s.t_first):
                gap += m - s.ttft_s
                running += trace.running_at_arrival.get(s.index, 0)
    return gap, running


def fit_admission(
    builds: Sequence[tuple[StepModel, Sequence[Replay]]],
    start: float = 0.0,
    rounds: int = ROUNDS,
) -> float:
    """The admission delay per running request (seconds) that makes the replayed TTFTs of
    ``builds`` (each build's step model and its measured points) add up to the measured ones;
    0 where no replayed request arrived beside a running one.

    ``start``, ``rounds``: the estimate corrected from, and how many times (a refit from the
    run's own delay needs one).

    One delay serves every build of a run: the front end is the machine's and the model's,
    and a build measured at light load alone (a trial's first point, a few dozen requests
    running) says little of it, where another build's heavy points say much.
    """
    admit = start
    for _ in range(rounds):
        gap = running = 0.0
        for step, replays in builds:
            g, r = _gaps(step.model_copy(update={"admit_per_seq_s": admit}), replays)
            gap, running = gap + g, running + r
        if running <= 0:
            return 0.0
        admit = min(MAX_ADMIT_S, max(0.0, admit + gap / running))
    return admit
