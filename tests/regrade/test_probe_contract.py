"""The grader's contract for probes (docs/regrade.md, "The grader's contract").

Weights and buffers change only through version-bumping in-place writes and load_state_dict;
inputs change through same-storage rewrites with and without a version bump (whole tensor, one
row, scattered elements) and through fresh tensors. A weight repack keyed on (data_ptr,
_version, shape) passes every probe; caches keyed on an input's identity or pointer, or on a
weight's pointer alone, fail. Probes also run when the check itself failed, so the verdict has
the check's FAIL line and the probe numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from graders.probes import cases as C
from graders.problem import load_problem
from graders.regrade import regrade
from graders.results import GradeResult, ProbeStatus
from tests.regrade.conftest import DECK, FIXTURES

W4A16 = DECK / "07_w4a16_gemm"
REPACK = W4A16 / "examples" / "genuine_versioned_repack.py"
CPU_PROBES = {"same_storage_overwrite", "weight_mutation", "repeat_calls", "output_aliasing", "checked_vs_timed",
              "fresh_vs_warm"}


# ---------------------------------------------------------------------------------------------
# The plans themselves (fast)


@pytest.mark.parametrize("problem", ["01_fp8_gemm", "07_w4a16_gemm"])
def test_every_weight_step_bumps_the_version_and_keeps_the_storage(problem: str) -> None:
    spec = load_problem(DECK / problem)
    shape = spec.shape_list("small")[0]
    case = C.build_case(spec, shape, 1202, "cpu")
    plan = C.weight_plan(spec, C.float_state_names(case.ref_model))
    assert {s["kind"] for s in plan} == {"scale", "load_state"}
    assert not any(s["name"].endswith("_raw") for s in plan)
    for step in plan:
        fresh = C.reload_state(spec, shape, int(step["seed"]), "cpu") if step["kind"] == "load_state" else None
        before = {k: v.clone() for k, v in case.ref_model.state_dict().items()}
        fact = C.apply_state_mutation(case.ref_model, step, fresh)
        assert fact["changed"] and fact["all_versions_bumped"], (step["name"], fact)
        assert all(c["same_data_ptr"] for c in fact["changed"]), (step["name"], fact)
        moved = [k for k, v in case.ref_model.state_dict().items() if not torch.equal(v, before[k])]
        assert moved, f"{step['name']} changed nothing"


def test_a_parameter_is_written_through_itself_so_its_version_moves() -> None:
    """`p.data.mul_()` would NOT bump a Parameter's counter; the probe must never write that way."""
    lin = torch.nn.Linear(4, 3)
    v = lin.weight._version
    fact = C.apply_state_mutation(lin, {"kind": "scale", "scale": {"weight": 2.0, "bias": 3.0}})
    assert fact["all_versions_bumped"] and lin.weight._version > v
    p = torch.nn.Parameter(torch.ones(2))
    v = p._version
    p.data.mul_(2)
    assert p._version == v  # the trap the contract avoids


def test_input_plan_covers_bumped_raw_rows_scatter_and_fresh_tensors() -> None:
    spec = load_problem(W4A16)
    case = C.build_case(spec, spec.shape_list("small")[1], 1101, "cpu")
    original = case.inputs[0]
    plan = C.overwrite_plan(case.inputs, 1101)
    kinds = {(s["kind"], s["bump"]) for s in plan}
    assert {("full", True), ("full", False), ("row", True), ("row", False), ("scatter", True),
            ("scatter", False), ("fresh", True)} <= kinds
    facts = {s["name"]: C.apply_mutation(case.inputs, s) for s in plan}
    for name, fact in facts.items():
        if name == "fresh_tensor":
            assert fact["same_data_ptr"] is False
        else:
            assert fact["same_data_ptr"] is True
            assert fact["version_bumped"] is name.endswith("_bump"), (name, fact)
    assert case.inputs[0] is not original


KDA = Path(__file__).resolve().parents[2].parent / "shared" / "kbh-upstream" / "hard" / "problems-h100" / "02_kda_cutlass"


@pytest.mark.skipif(not KDA.is_dir(), reason="needs ../shared/kbh-upstream")
def test_input_rewrites_stay_in_the_decks_domain_on_the_real_kda_deck() -> None:
    """KDA's log-decay gate is small and mostly negative and beta is a sigmoid: Gaussian noise at
    the inputs' scale (the probe's old rewrite) made this reference's output ~2e6x larger at
    T=512 (8e11 at the H200 run's T=2048), where no comparison says anything about staleness.
    Values resampled from each input keep its range, and the reference stays at its scale."""
    spec = load_problem(KDA)
    case = C.build_case(spec, {"B": 1, "T": 512, "H": 2, "K": 128, "V": 128, "CHUNK_SIZE": 64}, 1101, "cpu")
    lo = [float(t.float().min()) if C.is_float(t) else None for t in case.inputs]
    hi = [float(t.float().max()) if C.is_float(t) else None for t in case.inputs]
    with torch.no_grad():
        base = float(case.ref_model(*case.inputs).float().abs().max())
    plan = C.overwrite_plan(case.inputs, 1101)
    assert len(plan) >= 7
    for step in plan:
        C.apply_mutation(case.inputs, step)
        for i, t in enumerate(case.inputs):
            if lo[i] is not None:
                assert lo[i] <= float(t.float().min()) and float(t.float().max()) <= hi[i], (step["name"], i)
        beta = case.inputs[4].float()
        assert bool(((beta > 0) & (beta < 1)).all()), step["name"]
        with torch.no_grad():
            out = case.ref_model(*case.inputs).float()
        assert C.all_finite([out]) and float(out.abs().max()) < 4 * base, (step["name"], float(out.abs().max()))


