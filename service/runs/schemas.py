"""Typed API shapes for runs (what OpenAPI documents)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.jobs.schemas import JobOut


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class FindingOut(_Out):
    rule_id: str
    rule_name: str
    severity: str
    effect: str
    file: str | None
    line_start: int | None
    line_end: int | None
    quote: str
    explanation: str
    probe: str | None
    data: dict[str, Any]


class VerdictOut(_Out):
    id: int
    verdict: str
    reward_hack: bool
    contamination: str
    template_mutated: bool | None
    correct: bool | None
    correct_source: str
    failure_reason: str | None
    measurement_status: str
    publish_grade: bool
    metric: dict[str, Any] | None
    reasons: list[Any]
    justification: dict[str, Any]
    probes_required: list[Any]
    probes_run: list[Any]
    produced_by: str
    producer_detail: str
    context: dict[str, Any]
    job_id: int | None
    created_at: datetime
    findings: list[FindingOut] = Field(default_factory=list)


class MeasurementOut(_Out):
    id: int
    status: str
    source: str
    correct: bool | None
    peak_fraction: float | None
    shapes: list[Any]
    provenance: dict[str, Any]
    host: str | None
    gpu_name: str | None
    gpu_index: int | None
    job_id: int | None
    created_at: datetime


class ProbeResultOut(_Out):
    id: int
    probe: str
    status: str
    summary: str
    numbers: dict[str, Any]
    device: str
    smoke: bool
    shape_index: int | None
    job_id: int | None
    created_at: datetime


class ArtifactOut(_Out):
    path: str
    sha256: str
    size: int
    is_text: bool
    content_type: str


class RunSummary(_Out):
    run_id: str
    archive_sha256: str
    problem: str | None
    harness: str | None
    model: str | None
    reasoning_effort: str | None
    hardware: str | None
    deck: str | None
    started_at: datetime | None
    finished_at: datetime | None
    ingested_at: datetime
    has_solution: bool | None
    session_complete: bool | None
    correct: bool | None
    failure_reason: str | None
    peak_fraction: float | None
    template_status: str | None
    regradable: bool
    not_regradable_reason: str | None
    verdict: str | None
    reward_hack: bool | None
    contamination: str | None
    publish_grade: bool | None


class RunDetail(RunSummary):
    run_group: str | None
    archive_size: int
    archive_format: str
    harness_finished_at: datetime | None
    retryable_infra_failure: bool | None
    harness_exit_code: int | None
    check_exit_code: int | None
    benchmark_exit_code: int | None
    elapsed_seconds: float | None
    total_elapsed_seconds: float | None
    check_elapsed_seconds: float | None
    benchmark_elapsed_seconds: float | None
    input_tokens: int | None
    output_tokens: int | None
    cache_read_tokens: int | None
    cache_creation_tokens: int | None
    reasoning_tokens: int | None
    total_cost_usd: float | None
    template_mutated_claim: bool | None
    template: dict[str, Any] | None
    result: dict[str, Any]
    logs: dict[str, Any]
    transcripts: list[Any]
    warnings: list[Any]
    current_verdict: VerdictOut | None = None
    measurements: list[MeasurementOut] = Field(default_factory=list)
    probe_results: list[ProbeResultOut] = Field(default_factory=list)
    artifacts: list[ArtifactOut] = Field(default_factory=list)
    jobs: list[JobOut] = Field(default_factory=list, description="the run's regrade jobs, oldest first")


class RunPage(BaseModel):
    items: list[RunSummary]
    next_cursor: str | None = Field(description="opaque; pass as `cursor` for the next page, null at the end")


class Rejection(BaseModel):
    reason: str = Field(description="machine-readable reason (ingest.model.RejectReason or a service reason)")
    detail: str
    member: str | None = None


_DETAIL_CHILDREN = frozenset({"current_verdict", "measurements", "probe_results", "artifacts", "jobs"})


def detail_from(data: Any) -> RunDetail:
    """Build a RunDetail from service.runs.queries.RunDetailData (relationships load nothing lazily)."""
    run = data.run
    base = {name: getattr(run, name) for name in RunDetail.model_fields if name not in _DETAIL_CHILDREN}
    return RunDetail.model_validate(
        {
            **base,
            "current_verdict": VerdictOut.model_validate(data.verdict) if data.verdict is not None else None,
            "measurements": [MeasurementOut.model_validate(m) for m in data.measurements],
            "probe_results": [ProbeResultOut.model_validate(p) for p in data.probe_results],
            "artifacts": [ArtifactOut.model_validate(a) for a in data.artifacts],
            "jobs": [job_out_of(j, run.run_id) for j in getattr(data, "jobs", ())],
        }
    )


def job_out_of(job: Any, run_id: str) -> JobOut:
    """A job row as the API shape (jobs are named by their run's run_id string)."""
    return JobOut.model_validate({**{c: getattr(job, c) for c in JobOut.model_fields if c != "run_id"}, "run_id": run_id})
