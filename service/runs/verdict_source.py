"""Where a freshly ingested run's verdict comes from: the audit library decides.

`audit_rules.engine.audit_unpacked` runs every rule over the staged archive and synthesises the
verdict (what the archive alone decides — provider failure, infrastructure failure, verified
template mutation — is part of that synthesis). The verdict row records `Producer.AUDIT`, or
`Producer.REGRADE` when a GradeResult is passed in by the worker.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from audit_rules.engine import audit_unpacked
from audit_rules.verdicts import VerdictResult
from ingest.model import DeckSnapshot, ParsedRun, UnpackedArchive


def audit_run(
    archive: UnpackedArchive,
    run: ParsedRun,
    decks: Sequence[DeckSnapshot],
    *,
    other_run_ids: frozenset[str] = frozenset(),
    grade: Any = None,
) -> VerdictResult:
    return audit_unpacked(archive, run, decks, grade=grade, other_run_ids=other_run_ids)
