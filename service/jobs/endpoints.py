"""GET /jobs/{id}: state, attempts, phase and per-shape progress of a regrade job."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, status

from service.auth import require_read
from service.context import Services
from service.jobs.schemas import JobOut
from service.runs.endpoints import job_out, services

router = APIRouter(tags=["jobs"])


@router.get("/jobs/{job_id}", response_model=JobOut, dependencies=[Depends(require_read)])
def get_job(job_id: int, svc: Annotated[Services, Depends(services)]) -> JobOut:
    found = svc.jobs.get_with_run_id(job_id)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no job {job_id}")
    job, run_id = found
    return job_out(job, run_id)
