"""The serving model: predicts a configuration's latencies and capacity before measuring it.

Three parts, each a module of pure logic tested on scripted data:

- ``steptime``: the time of one engine step as a linear function of what it computes,
  fitted per build (the knobs that change kernels or the front end) on the target machine;
- ``scheduler``: a discrete-event simulation of vLLM's continuous-batching scheduler that takes
  the scheduler knobs as they are and returns per-request records, the same records the load
  client writes;
- ``calibrate`` / ``predict``: the step model fitted from measured records, and a predicted
  capacity judged with the same estimator and SLO verdict as a measured trial.
"""
