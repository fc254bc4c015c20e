"""The one settings object of the service, read from `KAUDIT_*` environment variables.

Validated when built (`get_settings()` at start of every door), so a bad value stops the
process with a message naming the variable instead of failing later in a request.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ingest.model import Limits

_SPEC = Limits()  # the spec's loosest allowed ingest caps


def normalize_database_url(url: str) -> str:
    """Map plain `postgresql://` / `postgres://` URLs to the installed driver (psycopg 3)."""
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


class Settings(BaseSettings):
    """Every knob of kaudit's service, CLI and worker (env prefix `KAUDIT_`)."""

    model_config = SettingsConfigDict(env_prefix="KAUDIT_", extra="ignore", validate_default=True)

    data_dir: Path = Field(default=Path("./data"), description="blobs, staging and the default SQLite file")
    database_url: str = Field(default="", description="any SQLAlchemy URL; default sqlite:///<data_dir>/kaudit.db")
    api_tokens: Annotated[frozenset[str], NoDecode] = Field(
        default=frozenset(),
        description="comma-separated [ROLE:]TOKEN entries, ROLE one of reader, operator (the default), admin "
        "(Authorization: Bearer TOKEN); `kaudit token add` issues more, hashed in the database",
    )
    read_requires_token: bool = False

    # Upload and ingest limits. Never looser than the spec's defaults (ingest.model.Limits).
    max_archive_bytes: int = Field(default=1 << 30, gt=0, description="largest accepted upload (compressed)")
    max_members: int = Field(default=_SPEC.max_members, gt=0)
    max_total_bytes: int = Field(default=_SPEC.max_total_bytes, gt=0)
    max_file_bytes: int = Field(default=_SPEC.max_file_bytes, gt=0)
    max_ratio: float = Field(default=_SPEC.max_ratio, gt=1.0)

    # Worker / regrade.
    worker_mode: Literal["inprocess", "external", "off"] = "inprocess"
    gpu_lock_path: str = Field(
        default="/tmp/kaudit-gpu{gpu}.lock",
        description="per-GPU lock file; `{gpu}` is replaced by the GPU index (point it at the harness's lock)",
    )
    worker_poll_interval_s: float = Field(default=2.0, gt=0)
    worker_lease_seconds: int = Field(default=300, gt=0)
    worker_max_attempts: int = Field(default=3, ge=1)
    worker_gpu_pool: str = Field(default="default", min_length=1)
    worker_gpus: str = Field(default="0", description="comma-separated GPU indices the worker may use")
    worker_device: Literal["cuda", "cpu"] = "cuda"
    gpu_busy_timeout_s: float = Field(default=600.0, ge=0, description="wait for foreign GPU processes")
    regrade_timeout_s: float = Field(default=3600.0, gt=0)
    allow_unsafe_sandbox: bool = Field(
        default=False,
        description="run regrades as a plain subprocess when bubblewrap is unusable (unsafe; recorded in the "
                    "provenance). Read by the grader from KAUDIT_ALLOW_UNSAFE_SANDBOX itself",
    )

    build_deps: str = Field(
        default="",
        description="build dependencies of the runs, DEST=SRC[,DEST=SRC]: a folder the runs' original hosts had "
                    "at DEST (a CUTLASS checkout under /workspace/refs, say) and this host has at SRC, bound "
                    "read-only at DEST in every regrade sandbox (graders.sandbox.parse_build_deps)",
    )

    # Garbage collection (service.gc): leftovers younger than gc_min_age_s are never touched.
    gc_min_age_s: float = Field(default=3600.0, ge=60, description="age before a leftover may be collected")
    gc_interval_s: float = Field(default=3600.0, ge=0, description="periodic gc in `kaudit serve` (0: off)")

    auto_migrate: bool = Field(default=True, description="run `alembic upgrade head` when a command starts")

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _split_tokens(cls, value: object) -> object:
        if isinstance(value, str):
            return frozenset(t.strip() for t in value.split(",") if t.strip())
        return value

    @field_validator("gpu_lock_path")
    @classmethod
    def _lock_template(cls, value: str) -> str:
        try:
            value.format(gpu=0)
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(f"gpu_lock_path may only use the placeholder {{gpu}}: {exc}") from exc
        return value

    @field_validator("build_deps")
    @classmethod
    def _deps(cls, value: str) -> str:
        from graders.sandbox import parse_build_deps

        parse_build_deps(value)  # ValueError names the bad entry
        return value.strip()

    @field_validator("worker_gpus")
    @classmethod
    def _gpus(cls, value: str) -> str:
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if not parts or not all(p.isdigit() for p in parts):
            raise ValueError("worker_gpus must be comma-separated GPU indices, e.g. 0,1")
        return ",".join(parts)

    @model_validator(mode="after")
    def _finish(self) -> Settings:
        for name, spec in (
            ("max_members", _SPEC.max_members),
            ("max_total_bytes", _SPEC.max_total_bytes),
            ("max_file_bytes", _SPEC.max_file_bytes),
            ("max_ratio", _SPEC.max_ratio),
        ):
            if getattr(self, name) > spec:
                raise ValueError(
                    f"KAUDIT_{name.upper()}={getattr(self, name)} is looser than the spec's limit {spec}; "
                    "limits may only be tightened"
                )
        if self.max_file_bytes > self.max_total_bytes:
            raise ValueError("KAUDIT_MAX_FILE_BYTES may not exceed KAUDIT_MAX_TOTAL_BYTES")
        self.data_dir = self.data_dir.expanduser().absolute()
        url = self.database_url.strip() or f"sqlite:///{self.data_dir / 'kaudit.db'}"
        url = normalize_database_url(url)
        try:
            make_url(url)
        except ArgumentError as exc:
            raise ValueError(f"KAUDIT_DATABASE_URL is not a SQLAlchemy URL: {exc}") from exc
        self.database_url = url
        return self

    @property
    def limits(self) -> Limits:
        return Limits(
            max_members=self.max_members,
            max_total_bytes=self.max_total_bytes,
            max_file_bytes=self.max_file_bytes,
            max_ratio=self.max_ratio,
        )

    @property
    def gpu_indices(self) -> list[int]:
        return [int(p) for p in self.worker_gpus.split(",")]

    def gpu_lock_file(self, gpu: int) -> Path:
        return Path(self.gpu_lock_path.format(gpu=gpu))

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def blob_dir(self) -> Path:
        return self.data_dir / "blobs"

    @property
    def staging_dir(self) -> Path:
        return self.data_dir / "staging"

    @property
    def scratch_dir(self) -> Path:
        """Regrade scratch folders (`kaudit-job<id>-*`), where `kaudit gc` finds a killed job's."""
        return self.data_dir / "scratch"

    @property
    def report_cache_dir(self) -> Path:
        return self.data_dir / "cache" / "reports"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, built (and validated) once."""
    return Settings()


def describe_validation_error(exc: Exception) -> str:
    """One readable line per bad setting (for CLI/startup errors)."""
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        return "; ".join(
            f"KAUDIT_{'.'.join(str(p) for p in err['loc']).upper() or 'SETTINGS'}: {err['msg']}"
            for err in exc.errors()
        )
    return str(exc)
