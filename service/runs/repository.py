"""Database access for runs, artifacts, verdicts, findings, measurements and probe results.

Only this module (and the other repositories) touch the session. Verdicts are appended, never
updated: `append_verdict` inserts the row and moves the run's current pointer and denormalised
verdict columns in the same transaction.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ColumnElement, and_, delete, func, or_, select
from sqlalchemy.orm import InstrumentedAttribute, Session, load_only, selectinload

from audit_rules.verdicts import VerdictResult
from service.jsonable import to_jsonable
from service.models import (
    EPOCH,
    Artifact,
    FindingRow,
    Measurement,
    ProbeResultRow,
    Run,
    VerdictRow,
    utcnow,
)
from service.ruleset import ruleset_version

SortKey = Literal["started_at", "ingested", "peak_fraction", "run_id"]
SORT_COLUMNS: dict[str, InstrumentedAttribute[Any]] = {
    "started_at": Run.started_key,
    "ingested": Run.ingested_at,
    "peak_fraction": Run.peak_key,
    "run_id": Run.run_id,
}


# The columns a list page shows (service.runs.schemas.RunSummary); the rest, above all the large
# JSON columns, is not loaded for pages (touching one on a page object raises).
SUMMARY_COLUMNS = (
    Run.id, Run.run_id, Run.archive_sha256, Run.problem, Run.harness, Run.model, Run.reasoning_effort,
    Run.hardware, Run.deck, Run.started_at, Run.finished_at, Run.ingested_at, Run.started_key, Run.peak_key,
    Run.has_solution, Run.session_complete, Run.correct, Run.failure_reason, Run.peak_fraction,
    Run.template_status, Run.regradable, Run.not_regradable_reason, Run.verdict, Run.reward_hack,
    Run.contamination, Run.publish_grade, Run.current_verdict_id,
)
LIST_DEFERRED = (load_only(*SUMMARY_COLUMNS, raiseload=True),)


class BadCursor(ValueError):
    """The cursor is not one this service issued (or was issued for another sort order)."""


@dataclass(frozen=True)
class RunFilters:
    model: str | None = None
    harness: str | None = None
    problem: str | None = None
    deck: str | None = None
    hardware: str | None = None
    verdict: str | None = None
    reward_hack: bool | None = None
    contamination: str | None = None
    publish_grade: bool | None = None
    started_from: datetime | None = None
    started_to: datetime | None = None
    # The stored hardware names a `hardware` filter stands for (RunRepository.resolve fills it).
    hardware_in: tuple[str, ...] | None = None

    def clauses(self) -> list[ColumnElement[bool]]:
        out: list[ColumnElement[bool]] = []
        for name in ("model", "harness", "problem", "deck", "hardware", "verdict", "contamination"):
            value = getattr(self, name)
            if name == "hardware" and self.hardware_in is not None:
                out.append(Run.hardware.in_(self.hardware_in))
            elif value is not None:
                out.append(getattr(Run, name) == value)
        if self.reward_hack is not None:
            out.append(Run.reward_hack.is_(self.reward_hack))
        if self.publish_grade is not None:
            out.append(Run.publish_grade.is_(self.publish_grade))
        # Date ranges filter the NOT NULL sort key (equal to started_at when known), so the
        # (filter, started_key, id) indexes serve them; runs without started_at never match.
        if self.started_from is not None or self.started_to is not None:
            out.append(Run.started_key > EPOCH)
        if self.started_from is not None:
            out.append(Run.started_key >= self.started_from)
        if self.started_to is not None:
            out.append(Run.started_key < self.started_to)
        return out


def hardware_matches(query: str, stored: str) -> bool:
    """A hardware filter matches the full device string, its SKU ("H100 SXM") or a short name in it.

    "RTX PRO 6000" finds "NVIDIA RTX PRO 6000 Blackwell Server Edition"; "H100" finds every H100;
    matching is case-insensitive and on word boundaries ("H10" finds nothing).
    """
    import re

    from graders.roofline import detect_sku

    q = " ".join(query.upper().replace("-", " ").split())
    name = " ".join(stored.upper().replace("-", " ").split())
    if not q:
        return False
    if q == name:
        return True
    sku = detect_sku(stored)
    if sku is not None and sku.upper() == q:
        return True
    return re.search(rf"(?<![A-Z0-9]){re.escape(q)}(?![A-Z0-9])", name) is not None


def encode_cursor(sort: str, order: str, value: Any, pk: int) -> str:
    if isinstance(value, datetime):
        value = value.isoformat()
    raw = json.dumps([sort, order, value, pk], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, sort: str, order: str) -> tuple[Any, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        c_sort, c_order, value, pk = json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise BadCursor("cursor is not valid") from exc
    if c_sort != sort or c_order != order or not isinstance(pk, int):
        raise BadCursor("cursor was issued for another sort order")
    if sort in ("started_at", "ingested"):
        try:
            value = datetime.fromisoformat(value)
        except (TypeError, ValueError) as exc:
            raise BadCursor("cursor is not valid") from exc
    elif sort == "peak_fraction" and not isinstance(value, int | float):
        raise BadCursor("cursor is not valid")
    elif sort == "run_id" and not isinstance(value, str):
        raise BadCursor("cursor is not valid")
    return value, pk


class RunRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    # -- reads ---------------------------------------------------------------------------------
    def by_archive_sha(self, sha256: str) -> Run | None:
        return self.session.scalars(select(Run).where(Run.archive_sha256 == sha256)).one_or_none()

    def by_run_id(self, run_id: str) -> Run | None:
        return self.session.scalars(select(Run).where(Run.run_id == run_id)).one_or_none()

    def run_ids(self) -> frozenset[str]:
        return frozenset(self.session.scalars(select(Run.run_id)).all())

    def resolve(self, filters: RunFilters) -> RunFilters:
        """Expand a short hardware name to the stored device strings it stands for."""
        if filters.hardware is None or filters.hardware_in is not None:
            return filters
        names = self.session.scalars(select(Run.hardware).distinct().where(Run.hardware.is_not(None))).all()
        matched = tuple(sorted(n for n in names if n is not None and hardware_matches(filters.hardware, n)))
        return replace(filters, hardware_in=matched)

    def page(
        self,
        filters: RunFilters,
        *,
        sort: str = "started_at",
        order: str = "desc",
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[Run], str | None]:
        """One page of runs, keyset-paginated over (sort key, id): stable under inserts."""
        col = SORT_COLUMNS[sort]
        filters = self.resolve(filters)
        stmt = select(Run).options(*LIST_DEFERRED).where(*filters.clauses())
        if cursor:
            value, pk = decode_cursor(cursor, sort, order)
            if order == "desc":
                stmt = stmt.where(or_(col < value, and_(col == value, Run.id < pk)))
            else:
                stmt = stmt.where(or_(col > value, and_(col == value, Run.id > pk)))
        if order == "desc":
            stmt = stmt.order_by(col.desc(), Run.id.desc())
        else:
            stmt = stmt.order_by(col.asc(), Run.id.asc())
        rows = list(self.session.scalars(stmt.limit(limit + 1)).all())
        next_cursor = None
        if len(rows) > limit:
            rows = rows[:limit]
            last = rows[-1]
            next_cursor = encode_cursor(sort, order, getattr(last, col.key), last.id)
        return rows, next_cursor

    def count(self, filters: RunFilters) -> int:
        filters = self.resolve(filters)
        return int(self.session.scalar(select(func.count(Run.id)).where(*filters.clauses())) or 0)

    def verdict(self, verdict_id: int | None) -> VerdictRow | None:
        if verdict_id is None:
            return None
        return self.session.scalars(
            select(VerdictRow).where(VerdictRow.id == verdict_id).options(selectinload(VerdictRow.findings))
        ).one_or_none()

    def verdicts(self, run_pk: int) -> Sequence[VerdictRow]:
        return self.session.scalars(
            select(VerdictRow)
            .where(VerdictRow.run_id == run_pk)
            .order_by(VerdictRow.id)
            .options(selectinload(VerdictRow.findings))
        ).all()

    def artifacts(self, run_pk: int) -> Sequence[Artifact]:
        return self.session.scalars(select(Artifact).where(Artifact.run_id == run_pk).order_by(Artifact.path)).all()

    def artifact(self, run_pk: int, path: str) -> Artifact | None:
        return self.session.scalars(
            select(Artifact).where(Artifact.run_id == run_pk, Artifact.path == path)
        ).one_or_none()

    def measurements(self, run_pk: int) -> Sequence[Measurement]:
        return self.session.scalars(
            select(Measurement).where(Measurement.run_id == run_pk).order_by(Measurement.id)
        ).all()

    def probe_results(self, run_pk: int) -> Sequence[ProbeResultRow]:
        return self.session.scalars(
            select(ProbeResultRow).where(ProbeResultRow.run_id == run_pk).order_by(ProbeResultRow.id)
        ).all()

    def blob_referenced(self, keys: Iterable[str]) -> set[str]:
        keys = list(keys)
        if not keys:
            return set()
        return set(self.session.scalars(select(Artifact.blob_key).where(Artifact.blob_key.in_(keys))).all())

    def current_verdict_rows(self, filters: RunFilters) -> Sequence[tuple[Run, VerdictRow | None]]:
        filters = self.resolve(filters)
        stmt = (
            select(Run, VerdictRow)
            .outerjoin(VerdictRow, VerdictRow.id == Run.current_verdict_id)
            .where(*filters.clauses())
            .order_by(Run.id)
        )
        return [(r, v) for r, v in self.session.execute(stmt).all()]

    # -- writes --------------------------------------------------------------------------------
    def add_run(self, run: Run, artifacts: list[Artifact]) -> Run:
        self.session.add(run)
        self.session.flush()
        for a in artifacts:
            a.run_id = run.id
        self.session.add_all(artifacts)
        self.session.flush()
        return run

    def delete_run(self, run_pk: int) -> None:
        """Compensation only (a run whose blobs could not be stored); normal operation never deletes."""
        self.session.execute(delete(Run).where(Run.id == run_pk))

    def append_verdict(
        self, run: Run, result: VerdictResult, *, job_id: int | None = None
    ) -> VerdictRow:
        """Append a verdict to the run's history and make it current (rows are never updated)."""
        d = result.to_dict()
        row = VerdictRow(
            run_id=run.id,
            verdict=str(d["verdict"]),
            reward_hack=bool(d["reward_hack"]),
            contamination=str(d["contamination"]),
            template_mutated=d["template_mutated"],
            correct=d["correct"],
            correct_source=str(d["correct_source"]),
            failure_reason=d["failure_reason"],
            measurement_status=str(d["measurement_status"]),
            publish_grade=bool(d["publish_grade"]),
            metric=d["metric"],
            reasons=list(d["reasons"]),
            justification=dict(d["justification"]),
            probes_required=list(d["probes_required"]),
            probes_run=list(d["probes_run"]),
            produced_by=str(d["produced_by"]),
            producer_detail=str(d["producer_detail"]),
            context=to_jsonable(d.get("context") or {}),
            job_id=job_id,
            ruleset=ruleset_version(),
            created_at=utcnow(),
        )
        self.session.add(row)
        self.session.flush()
        for f in d["findings"]:
            self.session.add(
                FindingRow(
                    verdict_id=row.id,
                    rule_id=str(f.get("rule_id", "")),
                    rule_name=str(f.get("rule_name", "")),
                    severity=str(f.get("severity", "")),
                    effect=str(f.get("effect", "")),
                    file=f.get("file"),
                    line_start=f.get("line_start"),
                    line_end=f.get("line_end"),
                    quote=str(f.get("quote", "")),
                    explanation=str(f.get("explanation", "")),
                    probe=f.get("probe"),
                    data=to_jsonable(f.get("data") or {}),
                )
            )
        run.current_verdict_id = row.id
        run.verdict = row.verdict
        run.reward_hack = row.reward_hack
        run.contamination = row.contamination
        run.publish_grade = row.publish_grade
        self.session.flush()
        return row

    def add_measurement(self, measurement: Measurement) -> Measurement:
        self.session.add(measurement)
        self.session.flush()
        return measurement

    def add_probe_results(self, rows: list[ProbeResultRow]) -> None:
        self.session.add_all(rows)
        self.session.flush()
