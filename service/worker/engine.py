"""The regrade job engine: claim a job with a lease, run the verdict pipeline, write the outcome at once.

The pipeline (`audit_rules.pipeline.judge`: audit -> graders.regrade -> probes -> synthesis) is the
one `kaudit audit --regrade` and the library call too; a job's empty probe set means the
pipeline's probe policy (`select_probes`), an explicit set is run as given.

The `jobs` table is the source of truth on every backend. A worker CLAIMS a job by a compare-and-
set update (state, attempts) -> (running, attempts + 1, worker_id, lease); a heartbeat thread
extends the lease and publishes phase/progress while the regrade runs; the outcome — measurement,
probe results, a NEW verdict row, the job's final state — is written in ONE transaction, and only
if the job is still ours (same worker, same attempt, still running). A worker killed with SIGKILL
therefore leaves only a `running` job whose lease expires; the next claim takes it over (attempt
counted) or, when it has used its attempts, marks it failed. No half verdict can exist.

Infra failures (graders.regrade says `infra_failure`) and crashes of our own code put the job back
in the queue until max_attempts, then fail it; they never write a `fail` verdict.

Repository functions the spine's JobRepository lacks (claim, heartbeat, finish) live here, in
`JobLeases`, so the claim logic stays in one place.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, and_, or_, select, update
from sqlalchemy.orm import Session

from audit_rules.verdicts import MeasurementStatus, Producer, VerdictResult
from graders.gpu_lock import LockConfig
from graders.results import GradeResult
from service.blobs import BlobStore
from service.db import Database
from service.models import Job, Measurement, ProbeResultRow, Run, utcnow
from service.runs.repository import RunRepository
from service.settings import Settings

log = logging.getLogger(__name__)

RegradeFn = Callable[..., GradeResult]


def default_worker_id(gpu: int | None = None) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{'cpu' if gpu is None else f'gpu{gpu}'}:{uuid.uuid4().hex[:6]}"


@dataclass
class Claim:
    job_id: int
    run_pk: int
    attempt: int
    probes: list[str]
    worker_id: str
    mode: str | None = None  # the regrade mode the job asks for (None: the deck's default)


class JobLeases:
    """Claim / heartbeat / release queries on the jobs table (both SQLite and PostgreSQL)."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self.db = db
        self.settings = settings
        self.is_pg = db.engine.dialect.name == "postgresql"

    def _lease_until(self) -> datetime:
        return utcnow() + timedelta(seconds=self.settings.worker_lease_seconds)

    def claim(self, pool: str, worker_id: str, job_id: int | None = None) -> Claim | None:
        """Take the oldest claimable job of `pool` (or exactly `job_id`); None when there is none.

        Claimable: queued, or running with an expired lease (its worker died). An expired job
        that already used all its attempts is marked failed here instead.
        """
        for _ in range(20):  # a lost CAS race just means: look again
            with self.db.session() as session, session.begin():
                now = utcnow()
                q = select(Job).where(
                    Job.kind == "regrade",
                    Job.gpu_pool == pool,
                    or_(Job.state == "queued", and_(Job.state == "running", Job.lease_expires_at < now)),
                )
                if job_id is not None:
                    q = q.where(Job.id == job_id)
                q = q.order_by(Job.id).limit(1)
                if self.is_pg:
                    q = q.with_for_update(skip_locked=True)
                job = session.scalars(q).first()
                if job is None:
                    return None
                # plain values first: the ORM update below synchronises `job` in the session
                jid, run_pk, attempts, state = job.id, job.run_id, job.attempts, job.state
                probes, previous, mode = list(job.probes or []), job.worker_id, job.mode
                expired = state == "running"
                if expired and job.attempts >= job.max_attempts:
                    done = _exec(session,
                        update(Job)
                        .where(Job.id == job.id, Job.state == "running", Job.attempts == job.attempts)
                        .values(state="failed", phase="failed", finished_at=now, lease_expires_at=None,
                                error=f"lease expired: worker {job.worker_id} stopped mid-job; "
                                      f"{job.attempts}/{job.max_attempts} attempts used")
                    )
                    log.warning("job %s failed after %s attempts (lease expired)", job.id, job.attempts)
                    if done and job_id is not None:
                        return None
                    continue
                res = _exec(
                    session,
                    update(Job)
                    .where(Job.id == jid, Job.state == state, Job.attempts == attempts)
                    .values(state="running", attempts=attempts + 1, worker_id=worker_id,
                            lease_expires_at=now + timedelta(seconds=self.settings.worker_lease_seconds),
                            heartbeat_at=now, started_at=job.started_at or now, phase="claimed",
                            progress={"previous_worker": previous} if expired else {}, finished_at=None),
                )
                if res != 1:
                    continue
                return Claim(jid, run_pk, attempts + 1, probes, worker_id, mode)
        return None

    def _owned(self, claim: Claim) -> Any:
        return and_(Job.id == claim.job_id, Job.worker_id == claim.worker_id, Job.attempts == claim.attempt,
                    Job.state == "running")

    def heartbeat(self, claim: Claim, phase: str | None, progress: dict[str, Any] | None) -> bool:
        """Extend the lease (and publish progress); False when the job is no longer ours."""
        values: dict[str, Any] = {"heartbeat_at": utcnow(), "lease_expires_at": self._lease_until()}
        if phase is not None:
            values["phase"] = phase[:64]
        if progress is not None:
            values["progress"] = progress
        with self.db.session() as session, session.begin():
            return _exec(session, update(Job).where(self._owned(claim)).values(**values)) == 1

    def requeue_or_fail(self, claim: Claim, error: str) -> str:
        """Infra failure / crash of our own code: back to the queue until max_attempts, then failed."""
        with self.db.session() as session, session.begin():
            job = session.get(Job, claim.job_id)
            if job is None:
                return "gone"
            final = job.attempts >= job.max_attempts
            state = "failed" if final else "queued"
            _exec(session,
                update(Job).where(self._owned(claim)).values(
                    state=state, phase="failed" if final else "retry_wait", error=error[-8000:],
                    lease_expires_at=None, worker_id=None if not final else claim.worker_id,
                    finished_at=utcnow() if final else None)
            )
            return state


