"""Regrade job consumption (the enqueue side is service.jobs).

Doors:
* `start_inprocess_worker(settings)` — `kaudit serve` with the embedded default: a polling thread
  in the API process (SQLite or PostgreSQL), zero extra servers. Returns an object with `stop()`.
* `kaudit worker --gpus all|0,1 --pool h200` — one worker PROCESS per GPU (service.worker.multi),
  each pinned with CUDA_VISIBLE_DEVICES, registered in `workers` (service.worker.registry), taking
  one job at a time: on PostgreSQL a Procrastinate worker with one slot, on SQLite (or `--once`)
  the polling loop. Queued jobs say why they wait (`jobs.waiting_reason`).
* `run_worker(settings, gpus, pool, once)` — the older one-process form (one thread per GPU),
  kept for library callers.
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
from service.worker.registry import RegistryBeat, WorkerRegistry

__all__ = ["JobLeases", "JobProcessor", "PollingWorker", "notify_enqueued", "run_worker", "start_inprocess_worker"]

log = logging.getLogger(__name__)

_inprocess: list[PollingWorker] = []
_inprocess_lock = threading.Lock()


class InprocessWorker:
    def __init__(self, worker: PollingWorker, db: Database, beat: RegistryBeat | None = None) -> None:
        self.worker = worker
        self.db = db
        self.beat = beat

    def notify(self) -> None:
        self.worker.notify()

    def stop(self) -> None:
        self.worker.stop()
        if self.beat is not None:
            self.beat.stop()
        with _inprocess_lock:
            if self.worker in _inprocess:
                _inprocess.remove(self.worker)
        self.db.dispose()


def start_inprocess_worker(settings: Settings, regrade_fn: RegradeFn | None = None) -> InprocessWorker:
    db = Database(settings)
    worker = PollingWorker(settings, db, settings.gpu_indices, settings.worker_gpu_pool, regrade_fn=regrade_fn)
    beat = register_slots(settings, db, worker)
    worker.start()
    with _inprocess_lock:
        _inprocess.append(worker)
    return InprocessWorker(worker, db, beat)


def register_slots(settings: Settings, db: Database, worker: PollingWorker) -> RegistryBeat:
    """Register the embedded worker's slots in `workers` (so queued jobs are not reported unserved)."""
    registry = WorkerRegistry(db, settings)
    for p in worker.processors:
        registry.register(p.worker_id, worker.pool, p.gpu if p.device == "cuda" else None, p.device)
    beat = RegistryBeat(registry, [p.worker_id for p in worker.processors], settings.worker_poll_interval_s)
    beat.start()
    return beat


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
