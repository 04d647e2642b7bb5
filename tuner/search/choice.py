"""Which of the serving model's candidates the engine measures next (tuner/search/guide.py
screens and predicts them).

- **A start must be worth it**: a candidate is measured only if its expected gain over the
  best measured score (``expected_gain``: the prediction taken as normal, its model spread as
  the 90 % half-width) is at least ``MIN_GAIN`` of the tie band; otherwise the stage stops.
- **The largest expected gain** goes first. A well-predicted configuration is thus measured
  because the model ranks it well above the best, a transferred one (a build not measured
  yet, predicted with another's step times) because the model is least sure of it.
- **A stage's first trial** (``prefer``): of the candidates worth a start, a build the space
  seeds (its hand-made candidates, each the best of a grid measured elsewhere) and the run has
  not measured yet. The model predicts such a build with another build's step times, so its
  figures rank it level with that build's own best setting, and only its wider interval puts
  it first: a close call. (The README command on a 2-core AMD box, 2026-12-07 16:55, measured
  the defaults' build at both batching trials and never reached the seeded one, both cores
  bound and coarser streaming: 7.36 requests/s at best, where vLLM's own client had measured
  12.3 for that build within the hour.)
- **A stage's last trial** (once the stage has measured one of its own; tuner/run/sizing.py
  ``last_of_stage``): of the candidates worth a start, the one whose prediction's pessimistic
  end is highest. A start spent on what the model is least sure of pays where a later trial of
  the stage can follow up what it shows; the last has none after it, and the stage hands on
  what it measured. (The README command on the Xeon, 2026-12-06 13:52: the stage's second and
  last trial measured a build not measured yet, every token streamed, at the 497 sequences the
  model found best for the build measured first, coarse streaming; that build at that setting,
  the best of a grid measured within the hour, was never measured, and the recommendation
  held 0.935 of the grid's best.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scipy.stats import norm

from tuner.servemodel.predict import Prediction

# A candidate is measured only if its expected gain is at least this share of the tie band
# (times the best score): a prediction level with the best, and as sure as a calibrated one,
# is not worth a start.
MIN_GAIN = 0.5
Z90 = 1.645  # the normal quantile of a 90 % two-sided interval


@dataclass
class Candidate:
    params: dict[str, Any]  # the stage's knobs
    prediction: Prediction
    basis: str
    build_trials: list[int]


def choose(
    cands: list[Candidate],
    best: float,
    tie_band: float,
    *,
    last: bool = False,
    prefer: Callable[[Candidate], bool] | None = None,
) -> Candidate | None:
    """The candidate to measure (the module docstring), or None: none is worth a start.
    ``best``: the best measured score (tokens/s); ``last``: the stage's last trial;
    ``prefer``: the candidates taken first where any of them is worth a start."""
    worth = [(g, c) for c in cands if (g := expected_gain(c, best)) >= MIN_GAIN * tie_band * best]
    if not worth:
        return None
    if prefer is not None:
        worth = [(g, c) for g, c in worth if prefer(c)] or worth
    if last:
        return max(worth, key=lambda gc: (gc[1].prediction.low, gc[0]))[1]
    return max(worth, key=lambda gc: (gc[0], gc[1].prediction.tokens_per_s))[1]


def expected_gain(c: Candidate, best: float) -> float:
    """Expected improvement over the best measured score (tokens/s), taking the prediction
    as normal with its model spread as the 90 % half-width (the run-to-run term is left
    out: it is the measurement's noise, not the model's doubt)."""
    mu = c.prediction.tokens_per_s
    sigma = max(c.prediction.spread_model * mu / Z90, 1e-9)
    z = (mu - best) / sigma
    return float(sigma * (z * norm.cdf(z) + norm.pdf(z)))
