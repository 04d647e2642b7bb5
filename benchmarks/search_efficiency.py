r"""At equal engine starts: the model-guided search, the same search without the model, and
random search, against the best of a measured grid.

1. **The grid** (measured once, about 35 minutes on 2 cores): one build (``--build k=v``, the
   rest of the vLLM CPU space at its baseline) over ``GRID``, the scheduler knobs' values
   (``max_num_seqs`` x ``max_num_batched_tokens``: 12 configurations). Each gets a fresh start,
   a warm-up and open-loop Poisson points with autotune's client around where its capacity lies
   (benchmarks/model_accuracy.py's plan: 0.85, 1.0 and 1.15 x a first guess, further out where
   those do not bracket the crossing; the guess is the model calibrated on the grid's first
   configuration, which only decides where to measure). Its capacity is the tuner's estimator
   over its points. Every point's records are kept. The first configuration is measured twice:
   a ladder (x1.5 from ``--start-rate``) to calibrate that guess, then as the others are, on a
   fresh start (its capacity is the second's). ``--finish DIR`` measures what a grid's folder
   lacks (a grid cut short) and replays.
2. **The searches** (replayed on the grid, seconds): each method picks grid configurations one
   engine start at a time, and a pick "measures" that configuration as the grid did (its
   capacity, and its records). Every method starts from the same configuration and gets
   ``--starts`` starts in all; the replay runs every method from every configuration of the
   grid as the first, with every seed.
   - **guided**: tuner/search/choice.py's rule (the largest expected gain; the benchmark
     leaves out the surest-gain rule of a stage's last trial). Every configuration not measured
     yet is predicted by the serving model calibrated on the records of the picks so far
     (tuner/servemodel/), and
     the one with the highest expected gain over the best measured (``choice.expected_gain``,
     the spread from the error of the predictions measured so far) is measured next.
   - **without the model**: Optuna's TPE sampler over the grid's values, as the batching stage
     samples with ``--no-serving-model`` (``n_startup_trials=3``, multivariate), seeded.
   - **random**: uniform over the configurations not measured yet, seeded.

It prints, per first configuration, method and seed, the best measured capacity found after the
last start as a share of the grid's best; then per method the median and mean over all those
searches, how often each came within 3 % of the grid's best, side by side, and the ratio of
guided to the others. It measures, it does not assert.

    .venv/bin/python benchmarks/search_efficiency.py --build cpu_binding=all_cores \
        --build uvicorn_access_log=false --build stream_interval=8
    .venv/bin/python benchmarks/search_efficiency.py --again results/efficiency-<timestamp>

Run the first from the repository root on an idle machine; ``--again`` replays a measured grid
(other seeds, other ``--starts``) without an engine.
"""

from __future__ import annotations

import itertools
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]

import optuna  # noqa: E402
from model_accuracy import (  # noqa: E402
    Bench,
    Result,
    bench_options,
    calibration_plan,
    fit,
    load_points,
    measured_capacity,
    model_side,
    test_plan,
)

from probes.records import RequestRecord  # noqa: E402
from tuner.engines.base import EngineStartError  # noqa: E402
from tuner.engines.models import ModelError  # noqa: E402
from tuner.runs.probe_run import ProbeError, parse_params  # noqa: E402
from tuner.search.choice import Candidate, expected_gain  # noqa: E402
from tuner.search.screen import SCREEN_HORIZON_S, SCREEN_RESOLUTION  # noqa: E402
from tuner.servemodel.calibrate import calibrate  # noqa: E402
from tuner.servemodel.predict import predict  # noqa: E402
from tuner.servemodel.scheduler import SimulationError  # noqa: E402
from tuner.servemodel.spreads import spread_for  # noqa: E402
from tuner.servemodel.steptime import FitError, StepModel  # noqa: E402
from tuner.storage.store import write_atomic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SEQS = (16, 32, 64, 256)
TOKENS = (512, 2048, 8192)
# the first is where every method starts: vLLM's scheduler defaults on the CPU (256, 2048)
GRID: list[dict[str, Any]] = [{"max_num_seqs": 256, "max_num_batched_tokens": 2048}] + [
    {"max_num_seqs": s, "max_num_batched_tokens": t}
    for s, t in itertools.product(SEQS, TOKENS)
    if (s, t) != (256, 2048)
]
METHODS = ("guided", "without the model", "random")


def key(params: dict[str, Any]) -> tuple[int, int]:
    return (int(params["max_num_seqs"]), int(params["max_num_batched_tokens"]))


# ------------------------------------------------------------ the grid, measured once
def measure_grid(b: Bench, build: dict[str, Any], doc: Result, save: Any) -> None:
    if doc["grid"]:  # measured before (--finish)
        calib = doc["grid"][0]
    else:
        calib = b.measure("g0", {**build, **GRID[0]}, calibration_plan(b))
        calib["measured"] = measured_capacity(b, calib)
        doc["grid"].append(calib)
        save()
    step = fit(b, calib)
    for i, cfg in enumerate(GRID[1:], start=1):
        if i < len(doc["grid"]):  # measured before (--finish)
            continue
        params = {**build, **cfg}
        side = model_side(
            b, step, {"params": params, "model_dir": calib["model_dir"], "points": []}
        )
        rate = side["capacity"]["load"] or b.a.start_rate
        res = b.measure(f"g{i}", params, test_plan(b, rate))
        res["measured"] = measured_capacity(b, res)
        doc["grid"].append(res)
        save()
    first_again(b, doc, save)


