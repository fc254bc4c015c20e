"""Ingest: one archive in, one stored run out (or a rejection with nothing stored).

Steps: the upload is hashed (an archive already stored answers with the existing run, before any
unpacking), `ingest.archive.safe_unpack` stages it under `<data_dir>/staging/<uuid>/`,
`ingest.run.parse_run` reads it, the audit engine judges it, then ONE transaction writes the run,
its artifacts, the verdict with its findings and the in-run measurement(s).

Blobs: the staged files are renamed into the content-addressed store after the rows are flushed
and before COMMIT; if anything fails before the commit returns, the transaction rolls back and
every blob this ingest created (and no artifact row references) is deleted, so a failure leaves
no row and no blob. The staging folder is always removed.
"""

from __future__ import annotations

import hashlib
import logging
import shutil
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.exc import IntegrityError

from audit_rules.verdicts import MeasurementStatus, VerdictResult
from ingest.archive import safe_unpack
from ingest.model import (
    ArchiveRejected,
    DeckSnapshot,
    IntegrityStatus,
    ParsedRun,
    RejectReason,
    UnpackedArchive,
)
from ingest.run import parse_run
from service.blobs import BlobStore
from service.db import Database
from service.decks.service import DeckService
from service.jsonable import MAX_LIST_ITEMS, to_jsonable
from service.models import EPOCH, NO_PEAK, Artifact, Measurement, Run, utcnow
from service.runs.repository import RunRepository
from service.runs.verdict_source import audit_run
from service.settings import Settings

log = logging.getLogger(__name__)

TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"
BINARY_CONTENT_TYPE = "application/octet-stream"


class RunConflict(Exception):
    """A different archive already holds this run_id (the same archive would be idempotent)."""

    def __init__(self, run_id: str, existing_sha: str) -> None:
        super().__init__(f"run {run_id} is already stored from another archive (sha256 {existing_sha[:12]}...)")
        self.run_id = run_id


