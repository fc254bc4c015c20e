"""Shared paths for the grader tests."""

from __future__ import annotations

from pathlib import Path

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
