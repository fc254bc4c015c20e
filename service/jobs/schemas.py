"""Typed API shapes for regrade jobs."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from audit_rules.base import Probe


class RegradeRequest(BaseModel):
    force: bool = Field(
        default=False,
        description="enqueue a new job even if an identical one exists (one queued forced job per run)",
    )
    probes: list[Probe] | None = Field(
        default=None,
        description="probe set (default: the verdict pipeline's policy, the contract probes plus the probes the "
                    "findings ask for; stored as [])",
    )
    gpu_pool: str | None = Field(default=None, min_length=1, max_length=64)
    mode: Literal["official", "hardened", "both"] | None = Field(
        default=None, description="official (the deck's own check.py/benchmark.py), hardened (kaudit's grader and "
                                  "probes) or both (one record); default: both when the deck has a harness")


class JobOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    run_id: str
    kind: str
    state: str
    attempts: int
    max_attempts: int
    gpu_pool: str
    force: bool
    probes: list[Any]
    mode: str | None = None
    worker_id: str | None
    phase: str | None
    progress: dict[str, Any]
    error: str | None
    result: dict[str, Any] | None
    waiting_reason: str | None = Field(default=None, description="why a queued job is not being taken "
                                                                  "(no live worker of its GPU pool, all busy)")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None


class RegradeAccepted(BaseModel):
    job: JobOut
    created: bool = Field(description="false when an identical job already existed (idempotent)")


class RegradeRefused(BaseModel):
    reason: str = Field(description="previous_job_failed | force_regrade_pending | not_regradable")
    detail: str
    job: JobOut | None = Field(default=None, description="the failed job, or the forced job still queued")
