"""Read side of runs: pages, details, verdict history, artifacts, export rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.db import Database
from service.jobs.repository import JobRepository
from service.models import Artifact, Job, Measurement, ProbeResultRow, Run, VerdictRow
from service.runs.repository import RunFilters, RunRepository


@dataclass
class RunDetailData:
    run: Run
    verdict: VerdictRow | None
    measurements: Sequence[Measurement]
    probe_results: Sequence[ProbeResultRow]
    artifacts: Sequence[Artifact]
    jobs: Sequence[Job] = ()


class RunQueries:
    def __init__(self, db: Database) -> None:
        self.db = db

    def page(
        self, filters: RunFilters, *, sort: str, order: str, limit: int, cursor: str | None
    ) -> tuple[list[Run], str | None]:
        with self.db.read_session() as session:
            return RunRepository(session).page(filters, sort=sort, order=order, limit=limit, cursor=cursor)

    def get(self, run_id: str) -> Run | None:
        with self.db.read_session() as session:
            return RunRepository(session).by_run_id(run_id)

    def detail(self, run_id: str) -> RunDetailData | None:
        with self.db.read_session() as session:
            repo = RunRepository(session)
            run = repo.by_run_id(run_id)
            if run is None:
                return None
            return RunDetailData(
                run=run,
                verdict=repo.verdict(run.current_verdict_id),
                measurements=repo.measurements(run.id),
                probe_results=repo.probe_results(run.id),
                artifacts=repo.artifacts(run.id),
                jobs=JobRepository(session).for_run(run.id),
            )

    def verdicts(self, run_id: str) -> Sequence[VerdictRow] | None:
        with self.db.read_session() as session:
            repo = RunRepository(session)
            run = repo.by_run_id(run_id)
            return None if run is None else repo.verdicts(run.id)

    def artifact(self, run_id: str, path: str) -> Artifact | None:
        with self.db.read_session() as session:
            repo = RunRepository(session)
            run = repo.by_run_id(run_id)
            return None if run is None else repo.artifact(run.id, path)

    def run_ids(self) -> frozenset[str]:
        """Every stored run_id (the contamination rules look for other runs' ids in transcripts)."""
        with self.db.read_session() as session:
            return RunRepository(session).run_ids()

    def export_rows(self, filters: RunFilters) -> Sequence[tuple[Run, VerdictRow | None]]:
        with self.db.read_session() as session:
            return RunRepository(session).current_verdict_rows(filters)
