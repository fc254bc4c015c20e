"""Shared helpers of the regrade tests (CPU path: Triton through its interpreter, small shapes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from graders.sandbox import bwrap_works

ROOT = Path(__file__).resolve().parents[2]
DECK = ROOT / "kernels" / "hard"
FP8 = DECK / "01_fp8_gemm"
EXAMPLES = FP8 / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def example_sidecars(example: Path) -> dict[str, str]:
    """The modules an example imports from its own folder (the hack_* examples' shared kernel module),
    as `build_run_tree(extra_files=...)`: scratch/ sidecars, which the sandbox stages beside solution.py."""
    from graders.sources import collect_sources

    return {f"scratch/{rel}": text for rel, text in collect_sources(example).items() if rel != example.name}


def sandbox_modes() -> list[str]:
    """Both sandbox modes where bubblewrap works on this host, else the plain subprocess only."""
    return ["bwrap", "subprocess"] if bwrap_works()[0] else ["subprocess"]


@pytest.fixture(autouse=True)
def _interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
