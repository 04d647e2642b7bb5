"""Several workers on one study: Optuna's RDB storage (PostgreSQL) as their meeting point.

``autotune --storage postgresql://... --study NAME`` on several machines, or once per GPU with
``CUDA_VISIBLE_DEVICES``, makes the workers share one tuning run:

- work done once (the baseline with its probe, the confirmation) is a unit in a study of its
  own: the first worker to claim it measures it, the others wait for its result (``once``);
- each stage's trial budget is a pool of slots across the workers (``slots``); a configuration
  is started only with a slot, and one that another worker measured or is measuring is not
  started again (tuner/search/study.py);
- a running unit, slot or trial has a heartbeat: a worker killed with ``kill -9`` goes stale
  after the grace period, its trial is failed and put back in the queue for another worker
  (Optuna's ``RetryHeartbeatStaleTrialCallback``);
- each finished trial's record is published (``publish``), so every worker scores against the
  best of all of them, and ``autotune report --storage ... --study NAME`` rebuilds the report.

Without ``--storage`` none of this is used: the run folder's journal file is the storage.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import optuna
from optuna.storages import BaseStorage, RetryHeartbeatStaleTrialCallback
from optuna.trial import TrialState

from tuner.options import redact


def _interval(study: optuna.Study) -> int | None:
    """The study's heartbeat interval (None where its storage has none: the run folder's
    journal)."""
    interval: int | None = getattr(study._storage, "get_heartbeat_interval", lambda: None)()
    return interval


def fail_stale(study: optuna.Study) -> None:
    """Fail the trials whose worker stopped beating, and queue their retries (a no-op where
    the storage has no heartbeat)."""
    if not _interval(study):
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


@contextlib.contextmanager
def heartbeat(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Record the trial's heartbeat every interval while the block runs (nothing where the
    storage has no heartbeat: the run folder's journal)."""
    interval = _interval(study)
    if not interval:
        yield
        return
    beat = Beat(study._storage, trial._trial_id, interval)
    try:
        yield
    finally:
        beat.stop()


class Beat:
    """A trial's heartbeat, recorded every interval from a thread until ``stop``."""

    def __init__(self, storage: BaseStorage, trial_id: int, interval: int) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(storage, trial_id, interval), daemon=True
        )
        self._thread.start()

    def _run(self, storage: BaseStorage, trial_id: int, interval: int) -> None:
        while True:
            with contextlib.suppress(Exception):  # a missed beat is retried at the next one
                storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]
            if self._stop.wait(interval):
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


Doc = dict[str, Any]


class SharedError(RuntimeError):
    """The shared storage cannot be used; the message says why (no password in it)."""


HELD = "stage_trial_id"


def _take_over(shared: SharedStudy, part: str, slot: optuna.trial.FrozenTrial) -> None:
    """A slot queued again after its worker died: fail the stage trial that worker held and
    queue its retry now. Their two heartbeats go stale up to an interval apart; without this the
    slot could be taken before the trial went stale, spent on a new configuration, and the
    dead worker's configuration left queued with no slot to measure it."""
    held = slot.user_attrs.get(HELD)  # copied from the failed slot by the retry callback
    if held is None or "failed_trial" not in slot.system_attrs:
        return
    stage, _ = shared.study(part)  # it exists: the dead worker measured one of its trials
    storage = stage._storage
    try:
        if not storage.set_trial_state_values(held, state=TrialState.FAIL):
            return
    except optuna.exceptions.UpdateFinishedTrialError:
        return  # it ended, or another worker failed it first
    callback = storage.get_heartbeat_stale_trial_callback()  # type: ignore[attr-defined]
    if callback is not None:  # as optuna.storages.fail_stale_trials does it
        callback(stage, copy.deepcopy(storage.get_trial(held)))


class _Slot:
    """One of a stage's trials, claimed from the pool; beating until done or released."""

    def __init__(self, shared: SharedStudy, study: optuna.Study, trial: optuna.Trial) -> None:
        self.study, self.trial = study, trial
        self.beat = Beat(shared.storage, trial._trial_id, shared.heartbeat_s)

    def hold(self, trial: optuna.Trial) -> None:
        """The stage trial measured under this slot: a worker that takes the slot over after
        this one died fails that trial at once (``_take_over``)."""
        self.trial.set_user_attr(HELD, trial._trial_id)

    def done(self) -> None:
        self.beat.stop()
        self.study.tell(self.trial, 0.0)

    def release(self) -> None:
        """Not used after all (this worker stopped first): back in the pool for another."""
        self.beat.stop()
        self.study.tell(self.trial, state=TrialState.FAIL)
        self.study.enqueue_trial({}, user_attrs={"released_by": self.trial.number})


