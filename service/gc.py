"""Garbage collection of what killed ingests and regrades leave behind (`kaudit gc`, and a
periodic task of the in-process worker).

* staging leftovers: `<data_dir>/staging/*` (upload spools and unpack folders) whose newest file is
  older than `min_age_s`; a live ingest writes into its folder, so its newest mtime is recent;
* scratch folders: `<data_dir>/scratch/kaudit-job<id>-*` of a job that is no longer running under
  a live lease (and older than `min_age_s`), other scratch entries older than the regrade timeout
  plus `min_age_s`; the blob store's own temp files (`blobs/.tmp`) older than `min_age_s`;
* orphan blobs: stored blobs that no artifact and no deck file references.

Safe beside live ingests: an ingest renames its blobs into the store *before* its COMMIT, so an
unreferenced blob may be one about to be referenced. Only blobs older than `min_age_s` are
candidates (BlobStore.put_file refreshes the mtime of a blob it reuses); each candidate is first
renamed into a quarantine folder, then its references are checked again in a fresh transaction
and its mtime re-read: a blob referenced or touched meanwhile is put back, any other is deleted.
An ingest that looks for a blob while it is quarantined finds none and stores its own copy.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select

from service.blobs import BlobStore
from service.db import Database
from service.models import Artifact, DeckFile, Job, utcnow
from service.settings import Settings

log = logging.getLogger(__name__)

_JOB_SCRATCH = re.compile(r"^kaudit-job(\d+)-")
QUARANTINE = ".gc"


@dataclass
class GcReport:
    staging: list[str] = field(default_factory=list)
    scratch: list[str] = field(default_factory=list)
    blob_tmp: list[str] = field(default_factory=list)
    blobs: list[str] = field(default_factory=list)
    kept_blobs: list[str] = field(default_factory=list)  # quarantined, then found referenced or fresh
    bytes_freed: int = 0
    dry_run: bool = False

    def summary(self) -> dict[str, int | bool]:
        return {
            "staging": len(self.staging),
            "scratch": len(self.scratch),
            "blob_tmp": len(self.blob_tmp),
            "blobs": len(self.blobs),
            "kept_blobs": len(self.kept_blobs),
            "bytes_freed": self.bytes_freed,
            "dry_run": self.dry_run,
        }


def newest_mtime(path: Path) -> float:
    """The newest mtime in a tree (the folder itself included); never follows links."""
    try:
        newest = path.lstat().st_mtime
    except FileNotFoundError:
        return time.time()
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
            for name in dirnames + filenames:
                try:
                    newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime)
                except FileNotFoundError:
                    continue
    return newest


def _size(path: Path) -> int:
    if path.is_file() or path.is_symlink():
        try:
            return path.lstat().st_size
        except FileNotFoundError:
            return 0
    total = 0
    for dirpath, _dirs, files in os.walk(path, followlinks=False):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                pass
    return total


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


class GarbageCollector:
    def __init__(self, settings: Settings, db: Database, blobs: BlobStore, *, min_age_s: float | None = None) -> None:
        self.settings, self.db, self.blobs = settings, db, blobs
        self.min_age_s = settings.gc_min_age_s if min_age_s is None else min_age_s

    def run(self, *, dry_run: bool = False) -> GcReport:
        report = GcReport(dry_run=dry_run)
        now = time.time()
        self._staging(report, now, dry_run)
        self._scratch(report, now, dry_run)
        self._blob_tmp(report, now, dry_run)
        self._orphans(report, now, dry_run)
        return report

    def _old(self, path: Path, now: float, age: float) -> bool:
        return now - newest_mtime(path) > age

    def _take(self, path: Path, bucket: list[str], report: GcReport, dry_run: bool) -> None:
        report.bytes_freed += _size(path)
        bucket.append(path.name)
        if not dry_run:
            _remove(path)

    def _staging(self, report: GcReport, now: float, dry_run: bool) -> None:
        root = self.settings.staging_dir
        if not root.is_dir():
            return
        for entry in sorted(root.iterdir()):
            if self._old(entry, now, self.min_age_s):
                self._take(entry, report.staging, report, dry_run)

    def _scratch(self, report: GcReport, now: float, dry_run: bool) -> None:
        root = self.settings.scratch_dir
        if not root.is_dir():
            return
        entries = sorted(root.iterdir())
        job_ids = {int(m.group(1)) for e in entries if (m := _JOB_SCRATCH.match(e.name))}
        live = self._live_jobs(job_ids)
        fallback_age = self.settings.regrade_timeout_s + self.min_age_s
        for entry in entries:
            m = _JOB_SCRATCH.match(entry.name)
            if m is not None:
                if int(m.group(1)) in live or not self._old(entry, now, self.min_age_s):
                    continue
            elif not self._old(entry, now, fallback_age):
                continue
            self._take(entry, report.scratch, report, dry_run)

    def _live_jobs(self, job_ids: set[int]) -> set[int]:
        """Jobs running under a lease that has not expired (their scratch folder is in use)."""
        if not job_ids:
            return set()
        now = utcnow()
        with self.db.session() as session:
            rows = session.execute(
                select(Job.id, Job.lease_expires_at).where(Job.id.in_(job_ids), Job.state == "running")
            ).all()
        return {jid for jid, lease in rows if lease is None or lease > now}

    def _blob_tmp(self, report: GcReport, now: float, dry_run: bool) -> None:
        root = self.blobs.root / ".tmp"
        if not root.is_dir():
            return
        for entry in sorted(root.iterdir()):
            if self._old(entry, now, self.min_age_s):
                self._take(entry, report.blob_tmp, report, dry_run)

    def _referenced(self, keys: Iterable[str]) -> set[str]:
        keys = list(keys)
        found: set[str] = set()
        with self.db.session() as session, session.begin():
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                found |= set(session.scalars(select(Artifact.blob_key).where(Artifact.blob_key.in_(chunk))).all())
                found |= {
                    k for k in session.scalars(select(DeckFile.blob_key).where(DeckFile.blob_key.in_(chunk))).all()
                    if k is not None
                }
        return found

    def _orphans(self, report: GcReport, now: float, dry_run: bool) -> None:
        old = [k for k in sorted(self.blobs.all_keys()) if self._old(self.blobs.path(k), now, self.min_age_s)]
        if not old:
            return
        candidates = [k for k in old if k not in self._referenced(old)]
        if dry_run:
            for key in candidates:
                report.blobs.append(key)
                report.bytes_freed += _size(self.blobs.path(key))
            return
        quarantine = self.blobs.root / QUARANTINE
        quarantine.mkdir(parents=True, exist_ok=True)
        moved: list[tuple[str, Path]] = []
        for key in candidates:
            held = quarantine / key.rsplit("/", 1)[1]
            try:
                os.replace(self.blobs.path(key), held)
            except FileNotFoundError:
                continue
            moved.append((key, held))
        if not moved:
            return
        # Second look, after the blobs left the store: a reference committed since, or a reuse
        # that refreshed the mtime (put_file), puts the blob back.
        referenced = self._referenced(k for k, _ in moved)
        for key, held in moved:
            fresh = not self._old(held, time.time(), self.min_age_s)
            if key in referenced or fresh:
                final = self.blobs.path(key)
                if final.exists():  # an ingest stored its own copy meanwhile (same content)
                    held.unlink(missing_ok=True)
                else:
                    os.replace(held, final)
                report.kept_blobs.append(key)
                continue
            report.bytes_freed += _size(held)
            held.unlink(missing_ok=True)
            report.blobs.append(key)


class PeriodicGc(threading.Thread):
    """Runs the collector every `interval_s` in the background (the in-process worker starts one)."""

    def __init__(self, settings: Settings, db: Database, blobs: BlobStore, interval_s: float) -> None:
        super().__init__(daemon=True, name="kaudit-gc")
        self.collector = GarbageCollector(settings, db, blobs)
        self.interval_s = interval_s
        self.stopping = threading.Event()
        self.runs = 0

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            try:
                report = self.collector.run()
                self.runs += 1
                if any(v for k, v in report.summary().items() if k not in ("dry_run", "kept_blobs")):
                    log.info("gc: %s", report.summary())
            except Exception:
                log.exception("periodic gc failed")

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)

