"""An Optuna search on the serving model instead of the engine: hundreds of candidates in
seconds, each scored by its predicted capacity (tuner/servemodel/predict.py).

Only the knobs the model simulates are searched (the build stays fixed: a build's step times
come from measuring it). The study is in memory and thrown away; what it found is handed back
as a ranked list for the guide (tuner/search/guide.py) to choose from. A configuration the engine
would refuse (the space's rules) is told as infeasible, as in the measured search.
"""

from __future__ import annotations

import logging
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


def screen(
    knobs: list[Knob],
    score: Callable[[dict[str, Any]], float | None],
    *,
    n_trials: int,
    seed: int,
    seeds: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> list[tuple[dict[str, Any], float]]:
    """Search ``knobs`` for the highest ``score`` (None: refused or not simulable).

    Args:
        knobs: the simulated knobs of one stage.
        score: the predicted tokens/s of a setting of ``knobs``.
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
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, multivariate=True)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    names = set(dists)
    for s in seeds:
        study.enqueue_trial({k: v for k, v in s.items() if k in names}, skip_if_exists=True)
    scored: dict[tuple, tuple[dict[str, Any], float]] = {}
    for _ in range(MAX_ASKS * n_trials):
        if len(scored) >= n_trials:
            break
        trial = study.ask()
        params = _sample_knobs(trial, knobs, dists)
        key = tuple(sorted((k, repr(v)) for k, v in params.items()))
        if key in scored:
            study.tell(trial, scored[key][1])
            continue
        value = score(params)
        if value is None:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            continue
        scored[key] = (params, value)
        study.tell(trial, value)
    return sorted(scored.values(), key=lambda pv: -pv[1])