def test_a_step_whose_reference_left_the_finite_range_is_not_judged() -> None:
    from graders.probes.verify import _missed, version_keyed_only

    diverged = {"ok": False, "judged": False, "same_data_ptr": True, "version_bumped": True}
    raw_miss = {"ok": False, "judged": True, "same_data_ptr": True, "version_bumped": False}
    assert not _missed(diverged) and _missed(raw_miss)
    assert version_keyed_only([diverged, raw_miss])  # the unjudged bumped step is no evidence either way
    assert not version_keyed_only([diverged])
    assert C.all_finite([torch.ones(3)]) and not C.all_finite([torch.tensor([1.0, float("inf")])])
    assert C.all_finite([torch.arange(3)])  # integer outputs are finite by construction


# ---------------------------------------------------------------------------------------------
# Real regrades (sandboxed check, benchmark, untrusted runner, trusted verifier)


def _grade(solution: Path) -> GradeResult:
    grade = regrade(solution, "07_w4a16_gemm", DECK, device="cpu", probes=None, timeout_s=600)
    assert not grade.infra_failure, grade.detail
    return grade


def _status(grade: GradeResult) -> dict[str, ProbeStatus]:
    return {p.probe: p.status for p in grade.probes}


@pytest.mark.slow
def test_a_version_keyed_weight_repack_passes_every_probe() -> None:
    grade = _grade(REPACK)
    assert grade.correct is True, grade.check_lines
    status = _status(grade)
    assert set(status) == CPU_PROBES
    assert all(s is ProbeStatus.PASSED for s in status.values()), {p.probe: p.summary for p in grade.probes}
    wm = next(p for p in grade.probes if p.probe == "weight_mutation")
    steps = [s for shape in wm.numbers["shapes"] for s in shape["steps"]]
    assert {s["step"] for s in steps} >= {"all_x0.5_bump", "all_x3_bump", "load_state_dict"}
    assert all(s["versions_bumped"] is True and s["ok"] for s in steps)
    assert all(s["ref_change"] > 0 and s["solution_change"] > 0 for s in steps)


@pytest.mark.slow
@pytest.mark.parametrize("fixture", ["w4a16_input_identity_cache.py", "w4a16_input_ptr_cache.py"])
def test_an_input_cache_keyed_on_identity_or_pointer_fails(fixture: str) -> None:
    grade = _grade(FIXTURES / fixture)
    # the check catches it too, and the probes still ran: both pieces of evidence exist
    assert grade.correct is False and grade.failure_reason == "check_failed"
    assert grade.check_lines and grade.check_lines[-1].startswith("FAIL:")
    status = _status(grade)
    assert set(status) == CPU_PROBES
    assert status["same_storage_overwrite"] is ProbeStatus.FAILED
    assert status["weight_mutation"] is ProbeStatus.FAILED  # same input object, new weights: stale
    sso = next(p for p in grade.probes if p.probe == "same_storage_overwrite")
    assert "solution by 0" in sso.summary


@pytest.mark.slow
def test_a_weight_cache_keyed_on_the_pointer_alone_fails_weight_mutation_only() -> None:
    grade = _grade(FIXTURES / "w4a16_weight_ptr_repack.py")
    assert grade.correct is False and grade.check_lines[-1].startswith("FAIL:")
    status = _status(grade)
    assert status["weight_mutation"] is ProbeStatus.FAILED
    assert status["same_storage_overwrite"] is ProbeStatus.PASSED  # its inputs are read live


def test_probe_cases_draw_on_the_device_and_fall_back_to_the_decks_own_draw() -> None:
    """graders.probes.cases._drawn: a probe case draws under the device context (the runner and the
    verifier alike); a deck whose draw refuses it gets its own draw, reseeded, so both processes
    still build the same case."""
    import contextlib
    from types import SimpleNamespace

    import torch

    from graders.probes.cases import _drawn

    spec = SimpleNamespace(draw_context=lambda _device: contextlib.nullcontext())
    on_meta = _drawn(spec, "meta", 3, False, lambda: torch.randn(4))  # type: ignore[arg-type]
    assert on_meta.device.type == "meta"

    def cpu_only() -> torch.Tensor:
        if torch.empty(1).device.type != "cpu":
            raise RuntimeError("this deck draws with an explicit CPU generator")
        return torch.randn(4)

    fell_back = _drawn(spec, "meta", 3, False, cpu_only)  # type: ignore[arg-type]
    torch.manual_seed(3)
    assert fell_back.device.type == "cpu" and torch.equal(fell_back, torch.randn(4))
    exact = _drawn(spec, "meta", 3, True, lambda: torch.randn(4))  # type: ignore[arg-type]
    assert exact.device.type == "cpu"  # exact: the deck's own draw (checked_vs_timed)
