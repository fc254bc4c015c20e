"""One input draw per (shape, seed): bit for bit what a fresh draw per case gave.

The check (solution side) and the verifier (trusted side) both used to rebuild the inputs, and the
verifier the reference model too, for every numeric-stress case; the deck's reseeded generator
gives the same values each time, so that was pure cost (minutes per run on a KBH deck, which
draws on the CPU). These tests hold the cached path to the old one's values, layout and RNG state.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from graders.correctness import (
    DEFAULT_SEEDS,
    _Draws,
    _model_inputs,
    _scale_,
    record_key,
    run_check,
    verify_recorded,
)
from graders.problem import load_problem

from .conftest import DECK, SOLUTIONS, UPSTREAM, needs_upstream

GEMM = DECK / "gemm_tiny"


def _same(a: list[Any], b: list[Any]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        if isinstance(x, torch.Tensor):
            assert x is not y and x.data_ptr() != y.data_ptr()
            assert x.dtype == y.dtype and x.stride() == y.stride() and x.device == y.device
            assert torch.equal(x.view(torch.uint8) if x.element_size() == 1 else x, y.view(torch.uint8)
                               if y.element_size() == 1 else y)
        else:
            assert x == y


def _fresh_then_state(spec: Any, seed: int) -> tuple[list[Any], torch.Tensor]:
    inputs = _model_inputs(spec, seed, "cpu")
    return inputs, torch.get_rng_state()


@pytest.mark.parametrize("problem", [GEMM, Path(__file__).resolve().parents[2] / "kernels" / "hard" / "01_fp8_gemm"])
def test_each_take_equals_a_fresh_draw_and_leaves_the_generator_where_it_did(problem: Path) -> None:
    spec = load_problem(problem)
    spec.apply_shape(spec.shape_list("small")[0])
    for seed in DEFAULT_SEEDS:
        fresh, state = _fresh_then_state(spec, seed)
        draws = _Draws(spec, seed, "cpu")
        assert draws.pristine is not None
        for _ in range(3):
            torch.rand(17)  # what a solution or a stress case might draw in between
            got = draws.take()
            _same(got, fresh)
            assert torch.equal(torch.get_rng_state(), state)
            _scale_(got[0], 8.0)  # a stress case scales its own clone, never the pristine draw
        _same(draws.take(), fresh)


@needs_upstream
def test_a_kbh_deck_draw_is_cached_the_same_way() -> None:
    spec = load_problem(UPSTREAM / "hard" / "problems-h100" / "07_w4a16_gemm")
    spec.apply_shape({"M": 4, "N": 256, "K": 256})
    fresh, state = _fresh_then_state(spec, 123)
    draws = _Draws(spec, 123, "cpu")
    _same(draws.take(), fresh)
    assert torch.equal(torch.get_rng_state(), state)


def test_inputs_a_clone_would_not_reproduce_are_redrawn_per_case() -> None:
    def get_inputs() -> list[Any]:
        base = torch.randn(4, 8)
        return [base[:, :4], torch.randn(3).expand(5, 3), 7]  # a view into a larger buffer; an expanded tensor

    spec = SimpleNamespace(reference=SimpleNamespace(get_inputs=get_inputs), draw_context=lambda d: _null())
    fresh = _model_inputs(spec, 5, "cpu")  # type: ignore[arg-type]
    draws = _Draws(spec, 5, "cpu")  # type: ignore[arg-type]
    assert draws.pristine is None
    got = draws.take()
    assert got[0].stride() == fresh[0].stride() == (8, 1) and got[1].stride() == (0, 1)
    assert torch.equal(got[0], fresh[0]) and torch.equal(got[1], fresh[1]) and got[2] == 7


def _null() -> Any:
    import contextlib

    return contextlib.nullcontext()


@pytest.mark.slow
def test_the_verifier_checks_every_recorded_case_and_names_a_forged_one(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    rec.mkdir()
    outcome = run_check(SOLUTIONS / "gemm" / "good.py", GEMM, device="cpu", shapes="small", record_dir=rec)
    assert outcome.passed, outcome.lines
    spec = load_problem(GEMM)
    n_cases = len(spec.shape_list("small")) * len(DEFAULT_SEEDS) * (1 + len(spec.numeric_stress))
    assert len(list(rec.glob("*.out"))) == n_cases
    good = verify_recorded(GEMM, rec, device="cpu", shapes="small")
    assert good["passed"] and good["cases"] == n_cases, good
    # the scale_state case of the LAST seed: the reference's base weights must be back by then
    stress = spec.numeric_stress[-1]
    assert stress.scale_state
    path = rec / f"{record_key(0, DEFAULT_SEEDS[-1], stress)}.out"
    raw = bytearray(path.read_bytes())
    raw[-4:] = b"\x00\x00\xc0\x7f"  # the last float32 element becomes NaN
    path.write_bytes(bytes(raw))
    bad = verify_recorded(GEMM, rec, device="cpu", shapes="small")
    per_seed = 1 + len(spec.numeric_stress)
    assert not bad["passed"] and bad["cases"] == (len(DEFAULT_SEEDS) - 1) * per_seed + per_seed - 1, bad
    assert f"seed {DEFAULT_SEEDS[-1]} case {stress.name}" in bad["lines"][-1], bad["lines"]
