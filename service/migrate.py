"""Run the Alembic migrations programmatically (`kaudit serve` and the other commands call this
when KAUDIT_AUTO_MIGRATE is on, so the embedded default needs no separate setup step)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from service.settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def alembic_config(database_url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini")) if (ROOT / "alembic.ini").is_file() else Config()
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.attributes["database_url"] = database_url
    return cfg


def upgrade_head(settings: Settings) -> None:
    if settings.is_sqlite:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(settings.database_url), "head")
