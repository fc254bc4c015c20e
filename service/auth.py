"""Bearer-token checks: writes always need a token, reads only when READ_REQUIRES_TOKEN is set."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request, status

from service.settings import Settings

NO_TOKENS = (
    "no API tokens are configured on this server, so every write is refused: start it with "
    "KAUDIT_API_TOKENS=<token> (e.g. KAUDIT_API_TOKENS=secret-token scripts/serve.sh) and send "
    "Authorization: Bearer <token>"
)


def _check(request: Request, settings: Settings) -> None:
    if not settings.api_tokens:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail=NO_TOKENS)
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            detail="missing bearer token (Authorization: Bearer <token>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    token = token.strip()
    # Compare against every token in constant time (no early exit on the first match).
    ok = False
    for candidate in settings.api_tokens:
        ok |= hmac.compare_digest(candidate.encode(), token.encode())
    if not ok:
        raise HTTPException(status.HTTP_403_FORBIDDEN, detail="token not accepted")


async def require_write(request: Request) -> None:
    _check(request, request.app.state.services.settings)


async def require_read(request: Request) -> None:
    settings: Settings = request.app.state.services.settings
    if settings.read_requires_token:
        _check(request, settings)
