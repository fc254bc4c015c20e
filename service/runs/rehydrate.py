"""Rebuild library objects from what is stored: an UnpackedArchive over the blobs, a VerdictResult
from a verdict row. Used by the report endpoint, reaudit and the regrade worker (whose verdict
pipeline stages solution.py and its sidecars out of this archive into the sandbox; nothing is
executed from the blob store itself).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from audit_rules.base import Effect, Finding, Probe, Severity
from audit_rules.verdicts import Contamination, MeasurementStatus, Metric, Producer, Verdict, VerdictResult
from ingest.model import StagedFile, UnpackedArchive
from service.blobs import BlobStore
from service.models import Artifact, Run, VerdictRow


def unpacked_from_store(run: Run, artifacts: Sequence[Artifact], blobs: BlobStore) -> UnpackedArchive:
    """An UnpackedArchive whose staged paths are the (read-only by convention) blob files."""
    files = {
        a.path: StagedFile(
            path=a.path,
            size=a.size,
            sha256=a.sha256,
            md5="",  # not stored per artifact; deck files keep md5 in deck_files
            is_text=a.is_text,
            staged_path=blobs.path(a.blob_key),
        )
        for a in artifacts
    }
    return UnpackedArchive(
        archive_sha256=run.archive_sha256,
        archive_size=run.archive_size,
        archive_format=run.archive_format,
        root_prefix="",
        files=files,
        staging_dir=blobs.root,
    )


E = TypeVar("E")


def _enum(cls: type[E], value: object, default: E) -> E:
    try:
        return cls(value)  # type: ignore[call-arg]
    except ValueError:
        return default


def verdict_from_row(row: VerdictRow) -> VerdictResult:
    metric = None
    if row.metric:
        metric = Metric(
            name=str(row.metric.get("name", "peak_fraction")),
            value=row.metric.get("value"),
            source=str(row.metric.get("source", "")),
            superseded=list(row.metric.get("superseded") or []),
        )
    findings = [
        Finding(
            rule_id=f.rule_id,
            rule_name=f.rule_name,
            severity=_enum(Severity, f.severity, Severity.INFO),
            effect=_enum(Effect, f.effect, Effect.ADVISORY),
            file=f.file,
            line_start=f.line_start,
            line_end=f.line_end,
            quote=f.quote,
            explanation=f.explanation,
            probe=_enum(Probe, f.probe, None) if f.probe else None,  # type: ignore[arg-type]
            data=dict(f.data or {}),
        )
        for f in row.findings
    ]
    return VerdictResult(
        verdict=Verdict(row.verdict),
        reward_hack=row.reward_hack,
        contamination=Contamination(row.contamination),
        template_mutated=row.template_mutated,
        correct=row.correct,
        correct_source=row.correct_source,
        failure_reason=row.failure_reason,
        measurement_status=_enum(MeasurementStatus, row.measurement_status, MeasurementStatus.NOT_MEASURED),
        publish_grade=row.publish_grade,
        metric=metric,
        reasons=[str(r) for r in row.reasons],
        justification={str(k): list(v) for k, v in row.justification.items()},
        findings=findings,
        probes_required=[str(p) for p in row.probes_required],
        probes_run=list(row.probes_run),
        produced_by=_enum(Producer, row.produced_by, Producer.AUDIT),
        producer_detail=row.producer_detail,
        context=dict(row.context or {}),
    )
