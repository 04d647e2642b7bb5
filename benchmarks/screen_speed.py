r"""The serving model's predictions in one process against on the machine's cores, side by side.

A screen predicts hundreds of scheduler settings between two engine starts
(tuner/search/screen.py); tuner/search/parallel.py spreads them over forked workers. This
predicts the same settings of a finished run's calibration (``autotune predict``'s path,
tuner/runs/predict_run.py) both ways, alternating, ``--repeats`` times, and prints the median
wall time of each and their ratio, after checking that both gave the same predictions.

    .venv/bin/python benchmarks/screen_speed.py results/<run-id>

Run it on an idle machine: it measures, it does not assert.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tuner.runs.predict_run import predict_from_run
from tuner.search.parallel import map_forked, workers

SEQS = (64, 128, 256, 384, 512)
TOKENS = (1024, 2048, 4096, 8192)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    settings = [
        {"max_num_seqs": s, "max_num_batched_tokens": t} for s, t in itertools.product(SEQS, TOKENS)
    ]

    def one(params: dict[str, Any]) -> float:
        return predict_from_run(a.run_dir, dict(params)).capacity["output_tokens_per_s"]

    n = workers()
    walls: dict[str, list[float]] = {"1 process": [], f"{n} workers": []}
    got: dict[str, list[float]] = {}
    for _ in range(a.repeats):
        for label, count in (("1 process", 1), (f"{n} workers", n)):
            t0 = time.perf_counter()
            got[label] = map_forked(one, settings, count)
            walls[label].append(time.perf_counter() - t0)
    if len(set(map(tuple, got.values()))) != 1:
        print("the two ways predicted differently", file=sys.stderr)
        return 1
    print(f"{len(settings)} predictions of {a.run_dir}, {a.repeats} repeats, alternating")
    for label, w in walls.items():
        each = ", ".join(f"{x:.2f}" for x in w)
        print(f"  {label:<10} median {statistics.median(w):6.2f} s  ({each})")
    serial, par = (statistics.median(w) for w in walls.values())
    print(f"  ratio: {serial / par:.2f}x faster on {n} workers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
