"""The OpenAPI document as the server really behaves: the bearer scheme on every gated operation,
the 401/403/404/422 answers each operation can give (all in service.errors.ErrorBody's shape).

Which operations are gated follows service.auth.needed_role for this server's settings, so with
KAUDIT_READ_REQUIRES_TOKEN the reads declare the bearer scheme too, and without it they declare none.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from service.auth import Role, needed_role
from service.errors import ErrorBody
from service.settings import Settings

SCHEME = "bearerAuth"
METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": ERROR_REF}}}


def build_openapi(app: FastAPI, settings: Settings) -> dict[str, Any]:
    doc = get_openapi(
        title=app.title, version=app.version, summary=app.summary, description=app.description, routes=app.routes
    )
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas["ErrorBody"] = error_schema
    # FastAPI's own 422 schema (a `detail` list) is not what service.errors answers.
    schemas["HTTPValidationError"] = error_schema
    schemas.pop("ValidationError", None)
    components["securitySchemes"] = {
        SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "KAUDIT_API_TOKENS entries ([ROLE:]TOKEN) or tokens from `kaudit token add`; "
            "roles: reader < operator < admin",
        }
    }
    for path, item in doc.get("paths", {}).items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            responses = op.setdefault("responses", {})
            needed = needed_role(method.upper(), path, settings)
            if needed is not None:
                op["security"] = [{SCHEME: []}]
                responses.setdefault("401", _error("no bearer token sent"))
                responses.setdefault(
                    "403", _error(f"token not accepted, or its role is below {needed.name}")
                )
                if needed is Role.admin:
                    op.setdefault("description", "Needs an admin token.")
            if "{" in path:
                responses.setdefault("404", _error("no such resource"))
            if "requestBody" in op:
                responses.setdefault("400", _error("the body could not be parsed"))
            for code, response in responses.items():
                if code.startswith(("4", "5")) and "content" in response:
                    for media in response["content"].values():
                        if media.get("schema", {}).get("$ref", "").endswith(("/HTTPValidationError", "/Rejection")):
                            continue
                        media.setdefault("schema", ERROR_REF)
    return doc


def install(app: FastAPI, settings: Settings) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, settings)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
