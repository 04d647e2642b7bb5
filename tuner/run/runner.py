"""The tuning run: prepare, baseline, stages, confirm, write. Orchestration only.

Order of a run:
1. Resolve the target (tuner/run/target.py: the model, the engine, the machine and its search
   space, or an attached endpoint); open ``results/<run-id>/`` and its store
   (tuner/storage/store.py).
2. The baseline: the engine's defaults (plus what the space's ``baseline`` says it needs to
   start here), scored by a capacity search like every trial, then confirmed (after step 4
   instead, when the time budget would otherwise hold no trial).
3. The stages in the space's order (tuner/run/stages.py), each an Optuna search starting from the
   previous winner. ``--trials`` counts configurations started after the baseline, across all
   stages; the time budget is shared between the stages and stops the search early enough to
   leave time for step 4 (tuner/run/sizing.py). Each configuration is one trial
   (tuner/run/trial.py):
   quality-gated where it quantises, exactness-checked where it speculates.
4. Confirmation (tuner/run/recommend.py): the winner is started again from its launch command and
   measured at its capacity less the headroom with enough requests for the SLO percentile
   (on its own server right after its search, when the budget holds no restart). Only then is
   ``meets_slo`` set. With ``--check-workload``, the recommendation and the baseline are then
   started again and scored on each held-out workload (tuner/run/held_out.py).
5. report.json and report.md (tuner/run/assemble.py), written atomically; every trial's records
   and server log are kept.

Every finished trial is checkpointed before the next starts: an interrupted run (Ctrl-C,
SIGTERM) still writes its report, marked ``interrupted``, and ``--resume`` continues any stopped
run, SIGKILL included. Every engine is stopped by its process group.
"""

from __future__ import annotations

import os
import random
import re
import secrets
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from probes.client import LoadClient
from probes.workload import Tokenizer
from tuner.engines import get_engine
from tuner.engines.base import Engine
from tuner.engines.hardware import Hardware, detect_hardware
from tuner.engines.lifetime import sweep
from tuner.options import TuneOptions, auto_neighbour
from tuner.report.schema import Report
from tuner.run import budget_hint, held_out, sizing, stages, stop, worker
from tuner.run.assemble import RunStatus, assemble, write_report
from tuner.run.budget import Budget, PhaseTimes
from tuner.run.checkpoint import Replay
from tuner.run.gates import QualityGate
from tuner.run.measure import PointMeasurer
from tuner.run.recommend import recommend
from tuner.run.stall import StallRule
from tuner.run.state import RunState
from tuner.run.target import AttachedTarget, make_target
from tuner.run.trial import Evaluator
from tuner.scoring.capacity import LoadAxis
from tuner.scoring.estimate import constraints
from tuner.storage.shared import SharedStudy, redact
from tuner.storage.store import FolderStore, RunMeta, lock_folder

