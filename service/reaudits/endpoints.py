"""POST /reaudit (operator token), GET /reaudits, GET /reaudits/{id} (state, progress, diff)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, status
from fastapi.responses import JSONResponse

from service.auth import require_read, require_write
from service.context import Services
from service.models import ReauditRow
from service.reaudit import ReauditParams
from service.reaudits.schemas import ReauditDetail, ReauditOut, ReauditRequest
from service.reaudits.service import ReauditBusy, ReauditRejected, ReauditService
from service.runs.endpoints import services
from service.runs.repository import RunFilters

router = APIRouter(tags=["reaudits"])

# Re-audit ids are database integers (int32 on PostgreSQL): a larger id is refused with 422, never
# handed to the database (PostgreSQL would raise on the out-of-range bind: a 500).
ReauditId = Annotated[int, Path(ge=1, le=2**31 - 1, description="the re-audit's id")]


def reaudit_service(svc: Annotated[Services, Depends(services)]) -> ReauditService:
    return ReauditService(svc.settings, svc.db)


def _links(row: ReauditRow) -> dict[str, str]:
    return {"self": f"/reaudits/{row.id}", "page": f"/ui/reaudits/{row.id}"}


def out(row: ReauditRow) -> ReauditOut:
    return ReauditOut.model_validate(row).model_copy(update={"links": _links(row)})


def params_of(req: ReauditRequest) -> ReauditParams:
    return ReauditParams(
        filters=RunFilters(model=req.model, harness=req.harness, problem=req.problem, deck=req.deck,
                           hardware=req.hardware, verdict=req.verdict, reward_hack=req.reward_hack,
                           contamination=req.contamination, publish_grade=req.publish_grade,
                           started_from=req.started_from, started_to=req.started_to),
        run_ids=req.run_ids, since_version=req.since_version, jobs=req.jobs,
        rules=[r.strip() for r in req.rules] if req.rules is not None else None, dry_run=req.dry_run)


@router.post(
    "/reaudit",
    response_model=ReauditOut,
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[Depends(require_write)],
    summary="Re-judge stored runs with the current rules (a recorded job; poll GET /reaudits/{id})",
    responses={409: {"description": "another re-audit is still running"},
               422: {"description": "bad filter, unknown rule or run id, or nothing selected (nothing stored)"}},
)
def start_reaudit(req: ReauditRequest, rs: Annotated[ReauditService, Depends(reaudit_service)]) -> JSONResponse:
    try:
        row = rs.start_background(params_of(req))
    except ReauditRejected as exc:
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail=str(exc)) from exc
    except ReauditBusy as exc:
        return JSONResponse({"detail": str(exc), "running": f"/reaudits/{exc.running_id}"},
                            status_code=status.HTTP_409_CONFLICT)
    return JSONResponse(out(row).model_dump(mode="json"), status_code=status.HTTP_202_ACCEPTED,
                        headers={"Location": f"/reaudits/{row.id}"})


@router.get("/reaudits", response_model=list[ReauditOut], dependencies=[Depends(require_read)],
            summary="Re-audits, newest first (without their diffs)")
def list_reaudits(rs: Annotated[ReauditService, Depends(reaudit_service)],
                  limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[ReauditOut]:
    return [out(r) for r in rs.listing(limit)]


@router.get("/reaudits/{reaudit_id}", response_model=ReauditDetail, dependencies=[Depends(require_read)],
            summary="One re-audit: state, progress, and (once finished) the diff",
            responses={404: {"description": "no re-audit with this id"}})
def get_reaudit(reaudit_id: ReauditId, rs: Annotated[ReauditService, Depends(reaudit_service)]) -> ReauditDetail:
    row = rs.get(reaudit_id)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no re-audit {reaudit_id}")
    return ReauditDetail.model_validate(row).model_copy(update={"links": _links(row)})
