"""REST endpoints for runs. Thin: parse the request, call a service, shape the answer."""

from __future__ import annotations

import json
import logging
import os
import re
import uuid
from datetime import datetime
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, File, HTTPException, Query, Request, UploadFile, status
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from pydantic import BeforeValidator
from sqlalchemy.exc import OperationalError

from audit_rules.verdicts import Contamination, Verdict
from ingest.archive import is_storage_fault
from ingest.model import ArchiveRejected, RejectReason
from service.auth import Principal, require_read, require_write
from service.context import Services
from service.errors import ApiError, ErrorBody
from service.jobs.schemas import JobOut, RegradeAccepted, RegradeRefused, RegradeRequest
from service.jobs.service import ForcePending, ModeUnsupported, NotRegradable, UnknownProbe, UnknownRun
from service.metrics import INGESTS, REJECTIONS
from service.models import Job
from service.runs.rehydrate import unpacked_from_store, verdict_from_row
from service.runs.repository import BadCursor, RunFilters
from service.runs.schemas import (
    FindingOut,
    Rejection,
    RunDetail,
    RunPage,
    RunSummary,
    VerdictOut,
    detail_from,
    job_out_of,
)
from service.runs.service import RunConflict

log = logging.getLogger(__name__)
router = APIRouter(tags=["runs"])

SIZE_REASONS = frozenset(
    {
        RejectReason.TOTAL_TOO_LARGE,
        RejectReason.FILE_TOO_LARGE,
        RejectReason.TOO_MANY_MEMBERS,
        RejectReason.COMPRESSION_RATIO,
    }
)
REJECTION_RESPONSES: dict[int | str, dict[str, object]] = {
    400: {"model": Rejection, "description": "bad archive (nothing stored)"},
    507: {"model": Rejection, "description": "the server's storage is full (nothing stored; retry later)"},
    409: {"model": Rejection, "description": "another archive already holds this run_id"},
    413: {"model": Rejection, "description": "upload or unpacked content over a limit (nothing stored)"},
    415: {"model": Rejection, "description": "not a tar, tar.gz or zip archive"},
}


async def services(request: Request) -> Services:
    svc: Services = request.app.state.services
    return svc


def rejection_response(exc: ArchiveRejected) -> JSONResponse:
    REJECTIONS.labels(reason=exc.reason.value).inc()
    if exc.reason in SIZE_REASONS:
        code = status.HTTP_413_CONTENT_TOO_LARGE
    elif exc.reason is RejectReason.UNSUPPORTED_FORMAT:
        code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE
    else:
        code = status.HTTP_400_BAD_REQUEST
    body = Rejection(reason=exc.reason.value, detail=exc.message, member=exc.member)
    return JSONResponse(body.model_dump(), status_code=code)


def job_out(job: Job, run_id: str) -> JobOut:
    return job_out_of(job, run_id)




def _blank_is_none(value: object) -> object:
    """`?verdict=` (how a client writes "no value") means no filter, not an unknown verdict."""
    return None if value == "" else value


def _iso_only(value: object) -> object:
    """Query datetimes are ISO-8601 only: pydantic would read `0.5` or `1700000000` as Unix time."""
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.match(value.strip())):
        raise ValueError("expected an ISO-8601 date or date-time (e.g. 2026-08-01T22:43:38Z), not a number")
    return value


_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
OptionalIsoDateTime = Annotated[datetime | None, BeforeValidator(_iso_only)]


@router.post(
    "/runs",
    response_model=RunDetail,
    status_code=status.HTTP_201_CREATED,
    responses={200: {"model": RunDetail, "description": "archive already stored: the existing run"}, **REJECTION_RESPONSES},
    summary="Upload a run archive (multipart field `archive`)",
)
def upload_run(
    archive: Annotated[UploadFile, File(description="the run archive: .tar, .tar.gz/.tgz or .zip")],
    svc: Annotated[Services, Depends(services)],
    who: Annotated[Principal, Depends(require_write)],
) -> Response:
    response, run_id = _upload(archive, svc)
    outcome = {201: "created", 200: "existing"}.get(response.status_code)
    if outcome is None:
        outcome = f"refused:{json.loads(bytes(response.body)).get('reason', response.status_code)}"
    svc.audit.record(
        actor=who.actor, role=who.role.name if who.role else None, door="api", action="upload",
        target=run_id, outcome=outcome, detail={"filename": (archive.filename or "")[:255], "status": response.status_code},
    )
    return response