def first_again(b: Bench, doc: Result, save: Any) -> None:
    """The first configuration measured again as the others are (a fresh start, 0.85-1.15 x
    its ladder's estimate, ``--span`` points): the ladder steps by 1.5x, too coarse a bracket
    to rank it against the others. Its capacity is then this measurement's; its ladder's
    records still calibrate (a method that starts there has measured both)."""
    g0 = doc["grid"][0]
    if g0.get("again"):
        return
    rate = (g0.get("measured") or {}).get("load") or b.a.start_rate
    res = b.measure("g0-again", g0["params"], test_plan(b, rate))
    g0["ladder"] = g0["measured"]
    g0["measured"] = measured_capacity(b, res)
    g0["points"] += res["points"]
    g0["again"] = True
    save()


# ------------------------------------------------------------ the searches, replayed
class Grid:
    """The measured grid: each configuration's capacity (tokens/s) and its records."""

    def __init__(self, b: Bench, doc: Result) -> None:
        self.b = b
        self.rows = [r for r in doc["grid"] if (r.get("measured") or {}).get("tokens_per_s")]
        self.score = {key(r["params"]): float(r["measured"]["tokens_per_s"]) for r in self.rows}
        self.by_key = {key(r["params"]): r for r in self.rows}
        self.best = max(self.score.values())
        self._records: dict[tuple[int, int], list[list[RequestRecord]]] = {}
        self._fits: dict[frozenset, StepModel | None] = {}

    def fit(self, picked: list[tuple[int, int]]) -> StepModel | None:
        """The step model calibrated on the picks' records (None: too few), once per set."""
        which = frozenset(picked)
        if which not in self._fits:
            try:
                self._fits[which] = calibrate([p for k in picked for p in self.records(k)])
            except FitError:
                self._fits[which] = None
        return self._fits[which]

    def records(self, k: tuple[int, int]) -> list[list[RequestRecord]]:
        if k not in self._records:
            self._records[k] = [recs for _, recs in load_points(self.by_key[k])]
        return self._records[k]


def guided(g: Grid, first: tuple[int, int], starts: int, seed: int) -> list[tuple[int, int]]:
    """tuner/search/choice.py's rule on the grid (see the module docstring)."""
    picked = [first]
    errors: list[float] = []
    b = g.b
    while len(picked) < min(starts, len(g.score)):
        step = g.fit(picked)
        if step is None:
            break
        best = max(g.score[k] for k in picked)
        model = statistics.median(errors) if errors else None
        cands = []
        for k in g.score:
            if k in picked:
                continue
            row = g.by_key[k]
            try:
                p = predict(
                    step, b.knobs(row["params"], row["model_dir"]), b.wl.lengths, b.slos,
                    b.a.max_error_rate, "rate",
                    mean_lengths=(float(b.wl.input_len), float(b.wl.output_len)),
                    spread=spread_for(model, "calibrated"), seed=seed, resamples=0,
                    resolution=SCREEN_RESOLUTION, horizon_s=SCREEN_HORIZON_S,
                )  # fmt: skip
            except (SimulationError, ValueError):
                continue
            c = Candidate(row["params"], p, "calibrated", [])
            cands.append((expected_gain(c, best), p.tokens_per_s, k))
        if not cands:
            break
        _, predicted, k = max(cands)
        errors.append(abs(predicted / g.score[k] - 1.0))
        picked.append(k)
    return picked


