"""Auth before the body, roles, hashed tokens, the audit log (SQLite and PostgreSQL).

The body checks run the real app: once as a bare ASGI call that counts `receive()` calls, once
over a real socket against uvicorn, where the 401 must arrive before a single body byte is sent.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from service.app import create_app
from service.auth import Role, TokenStore, parse_env_token
from service.context import Services
from service.models import ApiToken, AuditEvent
from tests.archive_factory import DEFAULT_RUN_ID
from tests.service.conftest import AUTH, TOKEN, served_app, staging_leftovers, table_counts
from tests.service.test_api import good_archive, upload
from tests.service.test_cli import env, run  # noqa: F401  (fixture)

ROLE_TOKENS = f"reader:read-tok,admin:admin-tok,{TOKEN}"
READER = {"Authorization": "Bearer read-tok"}
ADMIN = {"Authorization": "Bearer admin-tok"}


def _asgi_post(app: Any, headers: list[tuple[bytes, bytes]], body_chunks: int = 64) -> tuple[int, int]:
    """POST /runs through the ASGI app; returns (status, receive() calls made by the server)."""
    calls = 0
    status: list[int] = []

    head = (b'--xx\r\nContent-Disposition: form-data; name="archive"; filename="a.tar"\r\n'
            b"Content-Type: application/octet-stream\r\n\r\n")

    async def receive() -> dict[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": head, "more_body": True}
        if calls < body_chunks:
            return {"type": "http.request", "body": b"x" * 65536, "more_body": True}
        if calls == body_chunks:
            return {"type": "http.request", "body": b"\r\n--xx--\r\n", "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": "/runs", "raw_path": b"/runs", "query_string": b"", "root_path": "",
        "headers": [(b"content-type", b"multipart/form-data; boundary=xx"),
                    (b"content-length", str(body_chunks * 65536).encode()), *headers],
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
    }
    asyncio.run(app(scope, receive, send))
    return status[0], calls


def test_refused_before_the_body_is_received(make_services: Any) -> None:
    svc = make_services(api_tokens=ROLE_TOKENS)
    app = create_app(svc=svc)
    assert _asgi_post(app, []) == (401, 0)
    assert _asgi_post(app, [(b"authorization", b"Bearer wrong")]) == (403, 0)
    assert _asgi_post(app, [(b"authorization", b"Bearer read-tok")]) == (403, 0)  # reader may not upload
    # Control: an accepted token does make the server read the body (then refuse the junk form).
    code, calls = _asgi_post(app, [(b"authorization", f"Bearer {TOKEN}".encode())])
    assert calls == 64 and code in (400, 415)
    assert staging_leftovers(svc) == [] and table_counts(svc) == {"runs": 0, "artifacts": 0}


@pytest.fixture
def served(make_services: Any) -> Iterator[tuple[Services, int]]:
    svc = make_services(api_tokens=ROLE_TOKENS)
    with served_app(create_app(svc=svc)) as port:
        yield svc, port


def _headers_only(port: int, auth: str | None, wait: float) -> bytes:
    """Send a 512 MiB upload's headers and no body; return what the server answers within `wait` s."""
    lines = [
        "POST /runs HTTP/1.1", f"Host: 127.0.0.1:{port}", "Content-Type: multipart/form-data; boundary=xx",
        f"Content-Length: {512 << 20}",
    ]
    if auth:
        lines.append(f"Authorization: {auth}")
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as conn:
        conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        got = b""
        try:
            while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                got += chunk
        except TimeoutError:
            pass
        return got


def test_over_real_http_the_refusal_needs_no_body(served: tuple[Services, int]) -> None:
    svc, port = served
    t0 = time.monotonic()
    missing = _headers_only(port, None, wait=10)
    assert missing.startswith(b"HTTP/1.1 401"), missing[:200]
    assert b'"reason": "missing_token"' in missing and b"www-authenticate: bearer" in missing.lower()
    assert time.monotonic() - t0 < 5  # not after a timeout waiting for 512 MiB
    wrong = _headers_only(port, "Bearer wrong", wait=10)
    assert wrong.startswith(b"HTTP/1.1 403") and b'"reason": "token_not_accepted"' in wrong
    reader = _headers_only(port, "Bearer read-tok", wait=10)
    assert reader.startswith(b"HTTP/1.1 403") and b'"reason": "role_insufficient"' in reader
    # Control: with a valid token the server waits for the body it was promised.
    assert _headers_only(port, f"Bearer {TOKEN}", wait=1.5) == b""
    assert staging_leftovers(svc) == [] or all(p.stat().st_size == 0 for p in staging_leftovers(svc))


