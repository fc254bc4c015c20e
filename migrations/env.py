"""Alembic environment: the URL comes from kaudit's Settings (or a connection handed in)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from service.db import make_engine
from service.models import Base, UTCDateTime
from service.settings import Settings

config = context.config
target_metadata = Base.metadata


def _render_item(type_: str, obj: object, autogen_context: object) -> str | bool:
    """Render our TypeDecorator as its plain SQL type: migrations must not import the models."""
    if type_ == "type" and isinstance(obj, UTCDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Procrastinate (the PostgreSQL job engine) owns its own procrastinate_* tables and types;
    they are created by its schema applier, not by our models, so `alembic check` ignores them."""
    return not (type_ == "table" and name is not None and name.startswith("procrastinate_"))


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        compare_type=True,
        render_item=_render_item,
        render_as_batch=connection.dialect.name == "sqlite",
        include_name=_include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:  # tests and scripts hand in their own connection
        _configure(connection)
        return
    url = config.attributes.get("database_url") or Settings().database_url
    engine = make_engine(url)
    with engine.connect() as conn:
        _configure(conn)
    engine.dispose()


def run_migrations_offline() -> None:
    url = config.attributes.get("database_url") or Settings().database_url
    context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
