"""Live regrade workers (`workers` table) and why a queued job is not being taken (`jobs.waiting_reason`).

Every per-GPU worker process registers one row (host, pid, GPU pool, physical GPU index, device)
and heart-beats it; a row whose heartbeat is older than `live_after_s` is a worker that died
(SIGKILL leaves no goodbye). Busy is not tracked separately: a worker is busy while a job it
claimed is `running` under its worker_id with a live lease (the jobs table stays the one truth).

A job's GPU pool is the GPU kind it needs. `waiting_reason` says, for a queued job, why nobody
runs it: no live worker serves its pool (naming the pools that are served), or every worker of
its pool is busy; NULL when a live idle worker of its pool can take it now. Workers refresh the
reasons on each heartbeat, the enqueue refreshes them after its COMMIT, and so do reads of
/jobs, so a pool whose last worker died is reported as such.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, delete, select, update

from service.db import Database
from service.models import Job, WorkerRow, utcnow
from service.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveWorker:
    worker_id: str
    gpu_pool: str
    gpu_index: int | None
    device: str
    busy: bool


def live_after_s(settings: Settings) -> float:
    """A worker is live while its heartbeat is newer than this (three beats, at least 10 s)."""
    return max(10.0, 3 * settings.worker_poll_interval_s)


def waiting_reason_for(pool: str, live: Sequence[LiveWorker]) -> str | None:
    """Why a queued job of `pool` is not being taken right now; None when an idle live worker serves it."""
    serving = [w for w in live if w.gpu_pool == pool]
    if not serving:
        others = Counter(w.gpu_pool for w in live)
        if others:
            served = ", ".join(f"'{p}' ({n} worker{'s' if n > 1 else ''})" for p, n in sorted(others.items()))
            return f"no live worker serves GPU pool '{pool}'; live workers serve {served}"
        return f"no live worker serves GPU pool '{pool}' (no live worker at all: start `kaudit worker --pool {pool}`)"
    if all(w.busy for w in serving):
        slots = ", ".join(_slot(w) for w in serving)
        return f"all {len(serving)} worker{'s' if len(serving) > 1 else ''} of GPU pool '{pool}' are busy ({slots})"
    return None


def _slot(w: LiveWorker) -> str:
    return f"{w.device} {w.gpu_index}" if w.gpu_index is not None else w.device


class WorkerRegistry:
    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings

    def register(self, worker_id: str, pool: str, gpu_index: int | None, device: str) -> None:
        now = utcnow()
        with self.db.session() as session, session.begin():
            session.execute(delete(WorkerRow).where(WorkerRow.worker_id == worker_id))
            session.add(WorkerRow(worker_id=worker_id, host=socket.gethostname(), pid=os.getpid(), gpu_pool=pool,
                                  gpu_index=gpu_index, device=device, state="idle", current_job_id=None,
                                  started_at=now, heartbeat_at=now))

    def beat(self, worker_id: str) -> None:
        """Heartbeat; state and current job read from the jobs table (what this worker is running)."""
        now = utcnow()
        with self.db.session() as session, session.begin():
            job_id = session.scalar(select(Job.id).where(Job.worker_id == worker_id, Job.state == "running")
                                    .order_by(Job.id.desc()).limit(1))
            session.execute(update(WorkerRow).where(WorkerRow.worker_id == worker_id, WorkerRow.state != "stopped")
                            .values(heartbeat_at=now, state="busy" if job_id is not None else "idle",
                                    current_job_id=job_id))

    def stop(self, worker_id: str) -> None:
        with self.db.session() as session, session.begin():
            session.execute(update(WorkerRow).where(WorkerRow.worker_id == worker_id)
                            .values(state="stopped", current_job_id=None, heartbeat_at=utcnow()))

    def live(self, now: datetime | None = None) -> list[LiveWorker]:
        now = now or utcnow()
        since = now - timedelta(seconds=live_after_s(self.settings))
        with self.db.read_session() as session:
            rows = session.scalars(select(WorkerRow).where(WorkerRow.state != "stopped",
                                                           WorkerRow.heartbeat_at >= since)).all()
            ids = [r.worker_id for r in rows]
            busy: set[str] = set()
            if ids:
                busy = {str(w) for w in session.scalars(select(Job.worker_id).where(
                    Job.state == "running", Job.worker_id.in_(ids),
                    and_(Job.lease_expires_at.is_not(None), Job.lease_expires_at >= now)))}
        return [LiveWorker(r.worker_id, r.gpu_pool, r.gpu_index, r.device, r.worker_id in busy) for r in rows]

    def refresh_waiting_reasons(self, pools: Iterable[str] | None = None) -> dict[str, str | None]:
        """Set `waiting_reason` on every queued job (per pool, one UPDATE each); clear it on the others."""
        live = self.live()
        with self.db.session() as session, session.begin():
            queued_pools = set(session.scalars(select(Job.gpu_pool).where(Job.state == "queued").distinct()))
            if pools is not None:
                queued_pools &= set(pools)
            reasons = {p: waiting_reason_for(p, live) for p in sorted(queued_pools)}
            for pool, reason in reasons.items():
                session.execute(update(Job).where(Job.state == "queued", Job.gpu_pool == pool,
                                                  Job.waiting_reason.is_distinct_from(reason))
                                .values(waiting_reason=reason))
            session.execute(update(Job).where(Job.state != "queued", Job.waiting_reason.is_not(None))
                            .values(waiting_reason=None))
        return reasons


class RegistryBeat(threading.Thread):
    """Heart-beat the given workers and refresh the waiting reasons, every `interval` seconds."""

    def __init__(self, registry: WorkerRegistry, worker_ids: Sequence[str], interval: float) -> None:
        super().__init__(daemon=True, name="kaudit-worker-registry")
        self.registry, self.worker_ids, self.interval = registry, list(worker_ids), interval
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                for w in self.worker_ids:
                    self.registry.beat(w)
                self.registry.refresh_waiting_reasons()
            except Exception:  # a DB hiccup: the next beat tries again (liveness has 3 beats of slack)
                log.exception("worker registry beat failed")
            self.stop_event.wait(self.interval)

    def stop(self) -> None:
        """Stop beating and mark the workers stopped (their queued jobs' reasons say so at once)."""
        self.stop_event.set()
        self.join(timeout=10)
        try:
            for w in self.worker_ids:
                self.registry.stop(w)
            self.registry.refresh_waiting_reasons()
        except Exception:
            log.exception("could not mark workers stopped")
