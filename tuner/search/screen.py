"""An Optuna search on the serving model instead of the engine: hundreds of candidates in
seconds, each scored by its predicted capacity (tuner/servemodel/predict.py).

Only the knobs the model simulates are searched (the build stays fixed: a build's step times
come from measuring it). The study is in memory and thrown away; what it found is handed back
as a ranked list for the guide (tuner/search/guide.py) to choose from. A configuration the engine
would refuse (the space's rules) is told as infeasible, as in the measured search.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any

import optuna

from tuner.search.study import _sample_knobs, distribution
from tuner.spaces.knob import Knob

SCREEN_RESOLUTION = 0.05  # a screened candidate's capacity is bracketed this finely (the tie band)
# Seconds of arrivals per simulated point of a screened candidate: a screen ranks, and its best
# two are predicted again with the full horizon and the bootstrap before one is chosen.
SCREEN_HORIZON_S = 15.0

optuna.logging.set_verbosity(logging.WARNING)


MAX_ASKS = 4  # asks per distinct setting wanted, at most (a small space runs out of new ones)
# Settings asked of the sampler at once and scored side by side (tuner/search/parallel.py): the
# same on every machine, so that a screen's sequence does not depend on its cores. The sampler
# is a constant liar: the settings of a batch not scored yet count as bad ones, so that one
# batch does not ask the same region four times.
BATCH = 4


def screen(
    knobs: list[Knob],
    score: Callable[[list[dict[str, Any]]], list[float | None]],
    *,
    n_trials: int,
    seed: int,
    seeds: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> list[tuple[dict[str, Any], float]]:
    """Search ``knobs`` for the highest ``score`` (None: refused or not simulable).

    Args:
        knobs: the simulated knobs of one stage.
        score: the predicted tokens/s of each of a batch of settings of ``knobs`` (at most
            ``BATCH``, each distinct and never scored before), in their order.
        n_trials: distinct settings to score, the seeds included (the sampler repeats some:
            a repeat is told its score again and not counted, up to ``MAX_ASKS`` x
            ``n_trials`` asks in all).
        seed: the sampler's seed (a screen is reproducible).
        seeds: settings scored first (the defaults, the best measured so far).

    Returns:
        Every distinct setting scored, best first.
    """
    if not knobs:
        return []
    dists = {k.name: distribution(k) for k in knobs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        sampler = optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=10, multivariate=True, constant_liar=True
        )
    study = optuna.create_study(direction="maximize", sampler=sampler)
    names = set(dists)
    for s in seeds:
        study.enqueue_trial({k: v for k, v in s.items() if k in names}, skip_if_exists=True)
    scored: dict[tuple, tuple[dict[str, Any], float]] = {}
    refused: set[tuple] = set()
    asks = 0
    while len(scored) < n_trials and asks < MAX_ASKS * n_trials:
        batch = []
        for _ in range(min(BATCH, n_trials - len(scored), MAX_ASKS * n_trials - asks)):
            trial = study.ask()
            params = _sample_knobs(trial, knobs, dists)
            batch.append((trial, params, tuple(sorted((k, repr(v)) for k, v in params.items()))))
            asks += 1
        new: dict[tuple, dict[str, Any]] = {}
        for _, params, key in batch:
            if key not in scored and key not in refused:
                new.setdefault(key, params)
        values = score(list(new.values())) if new else []
        for (key, params), value in zip(new.items(), values, strict=True):
            if value is None:
                refused.add(key)
            else:
                scored[key] = (params, value)
        for trial, _, key in batch:
            if key in scored:
                study.tell(trial, scored[key][1])
            else:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return sorted(scored.values(), key=lambda pv: -pv[1])


# Settings that score within this share of a screen's best are ties: among them, the one with
# the more room (the more sequences the engine can hold at once: its batch limit, or what its KV
# cache holds where that is less) ranks first. A screen's predictions of one setting move by up
# to 10 % with the path of its bracket (the README command on the AMD box, 2026-12-07 13:05: 146
# sequences at 3.60 and 4.12 requests/s in two predictions of the baseline's build), so the
# limits a slow build leaves idle were picked at random, and the low ones (146 and 153
# sequences, two runs) then bound trials of a build 1.7x faster: 5.66 requests/s measured at
# 146 where the model calibrated on it gave 6.4 at 200-445. A batch limit above what the cache
# holds is no room: at 13:19, 509 sequences with a 1 GiB cache (about 180 requests of 192
# tokens) broke at 5.5 requests/s under vLLM's own client.
HEADROOM_BAND = 0.10


def with_headroom(
    ranked: list[tuple[dict[str, Any], float]], room: Callable[[dict[str, Any]], float]
) -> list[tuple[dict[str, Any], float]]:
    """``ranked`` (a screen's settings, best first) with its ties (within ``HEADROOM_BAND``
    of the best) ordered by ``room``, the most first."""
    if not ranked:
        return ranked
    top = ranked[0][1]
    ties = [r for r in ranked if r[1] >= top * (1.0 - HEADROOM_BAND)]
    rest = [r for r in ranked if r[1] < top * (1.0 - HEADROOM_BAND)]
    return sorted(ties, key=lambda r: (room(r[0]), r[1]), reverse=True) + rest
