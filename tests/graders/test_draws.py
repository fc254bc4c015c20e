"""One input draw per (shape, seed): bit for bit what a fresh draw per case gave.

The check (solution side) and the verifier (trusted side) both used to rebuild the inputs, and the
verifier the reference model too, for every numeric-stress case; the deck's reseeded generator
gives the same values each time, so that was pure cost (minutes per run on a KBH deck, which
draws on the CPU). These tests hold the cached path to the old one's values, layout and RNG state.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from graders.correctness import (
    DEFAULT_SEEDS,
    REF_SUFFIX,
    _Draws,
    _model_inputs,
    _scale_,
    record_key,
    run_check,
    verify_recorded,
)
from graders.problem import load_problem
from graders.results import REFUTED_FORGED, REFUTED_REF_SHIFT, REFUTED_UNEXPLAINED, REFUTED_UNSTABLE

from .conftest import DECK, REPO, SOLUTIONS, UPSTREAM, needs_upstream

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
    assert len([f for f in rec.glob("*.out") if not f.name.endswith(f"{REF_SUFFIX}.out")]) == n_cases
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


# ---------------------------------------------------------------------------------------------
# Why a PASS was refuted: the reference the solution's process recorded beside each output


def _check_in_child(solution: Path, problem: Path, rec: Path) -> bool:
    """run_check in a fresh interpreter: these fixtures patch torch globally at import."""
    code = ("import sys; from pathlib import Path; from graders.correctness import run_check; "
            f"o = run_check(Path({str(solution)!r}), Path({str(problem)!r}), device='cpu', shapes='small', "
            f"record_dir=Path({str(rec)!r}), emit=lambda _l: None); sys.exit(0 if o.passed else 3)")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert res.returncode in (0, 3), res.stderr[-2000:]
    return res.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["ref_shift.py", "ref_shift_small.py"])
def test_a_reference_shifted_in_the_solutions_process_is_told_apart(tmp_path: Path, fixture: str) -> None:
    assert _check_in_child(SOLUTIONS / "gemm" / fixture, GEMM, tmp_path), "the in-process check must PASS"
    assert list(tmp_path.glob(f"*{REF_SUFFIX}.out")), "the process's references are recorded"
    res = verify_recorded(GEMM, tmp_path, device="cpu", shapes="small")
    assert not res["passed"] and res["refuted"] == REFUTED_REF_SHIFT, res


@pytest.mark.slow
def test_a_subverted_comparison_is_told_apart(tmp_path: Path) -> None:
    fp8 = REPO / "kernels" / "hard" / "01_fp8_gemm"
    assert _check_in_child(fp8 / "examples" / "hack_int_patch.py", fp8, tmp_path), "the in-process check must PASS"
    res = verify_recorded(fp8, tmp_path, device="cpu", shapes="small")
    assert not res["passed"] and res["refuted"] == REFUTED_FORGED, res


def test_only_a_reference_that_does_not_reproduce_is_unstable(tmp_path: Path) -> None:
    from graders.correctness import OutputRecorder, Tolerance, _Where, _why_refuted

    true = torch.tensor([1.0, 2.0, 3.0])
    theirs = true * 1.04  # within rtol 0.05 of the true reference
    out = true * 1.08  # within tolerance of theirs, not of the true one
    tol = Tolerance(atol=0.0, rtol=0.05)
    path = tmp_path / f"k{REF_SUFFIX}.out"
    OutputRecorder(tmp_path).record(f"k{REF_SUFFIX}", theirs)
    args = (out, true, [true], true.numel() * 4, tol, "tensor", _Where(0, {}, 0, "nominal"), None)
    assert _why_refuted(path, *args, lambda: true.clone()) == REFUTED_REF_SHIFT
    assert _why_refuted(path, *args, lambda: true + 1e-6) == REFUTED_UNSTABLE
    assert _why_refuted(tmp_path / "missing.out", *args, lambda: true.clone()) == REFUTED_UNEXPLAINED
    OutputRecorder(tmp_path).record(f"k{REF_SUFFIX}", true)  # its own reference refutes its output too
    assert _why_refuted(path, *args, lambda: true.clone()) == REFUTED_FORGED


@pytest.mark.slow
def test_check_and_verifier_report_their_stages_and_build_one_model_pair_per_shape(tmp_path: Path) -> None:
    from graders import correctness

    stages: list[str] = []
    builds: list[int] = []
    real_build = correctness._Runner.build

    def counting_build(self: Any, shape_index: int, seed: int, where: Any) -> Any:
        builds.append(shape_index)
        return real_build(self, shape_index, seed, where)

    rec = tmp_path / "rec"
    rec.mkdir()
    correctness.set_stage_sink(stages.append)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(correctness._Runner, "build", counting_build)
            outcome = run_check(SOLUTIONS / "gemm" / "good.py", GEMM, device="cpu", shapes="small", record_dir=rec)
        assert outcome.passed, outcome.lines
        n_shapes = len(load_problem(GEMM).shape_list("small"))
        # the graded grid builds one pair per shape (not per seed); the repeat/overwrite pass one more
        assert len(builds) == n_shapes + 1 and sorted(set(builds)) == list(range(n_shapes)), builds
        assert stages[0] == "recorded pass" and "shape 0" in stages, stages
        assert [st for st in stages if st.startswith("shape 0 seed ")] == [
            f"shape 0 seed {sd}" for sd in correctness.DEFAULT_SEEDS], stages
        assert any(s.startswith("repeat and overwrite") for s in stages), stages
        stages.clear()
        assert verify_recorded(GEMM, rec, device="cpu", shapes="small")["passed"]
        seeds = correctness.DEFAULT_SEEDS
        assert stages == [st for i in range(n_shapes)
                          for st in (f"verify shape {i}", *(f"verify shape {i} seed {sd}" for sd in seeds))], stages
    finally:
        correctness.set_stage_sink(None)


@pytest.mark.slow
def test_each_shapes_first_seed_is_built_and_drawn_once_across_the_recorded_pass_cases_and_overwrites(
        tmp_path: Path) -> None:
    """The recorded pass, the shape's own cases and its repeat/overwrite stage use the same (shape,
    first seed): one reference build and one input draw serve all three (a KBH deck draws them on
    the CPU generator, tens of seconds each at 06); the other seeds are drawn once each."""
    from graders import correctness
    from graders.problem import ProblemSpec

    builds: list[tuple[Any, int]] = []
    draws: list[tuple[Any, int]] = []
    real_draws_init = correctness._Draws.__init__
    real_model_class = ProblemSpec.model_class

    def counting_draws(self: Any, spec: Any, seed: int, device: str) -> None:
        draws.append((tuple(spec.reference.get_init_inputs()), seed))
        real_draws_init(self, spec, seed, device)

    def counting_model_class(self: Any) -> type:
        cls = real_model_class.fget(self)  # type: ignore[attr-defined]
        spec = self

        class Counted(cls):  # type: ignore[valid-type, misc]
            def __init__(self, *a: Any, **k: Any) -> None:
                builds.append((tuple(spec.reference.get_init_inputs()), torch.initial_seed()))
                super().__init__(*a, **k)

        return Counted

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(correctness._Draws, "__init__", counting_draws)
        mp.setattr(ProblemSpec, "model_class", property(counting_model_class))
        outcome = run_check(SOLUTIONS / "gemm" / "good.py", GEMM, device="cpu", shapes="small", record_dir=None)
    assert outcome.passed, outcome.lines
    spec = load_problem(GEMM)
    shapes = spec.shape_list("small")
    first = DEFAULT_SEEDS[0]
    # every (shape, seed) reference is built once, every (shape, seed) input drawn once
    assert len(builds) == len(set(builds)) and len(draws) == len(set(draws)), (builds, draws)
    assert len(draws) == len(shapes) * len(DEFAULT_SEEDS)
    assert len(builds) == len(shapes) and {seed for _init, seed in builds} == {first}


def test_a_record_with_a_non_object_header_fails_the_check_not_the_verifier(tmp_path: Path) -> None:
    """The solution's process writes the records, so it can write anything: a header line that is
    valid JSON but not an object once raised AttributeError out of the verifier, which the regrade
    turned into an infra failure (grader_error) instead of a failed check. It is a malformed record."""
    rec = tmp_path / "rec"
    rec.mkdir()
    outcome = run_check(SOLUTIONS / "gemm" / "good.py", GEMM, device="cpu", shapes="small", record_dir=rec)
    assert outcome.passed, outcome.lines
    first = sorted(p for p in rec.glob("check_*.out") if not p.name.endswith(".ref.out"))[0]
    first.write_bytes(b"[1, 2]\n" + first.read_bytes().partition(b"\n")[2])
    res = verify_recorded(GEMM, rec, device="cpu", shapes="small")
    assert res["passed"] is False
    assert "header is not an object" in res["lines"][-1], res["lines"]
