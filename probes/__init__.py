"""Measuring: workloads, the load client, metric formulas, SLOs, server metrics, the probe.

Imports nothing from ``tuner``.
"""

from probes.inference import measure_inference

__all__ = ["measure_inference"]
