"""Where a freshly ingested run's verdict comes from: the verdict pipeline decides.

`audit_rules.pipeline.judge` runs every rule over the staged archive and synthesises the
verdict (what the archive alone decides — provider failure, infrastructure failure, verified
template mutation — is part of that synthesis). The verdict row records `Producer.AUDIT`, or
`Producer.REGRADE` when a GradeResult is passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from audit_rules.pipeline import judge
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
    return judge(archive, run, decks, grade=grade, other_run_ids=other_run_ids).verdict