def _upload(archive: UploadFile, svc: Services) -> tuple[JSONResponse, str | None]:
    settings = svc.settings
    upload = settings.staging_dir / f"upload-{uuid.uuid4().hex}"
    try:
        settings.staging_dir.mkdir(parents=True, exist_ok=True)
        written = 0
        with open(upload, "wb") as out:
            while chunk := archive.file.read(1 << 20):
                written += len(chunk)
                if written > settings.max_archive_bytes:
                    return rejection_response(
                        ArchiveRejected(
                            RejectReason.TOTAL_TOO_LARGE,
                            f"upload is over the {settings.max_archive_bytes} byte limit",
                        )
                    ), None
                out.write(chunk)
        try:
            outcome = svc.ingest.ingest_file(upload)
        except ArchiveRejected as exc:
            return rejection_response(exc), None
        except RunConflict as exc:
            REJECTIONS.labels(reason="run_id_conflict").inc()
            return JSONResponse(
                Rejection(reason="run_id_conflict", detail=str(exc)).model_dump(), status_code=status.HTTP_409_CONFLICT
            ), exc.run_id
    except (OSError, OperationalError) as exc:
        if not is_storage_full(exc):
            raise
        # The server ran out of space: its fault, not the archive's; the ingest rolled back.
        REJECTIONS.labels(reason="insufficient_storage").inc()
        log.error("ingest refused, storage full: %s", exc)
        return JSONResponse(
            Rejection(
                reason="insufficient_storage",
                detail="the server has no space left to store this upload; nothing was stored, retry later",
            ).model_dump(),
            status_code=status.HTTP_507_INSUFFICIENT_STORAGE,
        ), None
    finally:
        try:
            upload.unlink(missing_ok=True)
        except OSError:
            pass
    INGESTS.labels(outcome="created" if outcome.created else "existing").inc()
    detail = _detail(svc, outcome.run.run_id)
    return JSONResponse(
        detail.model_dump(mode="json"), status_code=status.HTTP_201_CREATED if outcome.created else status.HTTP_200_OK
    ), outcome.run.run_id


def is_storage_full(exc: BaseException) -> bool:
    """ENOSPC/EDQUOT from a write, or SQLite's "database or disk is full"."""
    if is_storage_fault(exc):
        return True
    if isinstance(exc, OperationalError):
        return is_storage_fault(exc.orig) if isinstance(exc.orig, OSError) else "disk is full" in str(exc.orig)
    return False


def _detail(svc: Services, run_id: str) -> RunDetail:
    data = svc.runs.detail(run_id)
    if data is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no run {run_id}")
    return detail_from(data)


@router.get(
    "/runs",
    response_model=RunPage,
    dependencies=[Depends(require_read)],
    summary="List runs",
    responses={400: {"model": ErrorBody, "description": "the cursor is not one this server issued"}},
)
def list_runs(
    svc: Annotated[Services, Depends(services)],
    model: str | None = None,
    harness: str | None = None,
    problem: str | None = None,
    deck: str | None = None,
    hardware: str | None = None,
    verdict: Annotated[Verdict | None, BeforeValidator(_blank_is_none)] = None,
    reward_hack: bool | None = None,
    contamination: Annotated[Contamination | None, BeforeValidator(_blank_is_none)] = None,
    publish_grade: bool | None = None,
    started_from: Annotated[OptionalIsoDateTime, Query(description="started_at >= (ISO-8601)")] = None,
    started_to: Annotated[OptionalIsoDateTime, Query(description="started_at < (ISO-8601)")] = None,
    sort: Literal["started_at", "ingested", "peak_fraction", "run_id"] = "started_at",
    order: Literal["asc", "desc"] = "desc",
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: str | None = None,
) -> RunPage:
    filters = RunFilters(
        model=model,
        harness=harness,
        problem=problem,
        deck=deck,
        hardware=hardware,
        verdict=verdict.value if verdict is not None else None,
        reward_hack=reward_hack,
        contamination=contamination.value if contamination is not None else None,
        publish_grade=publish_grade,
        started_from=started_from,
        started_to=started_to,
    )
    try:
        rows, next_cursor = svc.runs.page(filters, sort=sort, order=order, limit=limit, cursor=cursor)
    except BadCursor as exc:
        raise ApiError(status.HTTP_400_BAD_REQUEST, "bad_cursor", str(exc)) from exc
    return RunPage(items=[RunSummary.model_validate(r) for r in rows], next_cursor=next_cursor)