@dataclass
class IngestOutcome:
    run: Run
    created: bool


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        dt = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _bool(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _str(value: Any, limit: int) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    s = str(value)
    return s[:limit] if s else None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def regradability(parsed: ParsedRun, decks: Sequence[DeckSnapshot]) -> tuple[bool, str | None, str | None]:
    """(regradable, why not, deck name) for a run: unknown problems/decks are stored and say why."""
    deck_name = parsed.template.deck if parsed.template is not None else None
    if parsed.problem is None:
        return False, "problem unknown: result.json names none and the run_id matches no registered problem", deck_name
    holders = [d for d in decks if parsed.problem in d.problems]
    if not holders:
        return False, f"problem {parsed.problem!r} is not in any registered deck", deck_name
    if deck_name is None:
        deck_name = holders[0].name
    if parsed.template is not None and parsed.template.status is IntegrityStatus.UNKNOWN_DECK:
        return False, f"the archive's deck files match no registered deck ({parsed.template.reason})", deck_name
    if not parsed.has_solution:
        return False, "the archive holds no solution.py", deck_name
    if not any(d.root is not None for d in holders):
        return False, f"deck files of {parsed.problem!r} are registered by hash only (no files on disk)", deck_name
    return True, None, deck_name


def logs_json(parsed: ParsedRun) -> dict[str, Any]:
    return {
        "check": to_jsonable(parsed.check_log, max_items=MAX_LIST_ITEMS),
        "check_contended": to_jsonable(parsed.check_contended_log, max_items=MAX_LIST_ITEMS),
        "benchmark": to_jsonable(parsed.benchmark_log, max_items=MAX_LIST_ITEMS),
        "benchmark_contended": to_jsonable(parsed.benchmark_contended_log, max_items=MAX_LIST_ITEMS),
        "gpu_lock": to_jsonable(parsed.gpu_lock, max_items=MAX_LIST_ITEMS),
    }


def build_run(unpacked: UnpackedArchive, parsed: ParsedRun, decks: Sequence[DeckSnapshot]) -> Run:
    r = parsed.result
    raw_usage = r.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    started = parse_time(parsed.started_at)
    peak = _num(r.get("peak_fraction"))
    regradable, why_not, deck_name = regradability(parsed, decks)
    return Run(
        run_id=parsed.run_id,
        archive_sha256=unpacked.archive_sha256,
        archive_size=unpacked.archive_size,
        archive_format=unpacked.archive_format,
        ingested_at=utcnow(),
        run_group=_str(r.get("run_group"), 255),
        problem=_str(parsed.problem, 128),
        harness=_str(parsed.harness, 64),
        model=_str(parsed.model, 255),
        reasoning_effort=parsed.reasoning_effort[:32] if parsed.reasoning_effort is not None else None,
        hardware=_str(parsed.hardware, 128),
        deck=deck_name,
        started_at=started,
        finished_at=parse_time(parsed.finished_at),
        harness_finished_at=parse_time(r.get("harness_finished_at")),
        started_key=started or EPOCH,
        has_solution=parsed.has_solution,
        session_complete=_bool(r.get("session_complete")),
        correct=_bool(r.get("correct")),
        failure_reason=_str(r.get("failure_reason"), 64),
        retryable_infra_failure=_bool(r.get("retryable_infra_failure")),
        peak_fraction=peak,
        peak_key=peak if peak is not None else NO_PEAK,
        harness_exit_code=_int(r.get("harness_exit_code")),
        check_exit_code=_int(r.get("check_exit_code")),
        benchmark_exit_code=_int(r.get("benchmark_exit_code")),
        elapsed_seconds=_num(r.get("elapsed_seconds")),
        total_elapsed_seconds=_num(r.get("total_elapsed_seconds")),
        check_elapsed_seconds=_num(r.get("check_elapsed_seconds")),
        benchmark_elapsed_seconds=_num(r.get("benchmark_elapsed_seconds")),
        input_tokens=_int(usage.get("input_tokens")),
        output_tokens=_int(usage.get("output_tokens")),
        cache_read_tokens=_int(usage.get("cache_read_tokens")),
        cache_creation_tokens=_int(usage.get("cache_creation_tokens")),
        reasoning_tokens=_int(usage.get("reasoning_tokens")),
        total_cost_usd=_num(usage.get("total_cost_usd")),
        template_mutated_claim=_bool(r.get("template_mutated")),
        template_status=parsed.template.status.value if parsed.template is not None else None,
        template=to_jsonable(parsed.template) if parsed.template is not None else None,
        result=to_jsonable(r),
        logs=logs_json(parsed),
        transcripts=to_jsonable(parsed.transcripts),
        warnings=to_jsonable(parsed.warnings, max_items=MAX_LIST_ITEMS),
        regradable=regradable,
        not_regradable_reason=why_not,
    )


def in_run_measurements(parsed: ParsedRun) -> list[Measurement]:
    """The harness's own figures as measurements (in-run contended; a harness regrade kept apart)."""
    r = parsed.result
    out: list[Measurement] = []
    bench = parsed.benchmark_log
    shapes = to_jsonable(getattr(bench, "shapes", None) or [])
    hr = parsed.harness_regrade()
    if hr is not None:
        regrade = hr.record
        contended = hr.contended or {}
        c_bench = parsed.benchmark_contended_log
        out.append(
            Measurement(
                status=MeasurementStatus.IN_RUN_CONTENDED.value,
                source="in_run",
                correct=_bool(contended.get("correct")),
                peak_fraction=_num(contended.get("peak_fraction")),
                shapes=to_jsonable(getattr(c_bench, "shapes", None) or []),
                provenance={"from": f"{hr.source} regrade.contended", "contended": to_jsonable(contended)},
                host=None,
                gpu_name=parsed.hardware,
                gpu_index=None,
            )
        )
        mode = _str(regrade.get("mode"), 64) or MeasurementStatus.SEQUENTIAL_ISOLATED.value
        out.append(
            Measurement(
                status=mode,
                source="result.regrade",
                correct=_bool(hr.correct),
                peak_fraction=_num(hr.peak_fraction),
                shapes=shapes,
                provenance={"from": f"{hr.source} (harness's own regrade)", "regrade": to_jsonable(regrade)},
                host=_str(regrade.get("host"), 255),
                gpu_name=_str(regrade.get("gpu_name"), 128),
                gpu_index=_int(regrade.get("gpu_index")),
            )
        )
        return out
    if r.get("correct") is None and r.get("peak_fraction") is None and not shapes:
        return out
    lock = parsed.gpu_lock
    out.append(
        Measurement(
            status=MeasurementStatus.IN_RUN_CONTENDED.value,
            source="in_run",
            correct=_bool(r.get("correct")),
            peak_fraction=_num(r.get("peak_fraction")),
            shapes=shapes,
            provenance={
                "from": "result.json + benchmark.log (the agent's session, GPU shared)",
                "check_exit_code": _int(r.get("check_exit_code")),
                "benchmark_exit_code": _int(r.get("benchmark_exit_code")),
                "lock_wait_s": getattr(lock, "wait_seconds", None),
                "lock_active_s": getattr(lock, "active_seconds", None),
            },
            host=None,
            gpu_name=parsed.hardware,
            gpu_index=None,
        )
    )
    return out


def build_artifacts(unpacked: UnpackedArchive, blobs: BlobStore) -> list[Artifact]:
    return [
        Artifact(
            path=sf.path,
            sha256=sf.sha256,
            size=sf.size,
            blob_key=blobs.key_for(sf.sha256),
            is_text=sf.is_text,
            content_type=TEXT_CONTENT_TYPE if sf.is_text else BINARY_CONTENT_TYPE,
        )
        for sf in sorted(unpacked.files.values(), key=lambda s: s.path)
    ]


class IngestService:
    def __init__(self, settings: Settings, db: Database, blobs: BlobStore, decks: DeckService) -> None:
        self.settings = settings
        self.db = db
        self.blobs = blobs
        self.decks = decks

    def existing(self, archive_sha256: str) -> Run | None:
        with self.db.session() as session:
            return RunRepository(session).by_archive_sha(archive_sha256)

    def ingest_file(self, source: Path) -> IngestOutcome:
        """Ingest one archive file. Raises ArchiveRejected / RunConflict; nothing stored then."""
        if source.stat().st_size == 0:
            raise ArchiveRejected(RejectReason.EMPTY_UPLOAD, "the archive is empty")
        if source.stat().st_size > self.settings.max_archive_bytes:
            raise ArchiveRejected(
                RejectReason.TOTAL_TOO_LARGE,
                f"archive is {source.stat().st_size} bytes, over the {self.settings.max_archive_bytes} byte limit",
            )
        sha = sha256_file(source)
        found = self.existing(sha)
        if found is not None:
            return IngestOutcome(found, False)
        stage = self.settings.staging_dir / uuid.uuid4().hex
        stage.mkdir(parents=True)
        try:
            unpacked = safe_unpack(source, stage / "files", self.settings.limits)
            return self._store(unpacked)
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _store(self, unpacked: UnpackedArchive) -> IngestOutcome:
        decks = self.decks.snapshots()
        parsed = parse_run(unpacked, decks)
        with self.db.session() as session:
            # Every stored run id: the contamination rules look for them in tool inputs.
            other_ids = RunRepository(session).run_ids() - {parsed.run_id}
        verdict = audit_run(unpacked, parsed, decks, other_run_ids=other_ids)
        return self._commit(unpacked, parsed, decks, verdict)

    def _commit(
        self,
        unpacked: UnpackedArchive,
        parsed: ParsedRun,
        decks: Sequence[DeckSnapshot],
        verdict: VerdictResult,
    ) -> IngestOutcome:
        created_keys: list[str] = []
        try:
            with self.db.session() as session:
                repo = RunRepository(session)
                with session.begin():
                    same = repo.by_archive_sha(unpacked.archive_sha256)
                    if same is not None:
                        return IngestOutcome(same, False)
                    clash = repo.by_run_id(parsed.run_id)
                    if clash is not None:
                        raise RunConflict(parsed.run_id, clash.archive_sha256)
                    run = repo.add_run(build_run(unpacked, parsed, decks), build_artifacts(unpacked, self.blobs))
                    repo.append_verdict(run, verdict)
                    for m in in_run_measurements(parsed):
                        m.run_id = run.id
                        repo.add_measurement(m)
                    # Blobs go in last, inside the transaction: a failure here rolls the rows back.
                    for sf in unpacked.files.values():
                        key, new = self.blobs.put_file(sf.staged_path, sf.sha256, move=True)
                        if new:
                            created_keys.append(key)
                # Committed.
                return IngestOutcome(run, True)
        except IntegrityError:
            self._drop_blobs(created_keys)
            # A concurrent upload won the race: the same archive answers with its run; another
            # archive of the same run_id is a conflict.
            found = self.existing(unpacked.archive_sha256)
            if found is not None:
                return IngestOutcome(found, False)
            with self.db.session() as session:
                clash = RunRepository(session).by_run_id(parsed.run_id)
            if clash is not None:
                raise RunConflict(parsed.run_id, clash.archive_sha256) from None
            raise
        except BaseException:
            self._drop_blobs(created_keys)
            raise

    def _drop_blobs(self, keys: list[str]) -> None:
        if not keys:
            return
        with self.db.session() as session:
            referenced = RunRepository(session).blob_referenced(keys)
        for key in keys:
            if key not in referenced:
                self.blobs.delete(key)
