"""The FastAPI application: routers, the auth gate, error bodies, metrics, upload-size guard, lifespan."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import text

from service import errors, openapi
from service.audit_api import router as audit_router
from service.auth import AuthGate, require_read
from service.context import Services
from service.decks.endpoints import router as decks_router
from service.jobs.endpoints import router as jobs_router
from service.metrics import JOBS, REGISTRY, REQUEST_LATENCY
from service.models import JOB_STATES
from service.reaudits.endpoints import router as reaudits_router
from service.runs.endpoints import router as runs_router
from service.runs.endpoints import services
from service.settings import Settings, get_settings

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Multipart framing around the archive; the archive itself is capped at max_archive_bytes.
MULTIPART_OVERHEAD = 64 << 10


class UploadLimit:
    """Refuse request bodies over the upload cap with 413 before they are buffered to disk.

    A declared Content-Length over the cap is refused before reading; a chunked body is counted
    as it streams and cut off at the cap (the endpoint's own counter is the second line).
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(send)
            return
        seen = 0
        exceeded = False
        started = False

        async def counting_receive() -> Message:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    exceeded = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if exceeded:
                if not started:
                    started = True
                    await self._too_large(send)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counting_receive, guarded_send)
        except Exception:
            if not exceeded:
                raise
            if not started:
                await self._too_large(send)

    async def _too_large(self, send: Send) -> None:
        from service.metrics import REJECTIONS

        REJECTIONS.labels(reason="total_too_large").inc()
        body = json.dumps(
            {"reason": "total_too_large", "detail": f"request body over the {self.max_bytes} byte upload limit"}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def create_app(
    settings: Settings | None = None, *, svc: Services | None = None, start_worker: bool = False
) -> FastAPI:
    settings = settings or (svc.settings if svc else get_settings())
    svc = svc or Services.build(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc.decks.ensure_bundled()
        if not settings.api_tokens:
            log.warning(
                "no KAUDIT_API_TOKENS configured: uploads and regrades will be refused (403) until the "
                "server is started with KAUDIT_API_TOKENS=<token>"
            )
        worker: Any = None
        if start_worker and settings.worker_mode == "inprocess":
            import importlib

            worker = importlib.import_module("service.worker").start_inprocess_worker(settings)
        periodic_gc = None
        if start_worker and settings.gc_interval_s > 0:
            from service.gc import PeriodicGc

            periodic_gc = PeriodicGc(settings, svc.db, svc.blobs, settings.gc_interval_s)
            periodic_gc.start()
        try:
            yield
        finally:
            stop = getattr(worker, "stop", None)
            if callable(stop):
                stop()
            if periodic_gc is not None:
                periodic_gc.stop()

    app = FastAPI(
        title="kaudit",
        version="0.1.0",
        summary="Audit and provenance service for AI-agent GPU kernel runs",
        lifespan=lifespan,
        docs_url=None,  # served by service.ui from locally shipped assets (no CDN)
        redoc_url=None,
    )
    app.state.services = svc
    app.include_router(runs_router)
    app.include_router(decks_router)
    app.include_router(jobs_router)
    app.include_router(reaudits_router)
    from service.reaudits.pages import router as reaudit_pages

    app.include_router(reaudit_pages)
    app.include_router(audit_router)
    from service.ui.pages import mount as mount_ui

    mount_ui(app)
    app.add_middleware(UploadLimit, max_bytes=settings.max_archive_bytes + MULTIPART_OVERHEAD)
    # Outside the upload guard: a request without a valid token is refused before any body is read.
    app.add_middleware(AuthGate)
    errors.install(app)
    openapi.install(app, settings)

    @app.middleware("http")
    async def _latency(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        t0 = time.perf_counter()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        elapsed = time.perf_counter() - t0
        REQUEST_LATENCY.labels(request.method, path, str(response.status_code)).observe(elapsed)
        response.headers["Server-Timing"] = f"app;dur={elapsed * 1000:.2f}"
        return response

    @app.get("/healthz", tags=["meta"])
    def healthz(s: Annotated[Services, Depends(services)]) -> dict[str, str]:
        with s.db.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        return {"status": "ok", "database": s.db.engine.dialect.name, "worker_mode": s.settings.worker_mode}

    @app.get("/metrics", tags=["meta"], response_class=Response)
    def metrics(s: Annotated[Services, Depends(services)]) -> Response:
        counts = s.jobs.counts_by_state()
        for state in JOB_STATES:
            JOBS.labels(state=state).set(counts.get(state, 0))
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @app.get("/rules", tags=["meta"], dependencies=[Depends(require_read)])
    def rules() -> list[dict[str, Any]]:
        """The audit rule catalogue (audit_rules.catalogue())."""
        import audit_rules
        from service.jsonable import to_jsonable

        catalogue = audit_rules.catalogue()  # type: ignore[attr-defined]
        out: list[dict[str, Any]] = to_jsonable(list(catalogue))
        return out

    return app
