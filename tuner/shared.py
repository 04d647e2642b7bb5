"""Several workers on one study: Optuna's RDB storage (PostgreSQL) as their meeting point.

``autotune --storage postgresql://... --study NAME`` on several machines, or once per GPU with
``CUDA_VISIBLE_DEVICES``, makes the workers share one tuning run:

- work done once (the baseline with its probe, the confirmation) is a unit in a study of its
  own: the first worker to claim it measures it, the others wait for its result (``once``);
- each stage's trial budget is a pool of slots across the workers (``slots``); a configuration
  is started only with a slot, and one that another worker measured or is measuring is not
  started again (tuner/search.py);
- a running unit, slot or trial has a heartbeat: a worker killed with ``kill -9`` goes stale
  after the grace period, its trial is failed and put back in the queue for another worker
  (Optuna's ``RetryHeartbeatStaleTrialCallback``);
- each finished trial's record is published (``publish``), so every worker scores against the
  best of all of them, and ``autotune report --storage ... --study NAME`` rebuilds the report.

Without ``--storage`` none of this is used: the run folder's journal file is the storage.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator

import optuna
from optuna.storages import BaseStorage


def fail_stale(study: optuna.Study) -> None:
    """Fail the trials whose worker stopped beating, and queue their retries (a no-op where
    the storage has no heartbeat: the run folder's journal)."""
    if not getattr(study._storage, "get_heartbeat_interval", lambda: None)():
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


@contextlib.contextmanager
def heartbeat(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Record the trial's heartbeat every interval while the block runs (nothing where the
    storage has no heartbeat: the run folder's journal)."""
    storage: BaseStorage = study._storage
    interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
    if not interval:
        yield
        return
    stop = threading.Event()
    trial_id = trial._trial_id

    def beat() -> None:
        while True:
            with contextlib.suppress(Exception):  # a missed beat is retried at the next one
                storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name=f"heartbeat-{trial.number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
