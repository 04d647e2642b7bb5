"""The probe's sweeps "measured" on a scripted server: a known step model's simulation at
vLLM's defaults, written as the probe keeps them (lone prompts of three lengths, then decoding
batches of 1, 4, 8 and 32 with 128 prompt and 64 output tokens)."""

from __future__ import annotations

from pathlib import Path

from probes.diagnose import Diagnosis
from probes.verdict import decide
from tuner.servemodel.load import closed_loop, cycled
from tuner.servemodel.scheduler import Knobs, simulate
from tuner.servemodel.steptime import StepModel
from tuner.storage.records import write_records

LENGTHS = (128, 64)
DECODE_REQUESTS = 4 + 8 + 16 + 64


def write_probe_records(folder: Path, step: StepModel) -> dict[str, str]:
    """The sweeps' records in ``folder``, by sweep point name (``Diagnosis.records_files``)."""
    files: dict[str, str] = {}
    sweeps = [(f"prefill-{n}", n, 2, 1, 3) for n in (64, 256, 1024)]
    sweeps += [(f"decode-c{c}", *LENGTHS, c, max(2 * c, 4)) for c in (1, 4, 8, 32)]
    folder.mkdir(parents=True, exist_ok=True)
    for i, (name, n_in, n_out, c, n) in enumerate(sweeps):
        first, more = closed_loop(c, n, cycled([(n_in, n_out)]), seed=i)
        f = folder / f"{name}.jsonl"
        write_records(f, simulate(first, Knobs(128, 2048), step, on_finish=more))
        files[name] = str(f)
    return files


def diagnosis_with(files: dict[str, str]) -> Diagnosis:
    """A diagnosis that kept ``files`` (its figures are not read by the serving model)."""
    verdict = decide(
        prefill_share=0.1, split_source="client", tpot_c1_ms=20.0, weight_bytes=None,
        bandwidth_gbps=None, llc_bytes=None, batching_gain=5.0, tpot_growth=1.2,
    )  # fmt: skip
    return Diagnosis(
        prefill_sweep=[], prefill_rate_tokens_per_s=None, decode_sweep=[], load_concurrency=8,
        load_metrics=None, client_prefill_share=None, server_prefill_share=None,
        server_split_s=None, device=None, model=None, llc_bytes=None, verdict=verdict,
        records_files=files,
    )  # fmt: skip