@dataclass
class _Live:
    """Phase/progress published by the heartbeat thread (the regrade thread only writes memory)."""

    phase: str = "starting"
    progress: dict[str, Any] = field(default_factory=dict)
    dirty: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def update(self, phase: str, info: dict[str, Any]) -> None:
        with self.lock:
            if phase != "done":
                self.phase = phase
            p = self.progress
            p["phase"] = phase
            if "line" in info:
                p["lines"] = int(p.get("lines", 0)) + 1
                p["last_line"] = str(info["line"])[:300]
                m = re.match(r"shape=(\d+)", str(info["line"]))
                if m and phase == "benchmark":
                    p["benchmark_shapes_done"] = sorted({*p.get("benchmark_shapes_done", []), int(m.group(1))})
            else:
                p.setdefault("phases", {})[phase] = {k: v for k, v in info.items() if k != "line"}
        self.dirty.set()

    def snapshot(self) -> tuple[str, dict[str, Any]]:
        with self.lock:
            return self.phase, dict(self.progress)


class Heartbeat(threading.Thread):
    def __init__(self, leases: JobLeases, claim: Claim, live: _Live, interval: float) -> None:
        super().__init__(daemon=True, name=f"heartbeat-job{claim.job_id}")
        self.leases, self.claim, self.live, self.interval = leases, claim, live, interval
        self.stop_event = threading.Event()
        self.lost = False

    def run(self) -> None:
        while not self.stop_event.is_set():
            self.live.dirty.wait(timeout=self.interval)
            if self.stop_event.is_set():
                break
            self.live.dirty.clear()
            phase, progress = self.live.snapshot()
            try:
                if not self.leases.heartbeat(self.claim, phase, progress):
                    self.lost = True
                    log.warning("job %s: lease lost (taken over or cancelled)", self.claim.job_id)
                    return
            except Exception:  # a DB hiccup: try again next beat; the lease has slack
                log.exception("heartbeat failed")
            self.stop_event.wait(0.5)  # at most two progress writes a second

    def stop(self) -> None:
        self.stop_event.set()
        self.live.dirty.set()


