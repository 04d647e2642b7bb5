"""How sure a prediction is: the relative spreads its interval adds to the bootstrap's.

- ``RUN_TO_RUN``: the same configuration started again is not the same server: fresh starts
  differ by more than one start's sampling noise. Until a run measures its own, this figure:
  benchmarks/model_accuracy.py's calibration configuration measured again on a fresh start.
- ``MODEL_SPREAD``: the model's own error, until a run has measured some of its predictions
  (then the median of those errors replaces it).
- ``TRANSFER_SPREAD``: added for a build predicted with another build's step model.
- ``PROBE_SPREAD``: added for a build calibrated on the probe's sweeps alone: lone prompts and
  batches up to four times the user's load, extrapolated to the batches at capacity.
- ``ROOFLINE_SPREAD``: added for a quantised build predicted with another build's step model
  scaled by the probe's roofline (tuner/servemodel/roofline.py): as unsure as a transfer, since
  what the roofline leaves out (the kernels' dequantising cost) is of the same size as what it
  predicts.
"""

from __future__ import annotations

import math

from tuner.servemodel.predict import Basis, Spread

RUN_TO_RUN = 0.08
MODEL_SPREAD = 0.10
TRANSFER_SPREAD = 0.30
PROBE_SPREAD = 0.15
ROOFLINE_SPREAD = 0.30
# The kinds of prediction whose measured error is the run's model spread (the probe-only ones
# are a weaker kind, with a term of their own).
MEASURED_BASES: tuple[Basis, ...] = ("calibrated", "transferred", "roofline")


def spread_for(model_error: float | None, basis: Basis) -> Spread:
    """A prediction's spreads: the run-to-run term, and the model's error (``MODEL_SPREAD``
    until one is measured), with the transfer or probe term added where the build's own trials
    were not measured."""
    model = MODEL_SPREAD if model_error is None else model_error
    if basis == "transferred":
        model = math.hypot(model, TRANSFER_SPREAD)
    elif basis == "probe":
        model = math.hypot(model, PROBE_SPREAD)
    elif basis == "roofline":
        model = math.hypot(model, ROOFLINE_SPREAD)
    return Spread(run_to_run=RUN_TO_RUN, model=model)
