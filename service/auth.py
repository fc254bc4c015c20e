"""Bearer tokens with roles, checked before a request body is read.

Roles, each including the ones before it:

* `reader`   - GETs, when KAUDIT_READ_REQUIRES_TOKEN is set (otherwise reads are open);
* `operator` - uploads (`POST /runs`) and regrades (`POST /runs/{id}/regrade`);
* `admin`    - the audit log (`GET /audit-log`).

Tokens come from two places. `KAUDIT_API_TOKENS` is a comma-separated list of `[ROLE:]TOKEN`
entries (`admin:s3cret,reader:r3ad,plain` - an entry without a role is an operator token, as
before roles existed); they are compared in constant time against every configured entry.
`kaudit token add NAME --role ROLE` issues `kat_<key_id>_<secret>` tokens stored only as a salted
sha256 of the secret (service.models.ApiToken); `key_id` finds the row and the digest is compared
in constant time; a revoked token is refused at once.

`AuthGate` is ASGI middleware: it answers 401/403 from the request line and headers alone, so an
upload without a valid token is refused before one byte of its body is received or spooled
(FastAPI reads form bodies before it runs route dependencies, so a dependency would be too late).
It also covers what no route dependency sees: /metrics, /openapi.json, /docs and /redoc. The
route dependencies below then check the finer role (admin) and hand the endpoint its Principal.
"""

from __future__ import annotations

import enum
import getpass
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from fastapi import HTTPException, Request, status
from sqlalchemy import func, select
from starlette.concurrency import run_in_threadpool

from service.db import Database
from service.models import ApiToken, utcnow
from service.settings import Settings