class JobProcessor:
    """Process claimed jobs for one GPU (or the CPU) of this worker."""

    def __init__(self, settings: Settings, db: Database, *, gpu: int | None, device: str | None = None,
                 regrade_fn: RegradeFn | None = None, worker_id: str | None = None) -> None:
        self.settings = settings
        self.db = db
        self.gpu = gpu
        self.device = device or settings.worker_device
        self.leases = JobLeases(db, settings)
        self.blobs = BlobStore(settings.blob_dir)
        self.worker_id = worker_id or default_worker_id(gpu if self.device == "cuda" else None)
        if regrade_fn is None:
            from graders.regrade import regrade

            regrade_fn = regrade
        self.regrade_fn: RegradeFn = regrade_fn

    def run_once(self, pool: str, job_id: int | None = None) -> int | None:
        """Claim and process one job; returns its id, or None when nothing was claimable."""
        claim = self.leases.claim(pool, self.worker_id, job_id)
        if claim is None:
            return None
        self.process(claim)
        return claim.job_id

    def process(self, claim: Claim) -> None:
        live = _Live()
        beat = Heartbeat(self.leases, claim, live, max(0.5, self.settings.worker_lease_seconds / 3))
        beat.start()
        try:
            outcome = self._grade(claim, live)
        except Exception:
            err = traceback.format_exc()
            beat.stop()
            beat.join(timeout=10)
            state = self.leases.requeue_or_fail(claim, f"worker error (attempt {claim.attempt}):\n{err}")
            log.error("job %s: worker error, now %s", claim.job_id, state)
            return
        beat.stop()
        beat.join(timeout=10)
        if outcome is None:
            return
        grade, ctx = outcome
        if grade.infra_failure:
            state = self.leases.requeue_or_fail(
                claim, f"infra failure (attempt {claim.attempt}): {grade.detail or grade.failure_reason}")
            log.warning("job %s: infra failure (%s), now %s", claim.job_id, grade.detail, state)
            return
        if beat.lost:
            log.warning("job %s: lease lost while grading; result discarded", claim.job_id)
            return
        self._finish(claim, grade, ctx)

    # -- grading ----------------------------------------------------------------------------
    def _grade(self, claim: Claim, live: _Live) -> tuple[GradeResult, dict[str, Any]] | None:
        """The verdict pipeline (audit -> regrade -> probes -> synthesis) over the stored archive."""
        from audit_rules.pipeline import RegradeRequest, judge
        from ingest.run import parse_run
        from service.decks.service import DeckService
        from service.runs.rehydrate import unpacked_from_store

        with self.db.session() as session:
            repo = RunRepository(session)
            run = session.get(Run, claim.run_pk)
            if run is None:
                raise LookupError(f"run {claim.run_pk} of job {claim.job_id} is gone")
            artifacts = list(repo.artifacts(run.id))
            others = repo.run_ids()
            session.expunge_all()
        decks = DeckService(self.db, self.blobs, self.settings.data_dir).snapshots()
        unpacked = unpacked_from_store(run, artifacts, self.blobs)
        parsed = parse_run(unpacked, decks)
        lock = LockConfig(path_template=self.settings.gpu_lock_path,
                          timeout_s=max(self.settings.gpu_busy_timeout_s, 1.0))
        request = RegradeRequest(
            device=self.device, probes=claim.probes or None, timeout_s=self.settings.regrade_timeout_s, lock=lock,
            gpu=self.gpu or 0, progress=live.update, run_dir=f"kaudit-job-{claim.job_id}:{run.run_id}",
            regrade_fn=self.regrade_fn, mode=claim.mode or None,
            # the operator's explicit unsafe flag (regrades refuse to run without bubblewrap otherwise)
            allow_unsafe_sandbox=True if self.settings.allow_unsafe_sandbox else None,
            build_deps=self.settings.build_deps or None,
            scratch_dir=self.settings.scratch_dir, scratch_prefix=f"kaudit-job{claim.job_id}-",
        )
        t0 = time.monotonic()
        judged = judge(unpacked, parsed, decks, regrade=request, other_run_ids=others)
        wall = time.monotonic() - t0
        if judged.grade is None:
            raise LookupError(f"cannot regrade {run.run_id}: {judged.regrade_skipped}")
        return judged.grade, {"verdict": judged.verdict, "run_id": run.run_id, "wall_s": wall}

    def _verdict(self, claim: Claim, grade: GradeResult, ctx: dict[str, Any]) -> VerdictResult:
        verdict: VerdictResult = ctx["verdict"]
        verdict.produced_by = Producer.REGRADE
        prov = grade.provenance
        verdict.producer_detail = (
            f"regrade job {claim.job_id} attempt {claim.attempt} (grader {prov.grader_version if prov else '?'}, "
            f"sandbox {prov.sandbox if prov else '?'}, device {self.device}{', smoke' if prov and prov.smoke else ''})"
        )
        return verdict

    def _finish(self, claim: Claim, grade: GradeResult, ctx: dict[str, Any]) -> None:
        verdict = self._verdict(claim, grade, ctx)  # pure computation: outside the transaction
        prov = grade.provenance
        status = verdict.measurement_status.value
        if status not in (MeasurementStatus.SEQUENTIAL_ISOLATED, MeasurementStatus.SEQUENTIAL_ISOLATED_EMPIRICAL_FAILED):
            status = MeasurementStatus.SEQUENTIAL_ISOLATED.value
        with self.db.session() as session, session.begin():
            owned = _exec(session,
                update(Job).where(self.leases._owned(claim)).values(state="succeeded", phase="done",
                                                                    finished_at=utcnow(), lease_expires_at=None,
                                                                    error=None)
            )
            if owned != 1:  # taken over or cancelled meanwhile: write nothing at all
                session.rollback()
                log.warning("job %s: no longer ours at finish; result discarded", claim.job_id)
                return
            repo = RunRepository(session)
            run = session.get(Run, claim.run_pk)
            assert run is not None
            m = repo.add_measurement(Measurement(
                run_id=run.id, job_id=claim.job_id, status=status, source=f"regrade:{claim.job_id}",
                correct=grade.correct, peak_fraction=grade.peak_fraction,
                shapes=[asdict(s) for s in grade.shapes],
                provenance={**(prov.to_dict() if prov else {}), "failure_reason": grade.failure_reason,
                            "framework": grade.framework, "check_lines": grade.check_lines[-50:],
                            "benchmark_lines": grade.benchmark_lines[-80:], "detail": grade.detail,
                            **regrade_modes(grade)},
                host=prov.host if prov else None, gpu_name=prov.gpu_name if prov else None,
                gpu_index=prov.gpu_index if prov else None,
            ))
            repo.add_probe_results([
                ProbeResultRow(run_id=run.id, job_id=claim.job_id, measurement_id=m.id, probe=p.probe,
                               status=p.status.value, summary=p.summary, numbers=_json(p.numbers), device=p.device,
                               smoke=p.smoke, shape_index=p.shape_index)
                for p in grade.probes
            ])
            row = repo.append_verdict(run, verdict, job_id=claim.job_id)
            job = session.get(Job, claim.job_id)
            assert job is not None
            job.result = _json({
                "correct": grade.correct, "peak_fraction": grade.peak_fraction,
                "failure_reason": grade.failure_reason, "verdict": verdict.verdict.value,
                "reward_hack": verdict.reward_hack, "measurement_status": verdict.measurement_status.value,
                "publish_grade": verdict.publish_grade, "reasons": list(verdict.reasons[:6]),
                "measurement_id": m.id, "verdict_id": row.id, "wall_s": round(ctx["wall_s"], 3),
                "probes": [{"probe": p.probe, "status": p.status.value, "summary": p.summary} for p in grade.probes],
                "sandbox": prov.sandbox if prov else None, "smoke": prov.smoke if prov else None,
                "regrade": _json(grade.evidence()),
            })
        log.info("job %s done: verdict %s", claim.job_id, verdict.verdict.value)


