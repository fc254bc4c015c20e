"""The audit log: one append-only row per upload, regrade, deck import, re-audit or token change.

Rows name the actor (service.auth.Principal.actor for the API, `cli:<user>` for the CLI), never a
token. Writing a row never fails the action it records: a failure to log is itself logged.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select

from service.db import Database
from service.jsonable import to_jsonable
from service.models import AuditEvent

log = logging.getLogger(__name__)

ACTIONS = ("upload", "regrade", "deck_import", "reaudit", "token_add", "token_revoke", "gc")


class AuditLog:
    def __init__(self, db: Database) -> None:
        self.db = db

    def record(
        self,
        *,
        actor: str,
        role: str | None,
        door: str,
        action: str,
        outcome: str,
        target: str | None = None,
        detail: dict[str, Any] | None = None,
    ) -> None:
        event = AuditEvent(
            actor=actor[:128],
            role=role,
            door=door,
            action=action,
            target=target[:255] if target is not None else None,
            outcome=outcome[:32],
            detail=to_jsonable(detail or {}),
        )
        try:
            with self.db.session() as session, session.begin():
                session.add(event)
        except Exception:
            log.exception("could not write the audit event %s %s by %s", action, target, actor)

    def listing(
        self, *, action: str | None = None, actor: str | None = None, before_id: int | None = None, limit: int = 100
    ) -> Sequence[AuditEvent]:
        """Newest first."""
        stmt = select(AuditEvent)
        if action is not None:
            stmt = stmt.where(AuditEvent.action == action)
        if actor is not None:
            stmt = stmt.where(AuditEvent.actor == actor)
        if before_id is not None:
            stmt = stmt.where(AuditEvent.id < before_id)
        with self.db.read_session() as session:
            return session.scalars(stmt.order_by(AuditEvent.id.desc()).limit(limit)).all()