@router.get("/runs/{run_id}", response_model=RunDetail, dependencies=[Depends(require_read)])
def get_run(run_id: str, svc: Annotated[Services, Depends(services)]) -> RunDetail:
    return _detail(svc, run_id)


@router.get("/runs/{run_id}/verdicts", response_model=list[VerdictOut], dependencies=[Depends(require_read)])
def run_verdicts(run_id: str, svc: Annotated[Services, Depends(services)]) -> list[VerdictOut]:
    rows = svc.runs.verdicts(run_id)
    if rows is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no run {run_id}")
    return [VerdictOut.model_validate(v) for v in rows]


@router.get("/runs/{run_id}/findings", response_model=list[FindingOut], dependencies=[Depends(require_read)])
def run_findings(run_id: str, svc: Annotated[Services, Depends(services)]) -> list[FindingOut]:
    data = svc.runs.detail(run_id)
    if data is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no run {run_id}")
    return [FindingOut.model_validate(f) for f in (data.verdict.findings if data.verdict else [])]


@router.get(
    "/runs/{run_id}/files/{path:path}",
    dependencies=[Depends(require_read)],
    responses={200: {"content": {"text/plain": {}, "application/octet-stream": {}}}},
    summary="A stored artifact, served as text or as a download (never rendered as HTML)",
)
def run_file(run_id: str, path: str, svc: Annotated[Services, Depends(services)]) -> Response:
    artifact = svc.runs.artifact(run_id, path)
    if artifact is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no file {path!r} in run {run_id}")
    blob = svc.blobs.path(artifact.blob_key)
    if not blob.is_file():
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, detail="stored blob is missing")
    name = path.rsplit("/", 1)[-1]
    headers = {
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
        "Cache-Control": "private, max-age=3600",
    }
    if artifact.is_text:
        return FileResponse(
            blob, media_type="text/plain; charset=utf-8", headers=headers, content_disposition_type="inline",
            filename=name,
        )
    return FileResponse(
        blob, media_type="application/octet-stream", headers=headers, content_disposition_type="attachment",
        filename=name,
    )


@router.get(
    "/runs/{run_id}/report.md",
    response_class=PlainTextResponse,
    dependencies=[Depends(require_read)],
    responses={200: {"content": {"text/markdown": {}}}},
    summary="The audit report of the current verdict, as Markdown",
)
def run_report(run_id: str, svc: Annotated[Services, Depends(services)]) -> Response:
    from audit_rules import kaudit_version
    from audit_rules.report import render_markdown
    from ingest.run import parse_run

    data = svc.runs.detail(run_id)
    if data is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"no run {run_id}")
    if data.verdict is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, detail=f"run {run_id} has no verdict yet")
    # Verdict rows are append-only, so a report is a pure function of (verdict row, archive,
    # kaudit version): render once (re-parsing a large transcript takes seconds), then serve the file.
    cached = svc.settings.report_cache_dir / f"{data.verdict.id}-{data.run.archive_sha256[:16]}-{kaudit_version()}.md"
    if cached.is_file():
        text = cached.read_text(encoding="utf-8")
        source = "cache"
    else:
        unpacked = unpacked_from_store(data.run, data.artifacts, svc.blobs)
        parsed = parse_run(unpacked, svc.decks.snapshots())
        text = render_markdown(parsed, verdict_from_row(data.verdict))
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, cached)  # atomic: a concurrent reader sees the whole file or none
        source = "rendered"
    return Response(
        text,
        media_type="text/markdown; charset=utf-8",
        headers={"X-Content-Type-Options": "nosniff", "X-Kaudit-Report": source},
    )


