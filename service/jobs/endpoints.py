"""GET /jobs (filtered list) and GET /jobs/{id}: state, attempts, phase and per-shape progress of regrade jobs."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, HTTPException, Path, Query, status

from service.auth import require_read
from service.context import Services
from service.jobs.schemas import JobOut
from service.runs.endpoints import job_out, services

router = APIRouter(tags=["jobs"])

JobState = Literal["queued", "running", "succeeded", "failed", "cancelled"]


@router.get("/jobs", response_model=list[JobOut], dependencies=[Depends(require_read)], summary="List jobs, newest first")
def list_jobs(
    svc: Annotated[Services, Depends(services)],
    run_id: str | None = None,
    state: JobState | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> list[JobOut]:
    return [job_out(job, rid) for job, rid in svc.jobs.listing(run_id=run_id, state=state, limit=limit)]


@router.get("/jobs/{job_id}", response_model=JobOut, dependencies=[Depends(require_read)])
def get_job(
    job_id: Annotated[int, Path(ge=1, le=2**31 - 1)], svc: Annotated[Services, Depends(services)]
) -> JobOut:
    found = svc.jobs.get_with_run_id(job_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no job {job_id}")
    job, run_id = found
    return job_out(job, run_id)
