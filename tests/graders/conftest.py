"""Shared paths for the grader tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
DECK = FIXTURES / "deck"
SOLUTIONS = FIXTURES / "solutions"
REPO = Path(__file__).resolve().parents[2]
HARD = REPO / "kernels" / "hard"


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    # CPU runs use the Triton interpreter; set before any solution module is imported.
    monkeypatch.setenv("TRITON_INTERPRET", "1")


UPSTREAM = REPO.parent / "shared" / "kbh-upstream"  # the real benchmark snapshot, read in place (CI has ../shared)
OFFICIAL_DECK = FIXTURES / "official_deck"
OFFICIAL_SOLUTIONS = FIXTURES / "official_solutions"
needs_upstream = pytest.mark.skipif(not (UPSTREAM / "hard" / "problems-h100").is_dir(),
                                    reason="../shared/kbh-upstream is not present")


def import_deck(problems_dir: Path, name: str, data_dir: Path, harness_dir: Path | None = None) -> Any:
    """What `kaudit deck import DIR --name N --harness H` does on disk (graders.decks), without the DB."""
    from graders import decks
    from ingest.decks import scan_deck_dir

    snap = scan_deck_dir(problems_dir, name)
    problems = {p: {f: fh.sha256 for f, fh in files.items()} for p, files in snap.problems.items()}
    harness = decks.scan_harness(harness_dir) if harness_dir is not None else {}
    return decks.materialize(name, Path(problems_dir).resolve(), problems,
                             harness_dir=Path(harness_dir).resolve() if harness_dir is not None else None,
                             harness=harness, data_dir=data_dir)
