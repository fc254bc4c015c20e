"""Enqueue regrade jobs: idempotent per (run, archive sha256, grader version, probe set, mode, GPU pool).

The job row is committed first; only then is the worker told (`service.worker.notify_enqueued`),
so a worker never sees a job whose transaction could still roll back.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.exc import IntegrityError

from audit_rules.base import Probe
from service.db import Database
from service.jobs.repository import JobRepository
from service.models import Job
from service.runs.repository import RunRepository
from service.settings import Settings

log = logging.getLogger(__name__)

ALL_PROBES: tuple[str, ...] = tuple(p.value for p in Probe)


class UnknownRun(LookupError):
    pass


class NotRegradable(ValueError):
    pass


class ModeUnsupported(NotRegradable):
    """The request asks for a regrade mode the run's deck cannot run (a request error, not the run's state)."""


class UnknownMode(ValueError):
    """A regrade mode other than official, hardened, both."""


class UnknownProbe(ValueError):
    pass


class ForcePending(Exception):
    """A forced regrade was asked while another forced regrade of the run is still queued."""

    def __init__(self, job: Job) -> None:
        super().__init__(
            f"forced regrade job {job.id} of this run is still queued; another is accepted once it has started "
            "(one queued at a time), so nothing was enqueued"
        )
        self.job = job


@dataclass
class EnqueueOutcome:
    job: Job
    created: bool


def grader_version() -> str:
    import graders

    return str(getattr(graders, "GRADER_VERSION", "unknown"))


DEFAULT_GPU_POOL = "default"  # jobs.gpu_pool's column default and Settings.worker_gpu_pool's


def idempotency_key(run_pk: int, archive_sha256: str, version: str, probes: Sequence[str],
                    mode: str | None = None, gpu_pool: str = DEFAULT_GPU_POOL) -> str:
    """Two requests differing in probe set, mode or the (resolved) GPU pool are distinct jobs."""
    raw = f"{run_pk}|{archive_sha256}|{version}|{','.join(sorted(set(probes)))}"
    if mode is not None:  # keys of default-mode jobs keep their earlier value
        raw += f"|mode={mode}"
    if gpu_pool != DEFAULT_GPU_POOL:  # likewise keys of default-pool jobs
        raw += f"|pool={gpu_pool}"
    return "regrade:" + hashlib.sha256(raw.encode()).hexdigest()


def notify_worker(job_id: int, settings: Settings) -> None:
    """Tell service.worker a job was committed, when that module offers the hook."""
    try:
        worker = importlib.import_module("service.worker")
    except ModuleNotFoundError as exc:
        if exc.name not in ("service.worker",):
            raise
        return
    hook = getattr(worker, "notify_enqueued", None)
    if hook is not None:
        hook(job_id, settings)


class JobService:
    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db

    def enqueue_regrade(
        self, run_id: str, *, force: bool = False, probes: Sequence[str] | None = None, gpu_pool: str | None = None,
        mode: str | None = None,
    ) -> EnqueueOutcome:
        from graders.official import MODES

        if mode is not None and mode not in MODES:
            raise UnknownMode(f"unknown regrade mode {mode!r}; known: {', '.join(MODES)}")
        # No explicit set: an empty one, which the worker's verdict pipeline reads as its probe
        # policy (audit_rules.pipeline.select_probes: the contract probes plus what the findings
        # ask for), the same policy `kaudit audit --regrade` applies.
        probe_set = sorted(set(probes)) if probes else []
        if mode in ("official", "hardened"):
            refusal = self._mode_refusal(run_id, mode)
            if refusal:
                raise ModeUnsupported(refusal)
        unknown = [p for p in probe_set if p not in ALL_PROBES]
        if unknown:
            raise UnknownProbe(f"unknown probe(s): {', '.join(unknown)}; known: {', '.join(ALL_PROBES)}")
        with self.db.session() as session:
            runs, jobs = RunRepository(session), JobRepository(session)
            with session.begin():
                run = runs.by_run_id(run_id)
                if run is None:
                    raise UnknownRun(run_id)
                if not run.regradable:
                    raise NotRegradable(run.not_regradable_reason or "run cannot be regraded")
                pool = gpu_pool or self.settings.worker_gpu_pool
                key = idempotency_key(run.id, run.archive_sha256, grader_version(), probe_set, mode, pool)
                if not force:
                    existing = jobs.by_key(key)
                    if existing is not None:
                        return EnqueueOutcome(existing, False)
                else:
                    # At most one queued forced job per run: the partial unique index
                    # uq_jobs_queued_force_run_id holds it against concurrent requests too.
                    pending = jobs.queued_forced(run.id)
                    if pending is not None:
                        session.expunge(pending)  # stays readable after the rollback
                        raise ForcePending(pending)
                    key = f"{key}:force:{uuid.uuid4().hex}"
                try:
                    with session.begin_nested():
                        job = jobs.add(
                            Job(
                                run_id=run.id,
                                kind="regrade",
                                state="queued",
                                idempotency_key=key,
                                force=force,
                                probes=probe_set,
                                mode=mode,
                                attempts=0,
                                max_attempts=self.settings.worker_max_attempts,
                                gpu_pool=pool,
                                progress={},
                            )
                        )
                except IntegrityError:  # a concurrent identical (or forced) request committed first
                    existing = jobs.by_key(key)
                    if existing is not None:
                        return EnqueueOutcome(existing, False)
                    pending = jobs.queued_forced(run.id) if force else None
                    if pending is None:
                        raise
                    session.expunge(pending)
                    raise ForcePending(pending) from None
        notify_worker(job.id, self.settings)  # after COMMIT
        job.waiting_reason = self.refresh_waiting_reasons([job.gpu_pool]).get(job.gpu_pool, job.waiting_reason)
        return EnqueueOutcome(job, True)

    def _mode_refusal(self, run_id: str, mode: str) -> str | None:
        """Why the run's deck cannot be graded in `mode` (None: it can, or the worker will say)."""
        from graders.official import mode_unsupported
        from service.blobs import BlobStore
        from service.decks.service import DeckService

        with self.db.session() as session:
            run = RunRepository(session).by_run_id(run_id)
            problem, deck = (run.problem, run.deck) if run is not None else (None, None)
        if not problem:
            return None
        snaps = DeckService(self.db, BlobStore(self.settings.blob_dir), self.settings.data_dir).snapshots()
        holders = [d for d in snaps if problem in d.problems and d.root is not None]
        holder = next((d for d in holders if d.name == deck), holders[0] if holders else None)
        if holder is None or holder.root is None:
            return None
        why = mode_unsupported(Path(holder.root) / problem, mode)
        return f"--mode {mode} cannot grade {problem} of deck {holder.name}: {why}" if why else None

    def refresh_waiting_reasons(self, pools: Sequence[str] | None = None) -> dict[str, str | None]:
        """Say on each queued job why no worker takes it (no live worker of its GPU pool, all busy)."""
        from service.worker.registry import WorkerRegistry

        try:
            return WorkerRegistry(self.db, self.settings).refresh_waiting_reasons(pools)
        except Exception:  # advisory only: never fail an enqueue or a read over it
            log.exception("could not refresh jobs.waiting_reason")
            return {}

    def get(self, job_id: int) -> Job | None:
        with self.db.session() as session:
            return JobRepository(session).get(job_id)

    def get_with_run_id(self, job_id: int) -> tuple[Job, str] | None:
        """The job and its run's run_id string (API shapes name runs by run_id)."""
        self.refresh_waiting_reasons()
        with self.db.session() as session:
            return JobRepository(session).get_with_run_id(job_id)

    def listing(
        self, *, run_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> Sequence[tuple[Job, str]]:
        if state in (None, "queued"):
            self.refresh_waiting_reasons()
        with self.db.session() as session:
            return JobRepository(session).listing(run_id=run_id, state=state, limit=limit)

    def counts_by_state(self) -> dict[str, int]:
        with self.db.session() as session:
            return JobRepository(session).counts_by_state()
