"""The probe, on the baseline server before its capacity search: where the time goes (prefill
against decoding, how each scales with prompt length and batch), which stages can pay off, and
the serving model's first calibration (probes/diagnose.py measures; this runs it for the run and
keeps what it measured)."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

from probes.diagnose import run_diagnosis
from tuner.engines.base import RunningServer
from tuner.run import reach
from tuner.run.state import RunState
from tuner.storage.records import keep_records


def diagnose(st: RunState, server: RunningServer, *, ignore_eos: bool) -> None:
    """The probe on ``server`` into ``st.diagnosis`` (its records kept under ``probe/``); a
    probe that fails is a note, and the search goes on unplanned."""
    assert st.client is not None
    t0 = time.monotonic()
    st.say("probe: measuring where the time goes on the baseline server")
    st.client.base_url = server.base_url
    # the serving model's calibration before any trial is measured (tuner/search/guide.py)
    kept: dict[str, str] = {}
    try:
        st.diagnosis = run_diagnosis(
            st.client,
            served_model=server.served_model or st.model_path,
            tokenizer=st.tokenizer,
            workload=st.opts.workload,
            load_concurrency=st.opts.start_concurrency,
            series=st.engine.series,
            model_dir=st.model_path if Path(st.model_path).is_dir() else None,
            llc_text=st.hw.l3_cache,
            device=st.hw.device,
            seed=st.fresh_seed(),
            ignore_eos=ignore_eos,
            progress=st.say,
            enough=lambda one: reach.unreachable_alone(one, st.cons) is not None,
            keep=partial(keep_records, st.out / "probe", kept),
            # beside the CPU neighbour every load point is measured beside (the model is
            # calibrated on these sweeps and checked against those points)
            neighbour_pct=st.opts.neighbour_cpu_pct or 0.0,
        )
        st.diagnosis.records_files = kept
        st.say(f"probe: {st.diagnosis.verdict.summary}")
    except Exception as exc:  # the probe informs the plan; the search can go on without it
        st.notes.append(f"the probe failed ({type(exc).__name__}: {exc}); stages unplanned")
        st.say(f"probe failed: {exc}")
    st.probe_s = time.monotonic() - t0
    st.clock.measure_s += st.probe_s
