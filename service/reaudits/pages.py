"""`/ui/reaudits/{id}`: one re-audit's state and diff as a page (the shared UI templates and CSP)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, status
from fastapi.responses import HTMLResponse

from service.auth import require_read
from service.reaudits.endpoints import ReauditId, reaudit_service
from service.reaudits.service import ReauditService
from service.ui.pages import render

router = APIRouter(include_in_schema=False)


@router.get("/ui/reaudits/{reaudit_id}", response_class=HTMLResponse, dependencies=[Depends(require_read)])
def reaudit_page(reaudit_id: ReauditId, rs: Annotated[ReauditService, Depends(reaudit_service)]) -> HTMLResponse:
    row = rs.get(reaudit_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no re-audit {reaudit_id}")
    return render("reaudit.html", r=row)
