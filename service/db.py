"""Engine and session factory. Only repository modules use the sessions these make."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from service.settings import Settings


def make_engine(database_url: str, **kwargs: Any) -> Engine:
    """Create an engine; SQLite gets foreign keys, WAL and a busy timeout (worker thread + API)."""
    if database_url.startswith("sqlite"):
        engine = create_engine(
            database_url, connect_args={"check_same_thread": False, "timeout": 30}, **kwargs
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        return engine
    # No pool_pre_ping: it costs a round trip per request (the list endpoint's budget is a few
    # ms). A connection the server dropped fails one request and SQLAlchemy then invalidates the
    # pool; pool_recycle retires idle connections before typical server/proxy timeouts.
    return create_engine(database_url, pool_recycle=1800, **kwargs)


class Database:
    """One engine + session factory per process (the app, the CLI, the worker each build one)."""

    def __init__(self, settings: Settings, engine: Engine | None = None) -> None:
        self.settings = settings
        if engine is None and settings.is_sqlite:
            settings.data_dir.mkdir(parents=True, exist_ok=True)
        self.engine = engine or make_engine(settings.database_url)
        self.sessionmaker = sessionmaker(self.engine, expire_on_commit=False)
        # Reads (pages, details) run in autocommit: no BEGIN/ROLLBACK round trips around a
        # single SELECT. Same pool; verdict rows are append-only, so a detail read over several
        # statements never sees a half-written history.
        self.read_sessionmaker = sessionmaker(
            self.engine.execution_options(isolation_level="AUTOCOMMIT"), expire_on_commit=False
        )

    @contextmanager
    def session(self) -> Iterator[Session]:
        with self.sessionmaker() as session:
            yield session

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """A session for reads only (autocommit; never call commit-dependent writes on it)."""
        with self.read_sessionmaker() as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
