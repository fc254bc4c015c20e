"""Database access for jobs (the enqueue side; service.worker has its own claim/lease queries)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.models import Job, Run


class JobRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, job_id: int) -> Job | None:
        return self.session.get(Job, job_id)

    def get_with_run_id(self, job_id: int) -> tuple[Job, str] | None:
        row = self.session.execute(
            select(Job, Run.run_id).join(Run, Run.id == Job.run_id).where(Job.id == job_id)
        ).one_or_none()
        return None if row is None else (row[0], row[1])

    def by_key(self, key: str) -> Job | None:
        return self.session.scalars(select(Job).where(Job.idempotency_key == key)).one_or_none()

    def for_run(self, run_pk: int) -> Sequence[Job]:
        return self.session.scalars(select(Job).where(Job.run_id == run_pk).order_by(Job.id)).all()

    def listing(
        self, *, run_id: str | None = None, state: str | None = None, limit: int = 100
    ) -> Sequence[tuple[Job, str]]:
        """Newest first, with each job's run_id string."""
        stmt = select(Job, Run.run_id).join(Run, Run.id == Job.run_id)
        if run_id is not None:
            stmt = stmt.where(Run.run_id == run_id)
        if state is not None:
            stmt = stmt.where(Job.state == state)
        return [(r[0], r[1]) for r in self.session.execute(stmt.order_by(Job.id.desc()).limit(limit)).all()]

    def queued_forced(self, run_pk: int) -> Job | None:
        """The run's queued forced regrade, if any (uq_jobs_queued_force_run_id allows one)."""
        return self.session.scalars(
            select(Job).where(Job.run_id == run_pk, Job.state == "queued", Job.force.is_(True)).limit(1)
        ).first()

    def add(self, job: Job) -> Job:
        self.session.add(job)
        self.session.flush()
        return job

    def counts_by_state(self) -> dict[str, int]:
        rows = self.session.execute(select(Job.state, func.count(Job.id)).group_by(Job.state)).all()
        return {str(state): int(n) for state, n in rows}
