"""Example solutions at SMALL shapes on the CPU: genuine ones agree with the reference (Triton
kernels run through TRITON_INTERPRET=1), broken ones disagree. Computed directly with
tests/kernels/deck.py (nominal + every stress case + property cases)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kernels import deck


def _params(prefix: str) -> list[tuple[str, Path]]:
    return [(p, path) for p in deck.PROBLEMS for path in deck.examples(p, prefix)]


def _id(value: object) -> str:
    return value.stem if isinstance(value, Path) else str(value)


@pytest.mark.parametrize(("problem", "path"), _params("genuine_"), ids=_id)
def test_genuine_example_agrees_with_the_reference(problem: str, path: Path) -> None:
    solution = deck.load_module(path, interpret=True)
    pseeds = range(5) if problem in deck.PROPERTY_PROBLEMS else ()
    failures = deck.check_solution(
        problem, solution.Model, deck.shapes(problem).SMALL_SHAPES, device="cpu", property_seeds=pseeds
    )
    assert failures == []


@pytest.mark.parametrize(("problem", "path"), _params("broken_"), ids=_id)
def test_broken_example_disagrees_with_the_reference(problem: str, path: Path) -> None:
    solution = deck.load_module(path, interpret=True)
    failures = deck.check_solution(
        problem, solution.Model, deck.shapes(problem).SMALL_SHAPES, device="cpu", stop_at_first=True
    )
    assert failures, f"{path.name} must fail"


@pytest.mark.parametrize("seed", range(5, 15))
def test_triton_topk_handles_ties_and_infinities(seed: int) -> None:
    """The property generator's adversarial rows (ties, -inf padding, +-0, extremes), many seeds."""
    path = deck.DECK / "05_topk_bitonic" / "examples" / "genuine_triton.py"
    solution = deck.load_module(path, interpret=True)
    assert deck.check_solution("05_topk_bitonic", solution.Model, [], device="cpu", property_seeds=[seed]) == []


def test_triton_fp8_gemm_masks_an_odd_k_tail() -> None:
    """K = 95 and 4127-like tails: the masked K loop must add nothing past K."""
    path = deck.DECK / "01_fp8_gemm" / "examples" / "genuine_triton.py"
    solution = deck.load_module(path, interpret=True)
    shapes = [{"M": 70, "N": 130, "K": 257}, {"M": 1, "N": 64, "K": 31}]
    assert deck.check_solution("01_fp8_gemm", solution.Model, shapes, device="cpu") == []


def test_broken_examples_fail_for_the_documented_reason() -> None:
    """Spot checks that each broken example fails on its own defect, not by crashing."""
    fp32 = deck.load_module(deck.DECK / "01_fp8_gemm" / "examples" / "broken_fp32_output.py")
    (why,) = deck.check_solution("01_fp8_gemm", fp32.Model, deck.shapes("01_fp8_gemm").SMALL_SHAPES[:1],
                                 device="cpu", stop_at_first=True)
    assert "torch.float32" in why
    order = deck.load_module(deck.DECK / "05_topk_bitonic" / "examples" / "broken_index_order.py")
    (why,) = deck.check_solution("05_topk_bitonic", order.Model, deck.shapes("05_topk_bitonic").SMALL_SHAPES[:1],
                                 device="cpu", stop_at_first=True)
    assert "values tolerance exceeded" in why
