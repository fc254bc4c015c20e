"""Settings: fail fast on bad values, never looser ingest limits than the spec."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from ingest.model import Limits
from service.settings import Settings


def test_defaults(tmp_path: Path) -> None:
    s = Settings(data_dir=tmp_path)
    assert s.database_url == f"sqlite:///{tmp_path / 'kaudit.db'}"
    assert s.limits == Limits(max_members=100_000, max_total_bytes=1 << 30, max_file_bytes=512 << 20, max_ratio=200.0)
    assert s.worker_mode == "inprocess" and s.api_tokens == frozenset()


def test_postgres_url_maps_to_psycopg3() -> None:
    assert Settings(database_url="postgresql://u@h:5432/d").database_url == "postgresql+psycopg://u@h:5432/d"
    assert Settings(database_url="postgres://u@h/d").database_url == "postgresql+psycopg://u@h/d"
    assert Settings(database_url="postgresql+psycopg://u@h/d").database_url == "postgresql+psycopg://u@h/d"


def test_tokens_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAUDIT_API_TOKENS", " a, b ,,c")
    assert Settings().api_tokens == frozenset({"a", "b", "c"})


@pytest.mark.parametrize(
    ("field", "value"),
    [("max_members", 100_001), ("max_total_bytes", (1 << 30) + 1), ("max_file_bytes", (512 << 20) + 1),
     ("max_ratio", 201.0)],
)
def test_looser_limits_rejected(field: str, value: float) -> None:
    with pytest.raises(ValidationError, match="looser"):
        Settings(**{field: value})


def test_tighter_limits_accepted() -> None:
    s = Settings(max_members=10, max_ratio=50.0, max_file_bytes=1000, max_total_bytes=5000)
    assert s.limits.max_members == 10 and s.limits.max_ratio == 50.0


@pytest.mark.parametrize(
    ("field", "value"),
    [("worker_mode", "maybe"), ("port", 0), ("database_url", "not a url"), ("gpu_lock_path", "/x/{nope}.lock"),
     ("worker_gpus", "0,a"), ("max_archive_bytes", 0), ("worker_max_attempts", 0)],
)
def test_bad_values_fail_fast(field: str, value: object) -> None:
    with pytest.raises(ValidationError):
        Settings(**{field: value})


def test_lock_template() -> None:
    assert Settings(gpu_lock_path="/var/lock/gpu{gpu}.lock").gpu_lock_file(3) == Path("/var/lock/gpu3.lock")