def regrade_modes(grade: GradeResult) -> dict[str, Any]:
    """The mode facts stored with the measurement: which ran, which decided, each mode's own
    outcome (bounded outputs and FAIL lines) and the disagreements (graders.official)."""
    return _json({"mode": grade.mode, "decided_by": grade.decided_by or grade.mode, "official": grade.official,
                  "hardened": grade.hardened, "disagreements": list(grade.disagreements),
                  "build_fallback": grade.build_fallback})


def _exec(session: Session, stmt: Any) -> int:
    """Execute an UPDATE and return the number of rows it matched (the compare-and-set outcome)."""
    result = cast(CursorResult[Any], session.execute(stmt))
    return int(result.rowcount)


def _json(value: Any) -> Any:
    from service.jsonable import to_jsonable

    return to_jsonable(value)


class PollingWorker:
    """One thread per GPU (or one for the CPU) claiming jobs from the table by polling.

    Used embedded in `kaudit serve` (SQLite default), by `kaudit worker` on SQLite, and by
    `kaudit worker --once` on any backend.
    """

    def __init__(self, settings: Settings, db: Database, gpus: list[int], pool: str, *, once: bool = False,
                 regrade_fn: RegradeFn | None = None) -> None:
        self.settings, self.db, self.pool, self.once = settings, db, pool, once
        self.wake = threading.Event()
        self.stopping = threading.Event()
        slots: list[int | None] = list(gpus) if settings.worker_device == "cuda" else [None]
        self.processors = [JobProcessor(settings, db, gpu=g, regrade_fn=regrade_fn) for g in slots]
        self.threads = [threading.Thread(target=self._loop, args=(p,), daemon=True, name=f"kaudit-worker-{i}")
                        for i, p in enumerate(self.processors)]
        self.processed: list[int] = []

    def start(self) -> PollingWorker:
        for t in self.threads:
            t.start()
        return self

    def notify(self) -> None:
        self.wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.wake.set()
        for t in self.threads:
            t.join(timeout=timeout)

    def join(self) -> None:
        for t in self.threads:
            t.join()

    def _loop(self, proc: JobProcessor) -> None:
        while not self.stopping.is_set():
            try:
                job_id = proc.run_once(self.pool)
            except Exception:
                log.exception("worker loop error")
                job_id = None
            if job_id is not None:
                self.processed.append(job_id)
                if self.once:
                    return
                continue
            if self.once:
                return
            self.wake.wait(timeout=self.settings.worker_poll_interval_s)
            self.wake.clear()


def expired_or_queued(session: Session, pool: str) -> list[int]:
    """Jobs a worker should (re)deliver: queued, or running with an expired lease."""
    now = utcnow()
    return list(session.scalars(select(Job.id).where(
        Job.kind == "regrade", Job.gpu_pool == pool,
        or_(Job.state == "queued", and_(Job.state == "running", Job.lease_expires_at < now)),
    ).order_by(Job.id)).all())
