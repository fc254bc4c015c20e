"""Service test fixtures: the same tests run on SQLite AND PostgreSQL.

Per test session and backend, a throwaway database (a temp SQLite file; a fresh PostgreSQL
database next to KAUDIT_TEST_PG_URL) is migrated with the real `alembic upgrade head`. Tests do
not run inside a rolled-back outer transaction: what they check is precisely the service's own
transaction boundaries (one commit per ingest, nothing left after a failure), so each test
commits for real and the tables are emptied afterwards. Each test gets its own data dir (blobs).
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from alembic import command
from alembic.config import Config
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from service.app import create_app
from service.context import Services
from service.db import Database
from service.models import Artifact, Run
from service.settings import Settings, normalize_database_url

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Children first: emptied after every test.
TABLES = ("audit_events", "api_tokens", "reaudits", "workers", "findings", "probe_results", "verdicts", "measurements", "jobs", "artifacts", "runs", "deck_files", "decks")


def migrate(url: str) -> None:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.attributes["database_url"] = url
    command.upgrade(cfg, "head")


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'kaudit.db'}"
        migrate(url)
        yield url
        return
    base = make_url(normalize_database_url(os.environ.get("KAUDIT_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")))
    name = f"kaudit_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:  # pragma: no cover - CI always has PostgreSQL
        admin.dispose()
        pytest.skip(f"PostgreSQL not reachable at {base.render_as_string()}: {exc.orig}")
    url = base.set(database=name).render_as_string(hide_password=False)
    try:
        migrate(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def shared_db(database_url: str) -> Iterator[Database]:
    db = Database(Settings(database_url=database_url))
    yield db
    db.dispose()


def make_settings(database_url: str, data_dir: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {"database_url": database_url, "data_dir": data_dir, "api_tokens": TOKEN}
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def make_services(
    database_url: str, shared_db: Database, tmp_path: Path
) -> Iterator[Any]:
    """Factory: Services over the session database with per-test data dir and setting overrides."""
    built: list[Services] = []

    def factory(**overrides: Any) -> Services:
        data_dir = overrides.pop("data_dir", tmp_path / "data")
        svc = Services.build(make_settings(database_url, data_dir, **overrides), db=shared_db)
        built.append(svc)
        return svc

    yield factory
    with shared_db.engine.begin() as conn:
        for table in TABLES:
            conn.execute(text(f"DELETE FROM {table}"))


@pytest.fixture
def svc(make_services: Any) -> Services:
    services: Services = make_services()
    return services


@pytest.fixture
def client(svc: Services) -> Iterator[TestClient]:
    with TestClient(create_app(svc=svc)) as c:
        yield c


@contextmanager
def served_app(app: Any) -> Iterator[int]:
    """Serve an app with a real uvicorn on 127.0.0.1 (a free port, yielded) for the block."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    try:
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.05)
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def table_counts(svc: Services) -> dict[str, int]:
    with svc.db.session() as session:
        return {
            "runs": int(session.scalar(select(func.count(Run.id))) or 0),
            "artifacts": int(session.scalar(select(func.count(Artifact.id))) or 0),
        }


def staging_leftovers(svc: Services) -> list[Path]:
    root = svc.settings.staging_dir
    return sorted(root.iterdir()) if root.is_dir() else []
