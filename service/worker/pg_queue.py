"""PostgreSQL delivery through Procrastinate: queues per GPU pool, LISTEN/NOTIFY wake-ups, many hosts.

Why Procrastinate: it is PostgreSQL-only (no broker to run next to the database we already have),
has named queues (one per GPU pool: `kaudit-regrade-<pool>`), queueing locks (one pending delivery
per job), and a worker with bounded concurrency (one slot per GPU of the host).

Division of labour: the `jobs` table stays the source of truth (state, attempts, lease, result);
a Procrastinate job only DELIVERS a job id to some worker of the right pool. The task claims the
job through `JobLeases` exactly as the polling worker does, so a stale or duplicate delivery is
harmless (the claim simply finds nothing). Recovery from a SIGKILLed worker does not rely on
Procrastinate's stalled-job handling: each worker runs a reaper that re-delivers jobs that are
queued or whose lease expired, and the claim counts the attempt (or fails the job at max).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from typing import Any

import procrastinate
from procrastinate.exceptions import AlreadyEnqueued
from sqlalchemy.engine import make_url

from service.db import Database
from service.settings import Settings
from service.worker.engine import JobProcessor, RegradeFn, expired_or_queued

log = logging.getLogger(__name__)

TASK_NAME = "kaudit.regrade"
_runtime: dict[str, Any] = {}
_schema_lock = threading.Lock()


def queue_name(pool: str) -> str:
    return f"kaudit-regrade-{pool}"


def conninfo(database_url: str) -> str:
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


def _regrade_task(job_id: int) -> None:
    """Runs in a Procrastinate worker thread: take a free GPU slot, claim and process the job."""
    slots: queue.Queue[JobProcessor] = _runtime["slots"]
    proc = slots.get()
    try:
        proc.run_once(_runtime["pool"], job_id=job_id)
    finally:
        slots.put(proc)


def make_app(settings: Settings, *, sync: bool) -> procrastinate.App:
    info = conninfo(settings.database_url)
    connector: Any = (procrastinate.SyncPsycopgConnector(conninfo=info) if sync
                      else procrastinate.PsycopgConnector(conninfo=info))
    app = procrastinate.App(connector=connector)
    app.task(name=TASK_NAME, pass_context=False)(_regrade_task)
    return app


def ensure_schema(settings: Settings) -> None:
    """Apply Procrastinate's schema once per database (guarded by an advisory lock)."""
    import psycopg

    with _schema_lock, psycopg.connect(conninfo(settings.database_url), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(7302001)")
        try:
            row = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
            if row is None or row[0] is None:
                app = make_app(settings, sync=True)
                with app.open():
                    app.schema_manager.apply_schema()
        finally:
            conn.execute("SELECT pg_advisory_unlock(7302001)")


def defer(app: procrastinate.App, job_id: int, pool: str) -> bool:
    """Deliver a job id to the pool's queue; False when a delivery is already pending."""
    try:
        app.configure_task(TASK_NAME, queue=queue_name(pool), queueing_lock=f"kaudit-job-{job_id}").defer(
            job_id=job_id)
        return True
    except AlreadyEnqueued:
        return False


def notify(job_id: int, settings: Settings) -> None:
    """After the enqueue transaction committed: defer the Procrastinate delivery of this job."""
    from service.models import Job

    db = Database(settings)
    try:
        with db.session() as session:
            job = session.get(Job, job_id)
            pool = job.gpu_pool if job is not None else settings.worker_gpu_pool
    finally:
        db.dispose()
    ensure_schema(settings)
    app = make_app(settings, sync=True)
    with app.open():
        defer(app, job_id, pool)


class Reaper(threading.Thread):
    """Re-deliver queued jobs and jobs whose lease expired (their worker died)."""

    def __init__(self, settings: Settings, db: Database, pool: str) -> None:
        super().__init__(daemon=True, name="kaudit-reaper")
        self.settings, self.db, self.pool = settings, db, pool
        self.stop_event = threading.Event()

    def run(self) -> None:
        app = make_app(self.settings, sync=True)
        with app.open():
            while not self.stop_event.is_set():
                try:
                    with self.db.session() as session:
                        ids = expired_or_queued(session, self.pool)
                    for job_id in ids:
                        defer(app, job_id, self.pool)
                except Exception:
                    log.exception("reaper pass failed")
                self.stop_event.wait(self.settings.worker_poll_interval_s)


def run(settings: Settings, gpus: list[int], pool: str, regrade_fn: RegradeFn | None = None,
        worker_ids: dict[int | None, str] | None = None) -> int:
    """`kaudit worker` on PostgreSQL: a Procrastinate worker with one slot per GPU, plus the reaper.

    `worker_ids` names the slots (the per-GPU worker of service.worker.multi registers its id)."""
    ensure_schema(settings)
    db = Database(settings)
    slots: queue.Queue[JobProcessor] = queue.Queue()
    devices: list[int | None] = list(gpus) if settings.worker_device == "cuda" else [None]
    for g in devices:
        slots.put(JobProcessor(settings, db, gpu=g, regrade_fn=regrade_fn,
                               worker_id=(worker_ids or {}).get(g)))
    _runtime.update(slots=slots, pool=pool)
    reaper = Reaper(settings, db, pool)
    reaper.start()
    app = make_app(settings, sync=False)
    try:
        app.run_worker(queues=[queue_name(pool)], concurrency=len(devices), wait=True,
                       fetch_job_polling_interval=settings.worker_poll_interval_s, install_signal_handlers=True,
                       delete_jobs="successful")
    finally:
        reaper.stop_event.set()
        with contextlib.suppress(Exception):
            reaper.join(timeout=5)
        db.dispose()
    return 0
