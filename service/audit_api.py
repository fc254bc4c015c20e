"""GET /audit-log: who uploaded, regraded, imported decks, re-audited (admin tokens only)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict

from service.audit_log import ACTIONS
from service.auth import require_admin
from service.context import Services
from service.runs.endpoints import services

router = APIRouter(tags=["meta"])

Action = Literal["upload", "regrade", "deck_import", "reaudit", "token_add", "token_revoke", "gc"]
assert set(Action.__args__) == set(ACTIONS)  # type: ignore[attr-defined]


class AuditEventOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    created_at: datetime
    actor: str
    role: str | None
    door: str
    action: str
    target: str | None
    outcome: str
    detail: dict[str, Any]


@router.get(
    "/audit-log",
    response_model=list[AuditEventOut],
    dependencies=[Depends(require_admin)],
    summary="The audit log, newest first (admin)",
)
def audit_log(
    svc: Annotated[Services, Depends(services)],
    action: Action | None = None,
    actor: Annotated[str | None, Query(max_length=128)] = None,
    before_id: Annotated[int | None, Query(ge=1, le=2**31 - 1, description="page: events older than this id")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[AuditEventOut]:
    rows = svc.audit.listing(action=action, actor=actor, before_id=before_id, limit=limit)
    return [AuditEventOut.model_validate(r) for r in rows]