def test_roles_gate_reads_metrics_openapi_docs_and_audit_log(make_services: Any, tmp_path: Path) -> None:
    svc = make_services(api_tokens=ROLE_TOKENS, read_requires_token=True)
    with TestClient(create_app(svc=svc)) as client:
        for path in ("/runs", "/metrics", "/openapi.json", "/docs", "/redoc", "/rules", "/decks", "/jobs"):
            r = client.get(path)
            assert r.status_code == 401 and r.json()["reason"] == "missing_token", path
            assert client.get(path, headers=READER).status_code == 200, path
        assert client.get("/healthz").status_code == 200
        assert client.get("/audit-log", headers=READER).json()["reason"] == "role_insufficient"
        assert client.get("/audit-log", headers=AUTH).status_code == 403  # operator
        assert upload(client, good_archive(tmp_path), headers=READER).status_code == 403
        assert upload(client, good_archive(tmp_path), headers=AUTH).status_code == 201
        assert client.post(f"/runs/{DEFAULT_RUN_ID}/regrade", headers=ADMIN).status_code == 202  # admin > operator
        log = client.get("/audit-log", headers=ADMIN)
        assert log.status_code == 200
        events = [(e["action"], e["target"], e["outcome"], e["door"]) for e in log.json()]
        assert ("upload", DEFAULT_RUN_ID, "created", "api") in events
        assert any(a == "regrade" and o.startswith("queued:") for a, _t, o, _d in events)
        actors = {e["action"]: e["actor"] for e in log.json()}
        assert actors["upload"].startswith("env:operator:") and actors["regrade"].startswith("env:admin:")
        assert TOKEN not in log.text and "admin-tok" not in log.text  # names, never tokens
        refused = [e for e in log.json() if e["action"] == "upload" and e["outcome"].startswith("refused")]
        assert refused == []  # the reader's upload never reached the endpoint (refused at the gate)
        assert client.get("/audit-log", params={"action": "regrade"}, headers=ADMIN).json()[0]["action"] == "regrade"


def test_openapi_declares_the_bearer_scheme(make_services: Any) -> None:
    for gated in (False, True):
        svc = make_services(api_tokens=ROLE_TOKENS, read_requires_token=gated)
        with TestClient(create_app(svc=svc)) as client:
            doc = client.get("/openapi.json", headers=READER).json()
        assert doc["components"]["securitySchemes"]["bearerAuth"] == {
            "type": "http", "scheme": "bearer", "description": doc["components"]["securitySchemes"]["bearerAuth"][
                "description"]}
        post = doc["paths"]["/runs"]["post"]
        assert post["security"] == [{"bearerAuth": []}] and {"401", "403", "507"} <= set(post["responses"])
        assert doc["paths"]["/audit-log"]["get"]["security"] == [{"bearerAuth": []}]
        read = doc["paths"]["/runs"]["get"]
        assert ("security" in read) is gated


def test_env_token_syntax() -> None:
    assert parse_env_token("admin:x") == (Role.admin, "x")
    assert parse_env_token("reader:a:b") == (Role.reader, "a:b")
    assert parse_env_token("plain") == (Role.operator, "plain")
    assert parse_env_token("nobody:x") == (Role.operator, "nobody:x")  # not a role: the whole entry is the token


def test_issued_tokens_are_hashed_and_revocable(make_services: Any, tmp_path: Path) -> None:
    svc = make_services(api_tokens="", read_requires_token=True)
    store = TokenStore(svc.db)
    row, token = store.add("ci-uploader", Role.operator)
    _, reader_token = store.add("dash", Role.reader)
    with svc.db.session() as session:
        stored = session.scalars(select(ApiToken)).all()
    secret = token.rsplit("_", 1)[1]
    for r in stored:
        assert secret not in (r.secret_sha256, r.salt, r.key_id, r.name) and len(r.secret_sha256) == 64
    with pytest.raises(ValueError, match="already exists"):
        store.add("ci-uploader", Role.admin)
    with TestClient(create_app(svc=svc)) as client:
        bearer = {"Authorization": f"Bearer {token}"}
        assert upload(client, good_archive(tmp_path), headers=bearer).status_code == 201
        assert client.get("/runs", headers={"Authorization": f"Bearer {reader_token}"}).status_code == 200
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        assert client.get("/runs", headers={"Authorization": f"Bearer {forged}"}).status_code == 403
        store.revoke("ci-uploader")
        again = client.post(f"/runs/{DEFAULT_RUN_ID}/regrade", headers=bearer)
        assert again.status_code == 403 and again.json()["reason"] == "token_not_accepted"
    with svc.db.session() as session:
        events = session.scalars(select(AuditEvent).where(AuditEvent.action == "upload")).all()
        used = session.scalars(select(ApiToken).where(ApiToken.name == "ci-uploader")).one()
    assert [e.actor for e in events] == ["token:ci-uploader"] and used.last_used_at is not None
    assert used.revoked_at is not None and row.key_id == used.key_id


def test_token_cli_and_cli_audit_events(env: dict[str, str], svc: Services, tmp_path: Path) -> None:  # noqa: F811
    added = run(env, "token", "add", "alice", "--role", "admin")
    assert added.exit_code == 0, added.output
    token = added.stdout.strip()
    assert token.startswith("kat_") and "shown once" in added.stderr
    assert run(env, "token", "add", "bob", "--role", "root").exit_code == 2
    listed = run(env, "token", "list")
    secret = token.split("_", 2)[2]  # kat_<key_id>_<secret>; the secret itself may hold "_"
    assert "alice\tadmin\t" in listed.stdout and secret not in listed.stdout
    with TestClient(create_app(svc=svc)) as client:
        assert client.get("/audit-log", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        assert run(env, "ingest", str(good_archive(tmp_path))).exit_code == 0
        revoked = run(env, "token", "revoke", "alice")
        assert revoked.exit_code == 0 and "revoked" in revoked.stdout
        assert client.get("/audit-log", headers={"Authorization": f"Bearer {token}"}).status_code == 403
        assert run(env, "token", "revoke", "nobody").exit_code == 2
    with svc.db.session() as session:
        events = {(e.action, e.door, e.outcome) for e in session.scalars(select(AuditEvent))}
        actors = {e.actor for e in session.scalars(select(AuditEvent))}
    assert {("token_add", "cli", "created"), ("upload", "cli", "created"), ("token_revoke", "cli", "revoked")} <= events
    assert all(a.startswith("cli:") for a in actors)
