"""The wired-up service objects one process uses (the app, the CLI and the worker build one each)."""

from __future__ import annotations

from dataclasses import dataclass

from service.audit_log import AuditLog
from service.blobs import BlobStore
from service.db import Database
from service.decks.service import DeckService
from service.jobs.service import JobService
from service.runs.queries import RunQueries
from service.runs.service import IngestService
from service.settings import Settings


@dataclass
class Services:
    settings: Settings
    db: Database
    blobs: BlobStore
    decks: DeckService
    ingest: IngestService
    runs: RunQueries
    jobs: JobService
    audit: AuditLog

    @classmethod
    def build(cls, settings: Settings, db: Database | None = None) -> Services:
        db = db or Database(settings)
        blobs = BlobStore(settings.blob_dir)
        decks = DeckService(db, blobs, settings.data_dir)
        return cls(
            settings=settings,
            db=db,
            blobs=blobs,
            decks=decks,
            ingest=IngestService(settings, db, blobs, decks),
            runs=RunQueries(db),
            jobs=JobService(settings, db),
            audit=AuditLog(db),
        )