NO_TOKENS = (
    "no API tokens are configured on this server, so every write is refused: start it with "
    "KAUDIT_API_TOKENS=<token> (e.g. KAUDIT_API_TOKENS=secret-token scripts/serve.sh) or issue one with "
    "`kaudit token add NAME --role operator`, and send Authorization: Bearer <token>"
)
TOKEN_PREFIX = "kat_"
_DB_TOKEN = re.compile(r"^kat_([0-9a-f]{12})_([A-Za-z0-9_-]{20,128})$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# Paths whose GET is never gated: liveness and the pages' own static assets (no data in them).
OPEN_PATHS = ("/healthz",)
OPEN_PREFIXES = ("/ui/static/", "/ui/docs-assets/")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LAST_USED_RESOLUTION = timedelta(minutes=5)  # last_used_at is refreshed at most this often


class Role(enum.IntEnum):
    reader = 1
    operator = 2
    admin = 3


ROLE_NAMES = tuple(r.name for r in Role)


@dataclass(frozen=True)
class Principal:
    """Who sent a request: `actor` names them in the audit log (never the token itself)."""

    actor: str
    role: Role | None  # None: anonymous (reads open on this server)

    def allows(self, needed: Role) -> bool:
        return self.role is not None and self.role >= needed


ANONYMOUS = Principal("anonymous", None)


class AuthRefused(Exception):
    def __init__(self, status_code: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status_code, self.reason, self.detail = status_code, reason, detail


def parse_env_token(entry: str) -> tuple[Role, str]:
    """`[ROLE:]TOKEN` -> (role, token); no (known) role prefix means operator."""
    head, sep, rest = entry.partition(":")
    if sep and head in ROLE_NAMES:
        return Role[head], rest
    return Role.operator, entry


def env_tokens(settings: Settings) -> list[tuple[Role, str]]:
    return [parse_env_token(e) for e in sorted(settings.api_tokens)]


def fingerprint(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:10]


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode()).hexdigest()


class TokenStore:
    """Issued tokens (`api_tokens` table): add, list, revoke, verify."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def add(self, name: str, role: Role) -> tuple[ApiToken, str]:
        """Issue a token; returns the row and the plaintext, which is shown once and never stored."""
        if not _NAME.match(name):
            raise ValueError("token name: 1-64 of letters, digits, '.', '_', '-' (starting with a letter or digit)")
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_hex(16)
        row = ApiToken(key_id=key_id, name=name, role=role.name, salt=salt, secret_sha256=_digest(salt, secret))
        with self.db.session() as session, session.begin():
            if session.scalar(select(ApiToken.id).where(ApiToken.name == name)) is not None:
                raise ValueError(f"a token named {name!r} already exists (revoke it first or pick another name)")
            session.add(row)
        return row, f"{TOKEN_PREFIX}{key_id}_{secret}"

    def listing(self) -> Sequence[ApiToken]:
        with self.db.session() as session:
            return session.scalars(select(ApiToken).order_by(ApiToken.id)).all()

    def revoke(self, name: str) -> ApiToken:
        with self.db.session() as session, session.begin():
            row = session.scalars(select(ApiToken).where(ApiToken.name == name)).one_or_none()
            if row is None:
                raise LookupError(f"no token named {name!r}")
            if row.revoked_at is None:
                row.revoked_at = utcnow()
            return row

    def active_count(self) -> int:
        with self.db.session() as session:
            return int(session.scalar(select(func.count(ApiToken.id)).where(ApiToken.revoked_at.is_(None))) or 0)

    def verify(self, token: str) -> Principal | None:
        m = _DB_TOKEN.match(token)
        if m is None:
            return None
        key_id, secret = m.groups()
        with self.db.session() as session, session.begin():
            row = session.scalars(select(ApiToken).where(ApiToken.key_id == key_id)).one_or_none()
            if row is None:
                hmac.compare_digest(_digest("00" * 16, secret), "0" * 64)  # same work as a miss on the digest
                return None
            if not hmac.compare_digest(_digest(row.salt, secret), row.secret_sha256) or row.revoked_at is not None:
                return None
            now = utcnow()
            if row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION:
                row.last_used_at = now
            return Principal(f"token:{row.name}", Role[row.role])


def bearer_token(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


def authenticate(token: str | None, settings: Settings, store: TokenStore) -> Principal:
    """The principal of a bearer token, or AuthRefused (401 no token / 403 not accepted)."""
    if token is None:
        if not settings.api_tokens and store.active_count() == 0:
            raise AuthRefused(status.HTTP_403_FORBIDDEN, "no_tokens_configured", NO_TOKENS)
        raise AuthRefused(
            status.HTTP_401_UNAUTHORIZED, "missing_token", "missing bearer token (Authorization: Bearer <token>)"
        )
    # Every configured entry is compared (no early exit on the first match).
    found: Role | None = None
    for role, candidate in env_tokens(settings):
        if hmac.compare_digest(candidate.encode(), token.encode()):
            found = role
    if found is not None:
        return Principal(f"env:{found.name}:{fingerprint(token)}", found)
    principal = store.verify(token)
    if principal is None:
        if not settings.api_tokens and store.active_count() == 0:
            raise AuthRefused(status.HTTP_403_FORBIDDEN, "no_tokens_configured", NO_TOKENS)
        raise AuthRefused(status.HTTP_403_FORBIDDEN, "token_not_accepted", "token not accepted")
    return principal


def require_role(principal: Principal, needed: Role) -> None:
    if not principal.allows(needed):
        have = principal.role.name if principal.role is not None else "no token"
        raise AuthRefused(
            status.HTTP_403_FORBIDDEN, "role_insufficient", f"this needs the {needed.name} role; the token has {have}"
        )


def needed_role(method: str, path: str, settings: Settings) -> Role | None:
    """The least role the gate demands before the app sees the request (None: let it through)."""
    if method in UNSAFE_METHODS:
        return Role.operator
    if method in ("GET", "HEAD"):
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return None
        if path == "/audit-log":
            return Role.admin
        return Role.reader if settings.read_requires_token else None
    return None  # OPTIONS and unknown methods: answered (405 / Allow) without reading a body


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


async def send_refusal(send: Send, exc: AuthRefused) -> None:
    from service.metrics import REJECTIONS

    REJECTIONS.labels(reason=exc.reason).inc()
    body = json.dumps({"reason": exc.reason, "detail": exc.detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if exc.status_code == status.HTTP_401_UNAUTHORIZED:
        headers.append((b"www-authenticate", b"Bearer"))
    # The body (if any) is left unread: tell the client this connection will not be reused.
    headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": exc.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class AuthGate:
    """Authenticate from the headers before the app (and its body parsing) runs."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        services = scope["app"].state.services
        settings: Settings = services.settings
        needed = needed_role(scope["method"], scope["path"], settings)
        token = bearer_token(scope.get("headers") or [])
        if needed is None and token is None:
            scope.setdefault("state", {})["principal"] = ANONYMOUS
            await self.app(scope, receive, send)
            return
        try:
            principal = await run_in_threadpool(authenticate, token, settings, TokenStore(services.db))
            if needed is not None:
                require_role(principal, needed)
        except AuthRefused as exc:
            # Also on an open read: a token that was sent and is wrong is refused, not ignored.
            await send_refusal(send, exc)
            return
        scope.setdefault("state", {})["principal"] = principal
        await self.app(scope, receive, send)


def _principal(request: Request) -> Principal:
    principal = request.scope.get("state", {}).get("principal")
    if isinstance(principal, Principal):
        return principal
    # Not behind the gate (a test mounting routers alone): authenticate here.
    services = request.app.state.services
    token = bearer_token(request.scope.get("headers") or [])
    try:
        return authenticate(token, services.settings, TokenStore(services.db))
    except AuthRefused as exc:
        raise _http(exc) from None


def _http(exc: AuthRefused) -> HTTPException:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == status.HTTP_401_UNAUTHORIZED else None
    return HTTPException(exc.status_code, detail={"reason": exc.reason, "detail": exc.detail}, headers=headers)


def _need(request: Request, role: Role) -> Principal:
    principal = _principal(request)
    try:
        require_role(principal, role)
    except AuthRefused as exc:
        raise _http(exc) from None
    return principal


async def require_write(request: Request) -> Principal:
    return _need(request, Role.operator)


async def require_admin(request: Request) -> Principal:
    return _need(request, Role.admin)


async def require_read(request: Request) -> Principal:
    settings: Settings = request.app.state.services.settings
    if settings.read_requires_token:
        return _need(request, Role.reader)
    return _principal_or_anonymous(request)


def _principal_or_anonymous(request: Request) -> Principal:
    principal = request.scope.get("state", {}).get("principal")
    return principal if isinstance(principal, Principal) else ANONYMOUS


def cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli:unknown"
