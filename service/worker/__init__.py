"""Regrade job consumption (the enqueue side is service.jobs).

Doors:
* `start_inprocess_worker(settings)` — `kaudit serve` with the embedded default: a polling thread
  in the API process (SQLite or PostgreSQL), zero extra servers. Returns an object with `stop()`.
* `run_worker(settings, gpus, pool, once)` — `kaudit worker --gpus 0,1 --pool h200`: on PostgreSQL
  a Procrastinate worker (queue per pool, one job per GPU at a time); on SQLite, or with `--once`,
  the same polling loop as the embedded worker, one thread per GPU.
* `notify_enqueued(job_id, settings)` — called by service.jobs after the enqueue COMMIT: wakes the
  embedded worker, and on PostgreSQL with KAUDIT_WORKER_MODE=external defers the Procrastinate
  delivery (each `kaudit worker` also re-delivers queued jobs itself, so a lost notify only delays).

The lease/attempt state machine is in `service.worker.engine` (see its docstring).
"""

from __future__ import annotations

import logging
import threading

from service.db import Database
from service.settings import Settings
from service.worker.engine import JobLeases, JobProcessor, PollingWorker, RegradeFn

__all__ = ["JobLeases", "JobProcessor", "PollingWorker", "notify_enqueued", "run_worker", "start_inprocess_worker"]

log = logging.getLogger(__name__)

_inprocess: list[PollingWorker] = []
_inprocess_lock = threading.Lock()


class InprocessWorker:
    def __init__(self, worker: PollingWorker, db: Database) -> None:
        self.worker = worker
        self.db = db

    def notify(self) -> None:
        self.worker.notify()

    def stop(self) -> None:
        self.worker.stop()
        with _inprocess_lock:
            if self.worker in _inprocess:
                _inprocess.remove(self.worker)
        self.db.dispose()


def start_inprocess_worker(settings: Settings, regrade_fn: RegradeFn | None = None) -> InprocessWorker:
    db = Database(settings)
    worker = PollingWorker(settings, db, settings.gpu_indices, settings.worker_gpu_pool, regrade_fn=regrade_fn)
    worker.start()
    with _inprocess_lock:
        _inprocess.append(worker)
    return InprocessWorker(worker, db)


def run_worker(settings: Settings, gpus: list[int], pool: str, once: bool = False,
               regrade_fn: RegradeFn | None = None) -> int:
    """Blocking worker. Returns the process exit code."""
    if not settings.is_sqlite and not once:
        from service.worker import pg_queue

        return pg_queue.run(settings, gpus, pool, regrade_fn)
    db = Database(settings)
    worker = PollingWorker(settings, db, gpus, pool, once=once, regrade_fn=regrade_fn).start()
    try:
        worker.join()
    except KeyboardInterrupt:
        worker.stop()
    finally:
        db.dispose()
    return 0


def notify_enqueued(job_id: int, settings: Settings) -> None:
    """Called after the enqueue transaction committed (never inside it)."""
    with _inprocess_lock:
        for w in _inprocess:
            w.notify()
    if settings.is_sqlite or settings.worker_mode != "external":
        return  # the embedded worker polls the table itself
    try:
        from service.worker import pg_queue

        pg_queue.notify(job_id, settings)
    except Exception:  # delivery is best-effort: every worker's reaper re-delivers queued jobs
        log.exception("could not defer the Procrastinate delivery of job %s", job_id)
