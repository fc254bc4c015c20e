"""Database access for re-audit records (the `reaudits` table)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.models import ReauditRow, Run


class ReauditRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, reaudit_id: int) -> ReauditRow | None:
        return self.session.get(ReauditRow, reaudit_id)

    def listing(self, limit: int = 50) -> Sequence[ReauditRow]:
        return self.session.scalars(select(ReauditRow).order_by(ReauditRow.id.desc()).limit(limit)).all()

    def running(self) -> Sequence[ReauditRow]:
        return self.session.scalars(select(ReauditRow).where(ReauditRow.state == "running")
                                    .order_by(ReauditRow.id)).all()

    def add(self, row: ReauditRow) -> ReauditRow:
        self.session.add(row)
        self.session.flush()
        return row

    def update_running(self, reaudit_id: int, **values: Any) -> bool:
        """Update a record that is still running (a record already finished or failed stays as it is)."""
        res = self.session.execute(update(ReauditRow).where(ReauditRow.id == reaudit_id,
                                                            ReauditRow.state == "running").values(**values))
        return bool(getattr(res, "rowcount", 0))

    def unknown_run_ids(self, run_ids: Sequence[str]) -> list[str]:
        known: set[str] = set()
        wanted = sorted(set(run_ids))
        for i in range(0, len(wanted), 500):  # bound the IN list
            chunk = wanted[i:i + 500]
            known.update(self.session.scalars(select(Run.run_id).where(Run.run_id.in_(chunk))).all())
        return [r for r in wanted if r not in known]

    def mark_failed(self, reaudit_id: int, error: str, when: datetime) -> bool:
        return self.update_running(reaudit_id, state="failed", error=error, finished_at=when)
