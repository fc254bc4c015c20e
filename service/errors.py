"""One error body for every refusal: `{"reason": <stable code>, "detail": <one readable line>}`.

Archive rejections add `member`; request validation adds `errors` (FastAPI's per-field list,
without the echoed input). `detail` is always a string, so a client reads every 4xx/5xx the same
way; the OpenAPI document declares this shape for each status an operation can answer.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

DEFAULT_REASONS = {
    400: "bad_request",
    401: "missing_token",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "total_too_large",
    415: "unsupported_format",
    422: "invalid_request",
    500: "server_error",
    507: "insufficient_storage",
}


class ErrorBody(BaseModel):
    reason: str = Field(description="stable machine-readable code (e.g. not_found, bad_cursor, token_not_accepted)")
    detail: str = Field(description="what was wrong, in one line")
    member: str | None = Field(default=None, description="the archive member at fault, for archive rejections")
    errors: list[dict[str, Any]] | None = Field(default=None, description="per-field problems (422 only)")


class ApiError(HTTPException):
    """An HTTPException with its own reason code."""

    def __init__(self, status_code: int, reason: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code, detail={"reason": reason, "detail": detail}, headers=headers)


def error_json(status_code: int, reason: str, detail: str, **extra: Any) -> JSONResponse:
    body = {"reason": reason, "detail": detail, **{k: v for k, v in extra.items() if v is not None}}
    return JSONResponse(body, status_code=status_code)


def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    detail: Any = exc.detail
    if isinstance(detail, dict) and "reason" in detail:
        body = {"reason": str(detail["reason"]), "detail": str(detail.get("detail", ""))}
    else:
        body = {"reason": DEFAULT_REASONS.get(exc.status_code, f"http_{exc.status_code}"), "detail": str(detail)}
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
    return JSONResponse(body, status_code=exc.status_code, headers=headers or None)


PROBE_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (Starlette names only the first route's).

    Asked of the app's routes themselves (included routers answer `matches` too), so nested
    routers count without reading their internals.
    """
    methods: set[str] = set()
    for m in PROBE_METHODS:
        probe = {**request.scope, "method": m}
        if any(route.matches(probe)[0] is Match.FULL for route in request.app.router.routes):
            methods.add(m)
    return sorted(methods)


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [
        {"loc": [str(p) for p in e.get("loc", ())], "msg": _message(e), "type": str(e.get("type", ""))}
        for e in exc.errors()
    ]
    detail = "; ".join(f"{'.'.join(e['loc'])}: {e['msg']}" for e in errors) or "invalid request"
    return JSONResponse({"reason": "invalid_request", "detail": detail, "errors": errors}, status_code=422)


def _message(error: dict[str, Any]) -> str:
    """pydantic's message; for a closed set, `unknown NAME 'VALUE'; allowed: a, b, c`."""
    if error.get("type") in ("enum", "literal_error"):
        expected = str((error.get("ctx") or {}).get("expected", ""))
        allowed = re.findall(r"'([^']*)'", expected)
        loc = error.get("loc") or ("value",)
        if allowed:
            return f"unknown {loc[-1]} {str(error.get('input'))[:100]!r}; allowed: {', '.join(allowed)}"
    return str(error.get("msg", ""))


def install(app: FastAPI) -> None:
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation_error)