def tpe(g: Grid, first: tuple[int, int], starts: int, seed: int) -> list[tuple[int, int]]:
    """Optuna's TPE over the grid's values, the first trial enqueued at the common start."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=3, multivariate=True)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial({"max_num_seqs": first[0], "max_num_batched_tokens": first[1]})
    picked: list[tuple[int, int]] = []
    for _ in range(20 * starts):  # a repeat of a measured configuration costs no start
        if len(picked) >= min(starts, len(g.score)):
            break
        t = study.ask()
        k = (
            t.suggest_categorical("max_num_seqs", list(SEQS)),
            t.suggest_categorical("max_num_batched_tokens", list(TOKENS)),
        )
        if k not in g.score:  # not measured in the grid (its start failed): as a failure
            study.tell(t, 0.0)
            continue
        study.tell(t, g.score[k])
        if k not in picked:
            picked.append(k)
    return picked


def uniform(g: Grid, first: tuple[int, int], starts: int, seed: int) -> list[tuple[int, int]]:
    rest = sorted(k for k in g.score if k != first)
    random.Random(seed).shuffle(rest)
    return [first, *rest][: min(starts, len(g.score))]


def replay(b: Bench, doc: Result, starts: int, seeds: list[int]) -> Result:
    """Every method from every grid configuration as the first, with every seed: the best
    found after ``starts`` starts as a share of the grid's best. From every first, not one: a
    search from the grid's best finds it at once whatever it does, and which configuration a
    user's engine defaults are is not the benchmark's to choose."""
    g = Grid(b, doc)
    print(f"\nthe grid: {len(g.score)} configurations measured; best {g.best:.0f} tok/s")
    for k, s in sorted(g.score.items(), key=lambda kv: -kv[1]):
        print(f"  max_num_seqs {k[0]:4d}, max_num_batched_tokens {k[1]:5d}: {s:6.0f} tok/s")
    found: dict[str, list[float]] = {m: [] for m in METHODS}
    runs: list[Result] = []
    print(
        f"\nbest found after {starts} starts, as a share of the grid's best, from each first "
        f"configuration (seeds {', '.join(map(str, seeds))}):"
    )
    print(f"  {'first':<12} {'its share':>9}   " + "   ".join(f"{m:>22}" for m in METHODS))
    for first in sorted(g.score):
        cells = []
        for method, search in zip(METHODS, (guided, tpe, uniform), strict=True):
            shares = []
            for seed in seeds:
                picked = search(g, first, starts, seed)
                curve = [
                    max(g.score[k] for k in picked[: i + 1]) / g.best for i in range(len(picked))
                ]
                shares.append(curve[-1])
                found[method].append(curve[-1])
                runs.append(
                    {"method": method, "first": first, "seed": seed, "picked": picked,
                     "curve": curve}
                )  # fmt: skip
            cells.append(" ".join(f"{x:.2f}" for x in shares))
        label = f"{first[0]}/{first[1]}"
        print(
            f"  {label:<12} {g.score[first] / g.best:9.2f}   "
            + "   ".join(f"{c:>22}" for c in cells)
        )
    medians = {m: statistics.median(v) for m, v in found.items()}
    means = {m: statistics.fmean(v) for m, v in found.items()}
    n = len(found[METHODS[0]])
    print(
        f"\nover {n} searches each ({len(g.score)} firsts x {len(seeds)} seeds), {starts} starts:"
    )
    for m in METHODS:
        reached = sum(x >= 0.97 for x in found[m]) / n
        print(
            f"  {m:<18} median {medians[m]:.3f}, mean {means[m]:.3f} of the grid's best; "
            f"within 3 % of it in {reached:.0%}"
        )
    for m in METHODS[1:]:
        print(f"  guided / {m}: mean {means['guided'] / means[m]:.3f}")
    return {
        "starts": starts, "seeds": seeds, "grid_best": g.best, "medians": medians,
        "means": means, "runs": runs,
    }  # fmt: skip


def main() -> int:
    p = bench_options(__doc__)
    add = p.add_argument
    add("--start-rate", type=float, default=2.0, help="the first configuration's first rate")
    add("--calib-span", type=float, default=20.0, help="seconds of arrivals per ladder point")
    add("--span", type=float, default=25.0, help="seconds of arrivals per measured point")
    add("--starts", type=int, default=4, help="engine starts each search gets")
    add("--seeds", default="1,2,3", help="the searches' seeds")
    add("--seed", type=int, default=int(time.time()), help="the load's seed")
    add("--again", type=Path, help="replay a measured grid (no engine)")
    add("--finish", type=Path, help="measure what a grid's folder lacks, then replay")
    add("--out", type=Path)
    a = p.parse_args()
    a.slo = a.slo or ["ttft=2s"]
    seeds = [int(s) for s in a.seeds.split(",")]
    doc: Result
    if stored := a.finish or a.again:
        doc = json.loads((stored / "efficiency.json").read_text())
        for k in ("slo", "workload", "max_error_rate"):
            setattr(a, k, doc["options"][k])
        b = Bench(a, stored)
        # --again writes its replay beside the grid; --finish completes the grid's own file
        written = stored / ("efficiency.json" if a.finish else "efficiency-again.json")

        def save_stored() -> None:
            write_atomic(written, json.dumps(doc, indent=2).encode())

        if a.finish:  # a grid cut short, or measured before first_again existed
            measure_grid(b, doc["options"]["build"], doc, save_stored)
        doc["replay"] = replay(b, doc, a.starts, seeds)
        save_stored()
        return 0
    out = a.out or ROOT / "results" / f"efficiency-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    b = Bench(a, out)
    build = parse_params(a.build)
    doc = {
        "options": {
            "slo": a.slo, "workload": a.workload, "max_error_rate": a.max_error_rate,
            "build": build, "seed": a.seed,
        },
        "machine": b.hw.model_dump(),
        "grid": [],
    }  # fmt: skip

    def save() -> None:
        write_atomic(out / "efficiency.json", json.dumps(doc, indent=2, default=str).encode())

    try:
        measure_grid(b, build, doc, save)
    except (ProbeError, ModelError, EngineStartError) as exc:
        print(f"could not measure: {exc}")
        doc["error"] = str(exc)
    save()
    if len([r for r in doc["grid"] if r.get("measured")]) < 2:
        print("too little of the grid was measured to replay a search")
        return 1
    doc["replay"] = replay(b, doc, a.starts, seeds)
    save()
    print(f"\nwrote {out / 'efficiency.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