class SharedStudy:
    """One tuning run shared by several workers through an RDB storage (see the module
    docstring). Every part is an Optuna study named ``<name>:<part>``.

    Args:
        url: an SQLAlchemy URL (``postgresql+psycopg://user:password@host/db``; SQLite for a
            single machine).
        name: the study's name, the same for every worker.
        heartbeat_s, grace_s: a running trial beats every ``heartbeat_s``; one silent for
            ``grace_s`` is failed and queued again.
        say: progress lines.
        wait: called while waiting on another worker (tuner.run.stop.check: Ctrl-C stops it).
    """

    def __init__(
        self,
        url: str,
        name: str,
        *,
        heartbeat_s: int = 10,
        grace_s: int = 40,
        poll_s: float = 2.0,
        say: Callable[[str], None] = lambda m: None,
        wait: Callable[[], None] = lambda: None,
    ) -> None:
        self.name, self.heartbeat_s, self.poll_s = name, heartbeat_s, poll_s
        self.say, self.wait = say, wait
        for attempt in range(3):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    self.storage = optuna.storages.RDBStorage(
                        url,
                        engine_kwargs={"pool_pre_ping": True},
                        heartbeat_interval=heartbeat_s,
                        grace_period=grace_s,
                        heartbeat_stale_trial_callback=RetryHeartbeatStaleTrialCallback(3),
                    )
                break
            except Exception as exc:  # a bad URL, a missing driver, a server not answering
                if attempt < 2 and ("already exists" in str(exc) or "duplicate key" in str(exc)):
                    time.sleep(1.0)  # two workers creating the tables at once: the loser retries
                    continue
                first = redact((str(exc).strip().splitlines() or [""])[0][:200])
                raise SharedError(
                    f"--storage {redact(url)}: cannot open it ({type(exc).__name__}: {first})"
                ) from None

    def study_name(self, part: str) -> str:
        return f"{self.name}:{part}"

    def study(self, part: str) -> tuple[optuna.Study, bool]:
        """The part's study, and whether this call created it."""
        name = self.study_name(part)
        try:
            return optuna.create_study(study_name=name, storage=self.storage), True
        except optuna.exceptions.DuplicatedStudyError:
            return optuna.load_study(study_name=name, storage=self.storage), False

    def _claim(self, study: optuna.Study) -> optuna.Trial | None:
        """A queued trial of ``study``, now this worker's (at most one worker gets each)."""
        for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            try:  # through the study's own (caching) storage, which the study then reads
                if study._storage.set_trial_state_values(t._trial_id, state=TrialState.RUNNING):
                    return optuna.Trial(study, t._trial_id)
            except optuna.exceptions.UpdateFinishedTrialError:
                continue
        return None

    def _pause(self) -> None:
        self.wait()
        time.sleep(self.poll_s)

    # ----------------------------------------------------------------- work done once
    def once(self, part: str, compute: Callable[[], Doc], what: str) -> tuple[Doc, bool]:
        """``compute`` run by one worker only; every worker gets its result. Returns the
        result and whether this worker computed it. A worker that dies computing it goes
        stale, and another takes the work over."""
        study, created = self.study(part)
        if created:
            study.enqueue_trial({})
        told = False
        while True:
            fail_stale(study)
            trials = study.get_trials(deepcopy=False)
            if (done := _result(trials)) is not None:
                return done, False
            mine = self._claim(study)
            if mine is not None:
                beat = Beat(self.storage, mine._trial_id, self.heartbeat_s)
                try:
                    result = compute()
                except BaseException:
                    beat.stop()
                    study.tell(mine, state=TrialState.FAIL)
                    study.enqueue_trial({})  # for another worker
                    raise
                beat.stop()
                mine.set_user_attr("result", result)
                study.tell(mine, 0.0)
                return result, True
            if not any(t.state in (TrialState.RUNNING, TrialState.WAITING) for t in trials):
                study.enqueue_trial({})  # its creator stopped before queueing it
                continue
            if not told:
                self.say(f"shared study {self.name}: another worker measures {what}; waiting")
                told = True
            self._pause()

    # ----------------------------------------------------------------- trial budget
    def slots(self, part: str, n: int) -> Callable[[], _Slot | None]:
        """The claim function of a stage's pool of ``n`` trials across the workers."""
        study, created = self.study(f"{part}:slots")
        if created:
            for i in range(n):
                study.enqueue_trial({}, user_attrs={"slot": i})

        def claim() -> _Slot | None:
            fail_stale(study)
            t = self._claim(study)
            if t is None:
                return None
            _take_over(self, part, study._storage.get_trial(t._trial_id))
            return _Slot(self, study, t)

        return claim

    def settle(self, part: str, take_retry: Callable[[], bool]) -> None:
        """Wait until no trial of the stage runs on any worker. A trial whose worker died is
        failed by its heartbeat and queued again; ``take_retry`` measures it here (False: this
        worker cannot, its time budget is spent)."""
        stage, _ = self.study(part)
        pool, _ = self.study(f"{part}:slots")
        told = False
        while True:
            fail_stale(stage)
            fail_stale(pool)
            states = [t.state for t in pool.get_trials(deepcopy=False)]
            states += [t.state for t in stage.get_trials(deepcopy=False)]
            waiting = TrialState.WAITING in states
            if waiting and take_retry():
                continue
            if TrialState.RUNNING not in states:
                return
            if not told:
                self.say(f"stage {part}: waiting for the other workers' trials to finish")
                told = True
            self._pause()

    # ----------------------------------------------------------------- trial records
    def begin(self) -> tuple[int, optuna.Trial]:
        """A new trial's number, unique across the workers (the baseline is 0)."""
        study, _ = self.study("records")
        t = study.ask()
        return t.number + 1, t

    def publish(self, handle: optuna.Trial, doc: Doc) -> None:
        """A finished trial's record, for every worker and for ``autotune report``."""
        study, _ = self.study("records")
        handle.set_user_attr("record", doc)
        study.tell(handle, 0.0)

    def records(self) -> list[Doc]:
        """Every published trial record, in trial order."""
        study, _ = self.study("records")
        done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        return [t.user_attrs["record"] for t in sorted(done, key=lambda t: t.number)]

    def result(self, part: str) -> Doc | None:
        """The result of a unit done once (``once``), if it is done."""
        try:
            study = optuna.load_study(study_name=self.study_name(part), storage=self.storage)
        except KeyError:
            return None
        return _result(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def _result(trials: list[optuna.trial.FrozenTrial]) -> Doc | None:
    """The result of a unit done once, among its study's trials, if one finished with it."""
    for t in trials:
        if t.state == TrialState.COMPLETE and "result" in t.user_attrs:
            return dict(t.user_attrs["result"])
    return None
