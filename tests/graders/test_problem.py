from __future__ import annotations

import pytest

from graders.problem import ProblemError, eval_formula, load_problem

from .conftest import DECK


def test_load_problem_reads_yaml_and_modules() -> None:
    spec = load_problem(DECK / "gemm_tiny")
    assert spec.id == "gemm_tiny"
    assert spec.regime == "compute" and spec.precision == "bf16"
    assert spec.tolerance.atol == 0.05
    assert [c.name for c in spec.numeric_stress] == ["large_x", "small_weight"]
    assert spec.numeric_stress[1].scale_state == {"weight_scale": 0.01}
    assert spec.numeric_stress[0].scale_inputs == {0: 8.0}
    assert spec.warmup == 1 and spec.trials == 3
    assert spec.shape_list("small")[0] == {"M": 8, "N": 16, "K": 16}
    assert spec.flops({"M": 2, "N": 3, "K": 4}) == 48.0


def test_apply_shape_sets_reference_globals_and_modules_are_isolated() -> None:
    a = load_problem(DECK / "gemm_tiny")
    b = load_problem(DECK / "gemm_tiny")
    assert a.reference is not b.reference
    a.apply_shape({"M": 3, "N": 5, "K": 7})
    assert a.reference.get_init_inputs() == [3, 5, 7]
    assert b.reference.get_init_inputs() == [16, 24, 32]
    assert tuple(a.reference.get_inputs()[0].shape) == (3, 7)


@pytest.mark.parametrize(
    ("expr", "want"),
    [("2*M*N*K", 2 * 2 * 3 * 4), ("M*K + N*K/2", 2 * 4 + 3 * 4 / 2), ("max(M, N)**2", 9), ("cdiv(K, 3)", 2), (7, 7)],
)
def test_eval_formula_arithmetic(expr: str | int, want: float) -> None:
    assert eval_formula(expr, {"M": 2, "N": 3, "K": 4}) == pytest.approx(want)


@pytest.mark.parametrize(
    "expr",
    [
        "__import__('os').system('true')",
        "M.__class__",
        "[x for x in range(3)]",
        "open('/etc/passwd')",
        "lambda: 1",
        "2**100000",
        "Q*2",
        "M[0]",
    ],
)
def test_eval_formula_refuses_code(expr: str) -> None:
    with pytest.raises(ProblemError):
        eval_formula(expr, {"M": 2})