@router.post(
    "/runs/{run_id}/regrade",
    response_model=RegradeAccepted,
    status_code=status.HTTP_202_ACCEPTED,
    summary="Enqueue an isolated regrade (idempotent per run, archive, grader version, probe set, mode, GPU pool)",
    responses={
        409: {
            "model": RegradeRefused,
            "description": "the identical job already failed (send force=true to run it again), a forced "
            "regrade of the run is still queued (one at a time), or the run cannot be regraded (not_regradable)",
        },
    },
)
def regrade_run(
    run_id: str,
    svc: Annotated[Services, Depends(services)],
    who: Annotated[Principal, Depends(require_write)],
    body: RegradeRequest | None = None,
) -> RegradeAccepted | JSONResponse:
    body = body or RegradeRequest()
    outcome_name = "refused"
    try:
        answer, outcome_name = _regrade(run_id, svc, body)
        return answer
    finally:
        svc.audit.record(
            actor=who.actor, role=who.role.name if who.role else None, door="api", action="regrade",
            target=run_id, outcome=outcome_name,
            detail={"force": body.force, "probes": body.probes, "gpu_pool": body.gpu_pool, "mode": body.mode},
        )


def _regrade(run_id: str, svc: Services, body: RegradeRequest) -> tuple[RegradeAccepted | JSONResponse, str]:
    try:
        outcome = svc.jobs.enqueue_regrade(
            run_id, force=body.force, probes=[str(p) for p in body.probes] if body.probes else None,
            gpu_pool=body.gpu_pool, mode=body.mode,
        )
    except UnknownRun as exc:
        raise ApiError(status.HTTP_404_NOT_FOUND, "not_found", f"no run {run_id}") from exc
    except ModeUnsupported as exc:  # the run's deck cannot run the mode asked for: the run's state
        raise ApiError(status.HTTP_409_CONFLICT, "mode_unsupported", str(exc)) from exc
    except NotRegradable as exc:  # the run's state, not the request's shape
        raise ApiError(status.HTTP_409_CONFLICT, "not_regradable", str(exc)) from exc
    except UnknownProbe as exc:  # the schema's enum already refuses these; kept for other doors
        raise ApiError(status.HTTP_422_UNPROCESSABLE_CONTENT, "unknown_probe", str(exc)) from exc
    except ForcePending as exc:
        REJECTIONS.labels(reason="force_regrade_pending").inc()
        return JSONResponse(
            {"reason": "force_regrade_pending", "detail": str(exc), "job": job_out(exc.job, run_id).model_dump(mode="json")},
            status_code=status.HTTP_409_CONFLICT,
        ), "refused:force_regrade_pending"
    job = outcome.job
    if not outcome.created and job.state == "failed":
        # The identical job already ran and failed: answering 202 with it would read as "queued".
        return JSONResponse(
            {
                "reason": "previous_job_failed",
                "detail": failed_job_message(job),
                "job": job_out(job, run_id).model_dump(mode="json"),
            },
            status_code=status.HTTP_409_CONFLICT,
        ), "refused:previous_job_failed"
    return RegradeAccepted(job=job_out(job, run_id), created=outcome.created), (
        f"queued:{job.id}" if outcome.created else f"existing:{job.id}"
    )


def failed_job_message(job: Job) -> str:
    error = (job.error or "no error recorded").strip().splitlines()
    last = error[-1] if error else ""
    return (
        f"the identical regrade job {job.id} already failed after {job.attempts}/{job.max_attempts} attempt(s): "
        f"{last[:500]}; nothing was enqueued. To run it again, POST with {{\"force\": true}} "
        f"(kaudit regrade RUN_ID --force)"
    )