Progress = Callable[[str], None]
DEFAULT_QUALITY_PCT = 1.0  # perplexity may rise by at most 1 % unless --slo quality=X% says


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", Path(text).name or text).strip("-").lower()[:40]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class Runner:
    """One tuning run (see the module docstring); ``resume`` continues a stopped one."""

    def __init__(
        self,
        opts: TuneOptions,
        progress: Progress = _stderr,
        *,
        engine: Engine | None = None,
        hardware: Hardware | None = None,
        tokenizer_loader: Callable[[str], Tokenizer] | None = None,
        resume: Path | None = None,
        stalls: StallRule | None = None,
    ) -> None:
        engine = engine or get_engine(opts.engine)
        clock = PhaseTimes()
        self._progress = progress
        # A resumed run (--resume) keeps its run id, folder and salt; its finished trials come
        # back from their checkpoints (tuner/run/checkpoint.py).
        meta: RunMeta | None = None
        replay: Replay | None = None
        if resume is not None:
            old = FolderStore(resume)
            meta = old.load_meta()
            replay = Replay(old, old.checkpoints())
        # A fresh salt per run (recorded; --salt reproduces it): prompts differ between runs,
        # so a prefix cache never serves one run's prompts to the next.
        salt = meta.salt if meta else opts.salt or secrets.token_hex(4)
        run_id = (
            meta.run_id
            if meta
            else datetime.now().strftime("%Y%m%d-%H%M%S")
            + f"-{_slug(opts.model or opts.served_model or 'served')}-{engine.name}-"
            + secrets.token_hex(2)
        )
        out = resume if resume is not None else opts.output_dir / run_id
        slo_q = opts.slos.quality
        self.state = RunState(
            opts=opts,
            say=self.say,
            engine=engine,
            hw=hardware or detect_hardware(),
            run_id=run_id,
            out=out,
            store=FolderStore(out),
            salt=salt,
            rng=random.Random(f"{opts.seed}:{salt}"),
            axis=(
                LoadAxis("rate", minimum=0.01, maximum=opts.max_rate_rps)
                if opts.load_model == "rate"
                else LoadAxis("concurrency", minimum=1, maximum=opts.max_concurrency)
            ),
            cons=constraints(opts.slos, opts.max_error_rate),
            clock=clock,
            budget=Budget(opts.time_budget_s, start=clock.t0),
            quality=QualityGate(slo_q.max_degradation_pct if slo_q else DEFAULT_QUALITY_PCT),
            meta=meta,
            replay=replay,
        )
        st = self.state
        self.target = make_target(opts, engine, st.hw, clock, run_id, tokenizer_loader)
        st.launches = self.target.launches
        self.evaluator = Evaluator(st, self.target, stalls)

    @property
    def out(self) -> Path:
        return self.state.out

    @property
    def run_id(self) -> str:
        return self.state.run_id

    def say(self, msg: str) -> None:
        e = int(self.state.clock.elapsed())
        self._progress(f"[{e // 60:02d}:{e % 60:02d}] {msg}")

    # ----------------------------------------------------------------- run
    def run(self) -> Report:
        # Bad input (model, search space, tokenizer, workload) fails here, with one line and
        # before any engine starts or any folder is written.
        self._prepare()
        self.out.mkdir(parents=True, exist_ok=True)
        lock = lock_folder(self.out)  # held while this run works in its folder
        # A status line under the progress lines, where the sink draws one (tuner/run/progress.py).
        watch, close = (
            getattr(self._progress, "watch", None),
            getattr(self._progress, "close", None),
        )
        try:
            if watch is not None:
                watch(self.state)
            return self._run()
        finally:
            if close is not None:
                close()
            lock.close()

    def _run(self) -> Report:
        st = self.state
        self._open_store()
        status: RunStatus = "complete"
        error: str | None = None
        self.say(f"run {st.run_id}; results in {self.out}")
        try:
            stages.search(st, self.evaluator)
            out_of_time = not sizing.another_trial_fits(st)
            self._confirm()
            if (few := budget_hint.hint(st, out_of_time)) is not None:
                st.notes.append(few[0].upper() + few[1:] + ".")
                self.say(few)
            self._close_store()
        except KeyboardInterrupt:
            status = "interrupted"
            self.say(
                f"interrupted; what was measured is kept in {self.out} "
                f"(autotune --resume {self.out} continues it)"
            )
        except Exception as exc:
            status, error = "failed", f"{type(exc).__name__}: {exc}"
            self.say(f"run failed: {error}")
            self._write(status, error)
            raise
        return self._write(status, error)

    def _confirm(self) -> None:
        """The recommendation: confirmed here, or, in a shared study, by the first worker to
        get there (the others take its recommendation and report); then, where asked
        (--check-workload), checked on workloads it was not tuned for (tuner/run/held_out.py)."""
        st = self.state
        if st.shared is None:
            recommend(st, self.evaluator)
            held_out.check(st, self.evaluator)
            return

        def confirm() -> worker.Doc:
            recommend(st, self.evaluator)
            held_out.check(st, self.evaluator)
            return worker.confirmation_doc(st, assemble(st, "complete", None))

        doc, mine = st.shared.once("confirm", confirm, "the confirmation")
        if not mine:
            worker.take_confirmation(st, doc)

    def _write(self, status: RunStatus, error: str | None) -> Report:
        t = self.target
        endpoint = t.attached.base_url if isinstance(t, AttachedTarget) and t.attached else None
        return write_report(self.state, status, error, endpoint)

    def _open_store(self) -> None:
        """A new run records what it was asked; a resumed one counts the resume and starts
        its Optuna journal afresh (the seeded sampler, fed the same outcomes, replays it). The
        folder is locked while a run works in it: a second --resume of a live run is refused
        (its sweep would stop the live run's engines)."""
        st = self.state
        if st.meta is None:
            st.meta = RunMeta(
                run_id=st.run_id, salt=st.salt, options=st.opts.model_dump(mode="json")
            )
        else:
            st.meta.resumes += 1
            # What the stopped part left running (a tuner killed with SIGKILL cannot stop its
            # engines' children itself): found by the run's marker in their environment.
            if left := sweep(st.run_id):
                self.say(f"stopped {len(left)} processes the interrupted run left running")
            journal = self.out / "optuna.journal"
            if journal.exists():
                journal.rename(self.out / f"optuna.journal.before-resume-{st.meta.resumes}")
            assert st.replay is not None
            self.say(
                f"resuming {st.run_id}: {len(st.replay.pending)} finished trials kept "
                "from before (not measured again)"
            )
        st.store.save_meta(st.meta)

    def _close_store(self) -> None:
        st = self.state
        assert st.meta is not None
        if st.replay is not None and st.replay.pending:  # the resumed search stopped sooner
            st.replay.drop_from(min(st.replay.pending), "not reached by the resumed search")
        st.meta.done = True
        st.store.save_meta(st.meta)

    def _prepare(self) -> None:
        st, opts = self.state, self.state.opts
        if opts.storage is not None and opts.study is not None and st.shared is None:
            st.shared = SharedStudy(  # connects now: a bad URL fails before any engine starts
                opts.storage,
                opts.study,
                heartbeat_s=opts.shared_heartbeat_s,
                grace_s=opts.shared_grace_s,
                say=self.say,
                wait=stop.check,
            )
            self.say(f"shared study {opts.study} on {redact(opts.storage)}")
        p = self.target.prepare(self.say)
        st.model_path, st.space, st.ctx, st.tokenizer = p.model_path, p.space, p.ctx, p.tokenizer
        st.notes += p.notes
        st.client = LoadClient(p.base_url, timeout_s=opts.request_timeout_s)
        if opts.neighbour_cpu_pct is None:  # --neighbour-cpu auto: decided here, and said
            opts.neighbour_cpu_pct, why = auto_neighbour(st.launches, len(os.sched_getaffinity(0)))
            if why:
                self.say(why)
        st.measurer = self._measurer(st.client)
        labels = "; ".join(opts.slos.labels)
        if not st.launches:
            self.say(f"SLOs: {labels}")
            return
        quality = (
            ""
            if opts.slos.quality
            else f"; quality degradation <= {st.quality_limit:g} % (the default)"
        )
        self.say(f"SLOs: {labels}{quality}; error rate <= {opts.max_error_rate:.1%}")

    def _measurer(self, client: LoadClient) -> PointMeasurer:
        st = self.state
        clock = st.clock

        def spent(phase: str, seconds: float) -> None:
            if phase == "warmup":
                clock.warmup_s += seconds
            else:
                clock.measure_s += seconds

        return PointMeasurer(
            client=client,
            axis=st.axis,
            slos=st.opts.slos,
            max_error_rate=st.opts.max_error_rate,
            workload=st.opts.workload,
            tokenizer=st.tokenizer,
            ignore_eos=self.target.ignore_eos,
            series=st.engine.series,
            seeds=st.fresh_seed,
            spent=spent,
            neighbour_pct=st.opts.neighbour_cpu_pct or 0.0,
        )


def tune(opts: TuneOptions, progress: Progress | None = None) -> Report:
    """Run a whole tuning; see the module docstring. Returns the report (also on disk)."""
    runner = Runner(opts, progress) if progress else Runner(opts)
    return runner.run()
