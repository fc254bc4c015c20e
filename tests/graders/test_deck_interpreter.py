"""The bundled deck's examples through run_check under the Triton interpreter (SMALL shapes).

A subset keeps CI fast: one seed (the `seeds` argument is for tests only; regrades use all three),
the genuine Triton examples and one broken example per problem.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from graders.correctness import run_check
from graders.logformat import parse_check_log

from .conftest import HARD


def _examples(prefix: str) -> list[Path]:
    if not HARD.is_dir():
        return []
    return sorted(p for p in HARD.glob(f"*/examples/{prefix}*.py"))


GENUINE_TRITON = [p for p in _examples("genuine_") if "triton" in p.name]
BROKEN = [sorted(d.glob("broken_*.py"))[0] for d in sorted(HARD.glob("*/examples")) if list(d.glob("broken_*.py"))]


def _run(example: Path) -> list[str]:
    lines: list[str] = []
    run_check(example, example.parent.parent, device="cpu", shapes="small", seeds=(42,), emit=lines.append,
              property_seed=2026)
    return lines


@pytest.mark.parametrize("example", GENUINE_TRITON, ids=[f"{p.parent.parent.name}/{p.name}" for p in GENUINE_TRITON])
def test_genuine_triton_example_passes(example: Path) -> None:
    lines = _run(example)
    log = parse_check_log("\n".join(lines))
    assert log.passed, lines
    assert log.framework_line is not None and log.framework_line.startswith("framework: triton")


@pytest.mark.parametrize("example", BROKEN, ids=[f"{p.parent.parent.name}/{p.name}" for p in BROKEN])
def test_broken_example_fails_with_grammar_line(example: Path) -> None:
    lines = _run(example)
    log = parse_check_log("\n".join(lines))
    assert not log.passed and log.failure is not None, lines
    assert log.failure.kind in {"tolerance", "property_stress", "state_dict_mismatch", "other"}, lines[-1]
    assert lines[-1].startswith("FAIL: ")


def test_deck_has_the_required_examples() -> None:
    if not HARD.is_dir():
        pytest.skip("kernels/hard not present")
    names = {f"{p.parent.parent.name}/{p.name}" for p in GENUINE_TRITON}
    for problem in ("01_fp8_gemm", "05_topk_bitonic", "07_w4a16_gemm"):
        assert any(n.startswith(problem + "/") for n in names), problem
