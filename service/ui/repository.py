"""Database reads the pages need beyond the runs/jobs repositories (only repositories touch the session)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.models import Run, VerdictRow
from service.runs.repository import RunFilters, RunRepository

MATRIX_COLUMNS = (
    Run.id, Run.run_id, Run.model, Run.problem, Run.hardware, Run.deck, Run.harness, Run.verdict,
    Run.publish_grade, Run.reward_hack, Run.contamination, Run.started_key, Run.peak_fraction,
)


class UiRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def data_version(self) -> int:
        """Moves whenever any verdict is appended (a new run or a regrade): the matrix cache key."""
        return int(self.session.scalar(select(func.max(VerdictRow.id))) or 0)

    def matrix_rows(self, filters: RunFilters) -> list[dict[str, Any]]:
        filters = RunRepository(self.session).resolve(filters)
        stmt = (
            select(*MATRIX_COLUMNS, VerdictRow.metric)
            .outerjoin(VerdictRow, VerdictRow.id == Run.current_verdict_id)
            .where(*filters.clauses())
            .order_by(Run.id)
        )
        keys = [c.key for c in MATRIX_COLUMNS] + ["metric"]
        return [dict(zip(keys, row, strict=True)) for row in self.session.execute(stmt).all()]

    def facets(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for name in ("harness", "hardware", "deck"):
            col = getattr(Run, name)
            out[name] = [v for v in self.session.scalars(select(col).distinct().where(col.is_not(None))).all()]
            out[name].sort()
        return out
