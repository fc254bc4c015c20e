"""run_check on the tiny test deck: genuine solutions pass, each defect fails with its grammar line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from graders.correctness import SMOKE_LINE, Tolerance, _Fail, _Where, compare_output, run_check
from graders.logformat import parse_check_log

from .conftest import DECK, SOLUTIONS

GEMM = DECK / "gemm_tiny"
TOPK = DECK / "topk_tiny"
TOL_LINE = re.compile(
    r"^FAIL: shape \d+ \(.*\) seed \d+ case \S+: tolerance exceeded: max_abs_diff=\S+ max_rel_diff=\S+ "
    r"bad=\d+/\d+ worst_idx=\([\d,]+\)$"
)


def _check(solution: Path, problem: Path, **kw: object) -> list[str]:
    lines: list[str] = []
    outcome = run_check(solution, problem, device="cpu", shapes="small", emit=lines.append, **kw)  # type: ignore[arg-type]
    assert outcome.lines == lines
    log = parse_check_log("\n".join(lines))
    assert log.passed == outcome.passed
    assert lines[0] == SMOKE_LINE
    return lines


def test_good_solution_passes_with_every_seed() -> None:
    lines = _check(SOLUTIONS / "gemm" / "good.py", GEMM)
    assert lines[-1] == "PASS" and lines.count("PASS") == 1
    assert any(ln.startswith("framework: torch-only") for ln in lines)


def test_triton_solution_passes_under_interpreter() -> None:
    lines = _check(SOLUTIONS / "gemm" / "triton_good.py", GEMM, seeds=(42,))
    assert lines[-1] == "PASS"
    assert any(ln.startswith("framework: triton evidence=triton_good.py:") for ln in lines)


def test_wrong_math_fails_with_tolerance_line() -> None:
    lines = _check(SOLUTIONS / "gemm" / "wrong_math.py", GEMM, seeds=(42,))
    assert TOL_LINE.match(lines[-1]), lines[-1]
    failure = parse_check_log("\n".join(lines)).failure
    assert failure is not None and failure.kind == "tolerance" and failure.seed == 42


def test_wrong_dtype_fails() -> None:
    last = _check(SOLUTIONS / "gemm" / "wrong_dtype.py", GEMM, seeds=(42,))[-1]
    assert last.startswith("FAIL: shape 0") and "dtype torch.float32 != reference torch.bfloat16" in last


def test_tensor_subclass_fails() -> None:
    last = _check(SOLUTIONS / "gemm" / "subclass.py", GEMM, seeds=(42,))[-1]
    assert "not a plain torch.Tensor" in last and "Lazy" in last


def test_nan_fails() -> None:
    last = _check(SOLUTIONS / "gemm" / "nan.py", GEMM, seeds=(42,))[-1]
    assert TOL_LINE.match(last) and "max_abs_diff=inf" in last and "worst_idx=(1,2)" in last


def test_state_dict_mismatch_fails() -> None:
    lines = _check(SOLUTIONS / "gemm" / "state_mismatch.py", GEMM, seeds=(42,))
    assert lines[-1].startswith("FAIL: state_dict mismatch at shape 0 (")
    failure = parse_check_log("\n".join(lines)).failure
    assert failure is not None and failure.kind == "state_dict_mismatch"


def test_stale_output_fails() -> None:
    last = _check(SOLUTIONS / "gemm" / "stale.py", GEMM, seeds=(42,))[-1]
    assert last.startswith("FAIL:") and "tolerance exceeded" in last


def test_pointer_keyed_cache_fails_on_in_place_overwrite() -> None:
    # Every nominal/stress case brings fresh tensors (or bumps _version): only the overwrite that
    # keeps data_ptr AND the version counter exposes it.
    last = _check(SOLUTIONS / "gemm" / "stale_per_instance.py", GEMM, seeds=(42,))[-1]
    assert "case overwrite_inplace_same_version property stress: tolerance exceeded" in last, last


def test_forbidden_alias_fails_before_import() -> None:
    lines = _check(SOLUTIONS / "gemm" / "forbidden_alias.py", GEMM)
    assert lines[-1] == "FAIL: forbidden op used: torch._scaled_mm"
    assert any(ln.startswith("forbidden_evidence: torch._scaled_mm (static:import at forbidden_alias.py:4") for ln in lines)


def test_printed_pass_does_not_reach_the_log(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _check(SOLUTIONS / "gemm" / "prints_pass.py", GEMM, seeds=(42,))
    assert lines.count("PASS") == 0 and lines[-1].startswith("FAIL:")
    assert "PASS" in capsys.readouterr().err  # the solution's prints went to stderr


def test_framework_gate_rejects_triton_on_cuda_only_deck(tmp_path: Path) -> None:
    deck = tmp_path / "gemm_cuda_only"
    deck.mkdir()
    for f in ("reference.py", "shapes.py"):
        (deck / f).write_text((GEMM / f).read_text())
    (deck / "problem.yaml").write_text((GEMM / "problem.yaml").read_text().replace(
        "required_framework: null", "required_framework: cuda"))
    last = _check(SOLUTIONS / "gemm" / "triton_good.py", deck)[-1]
    assert last.startswith("FAIL: framework not allowed: required framework cuda not used")


# -- top-k -------------------------------------------------------------------------------------


def test_topk_ties_allowed_and_property_seed_printed_first() -> None:
    lines = _check(SOLUTIONS / "topk" / "good_last_tie.py", TOPK, property_seed=7)
    assert lines[-1] == "PASS"
    assert lines[1] == "PROPERTY_SEED: 7"  # before framework detection and the import
    assert parse_check_log("\n".join(lines)).property_seed == 7


def test_topk_int32_indices_fail() -> None:
    last = _check(SOLUTIONS / "topk" / "int32_indices.py", TOPK, seeds=(42,), property_seed=1)[-1]
    assert "indices dtype torch.int32 != torch.int64" in last


def test_topk_method_form_is_forbidden() -> None:
    last = _check(SOLUTIONS / "topk" / "method_form.py", TOPK, property_seed=1)[-1]
    assert last == "FAIL: forbidden op used: torch.topk"


def test_runtime_recorder_catches_forbidden_op_in_sidecar() -> None:
    lines = _check(SOLUTIONS / "topk" / "helper_sidecar" / "solution.py", TOPK, property_seed=1)
    assert lines[-1] == "FAIL: forbidden op used: torch.topk"
    assert any("runtime:" in ln for ln in lines if ln.startswith("forbidden_evidence:"))


def _where() -> _Where:
    return _Where(0, {"B": 1, "N": 4, "K": 2}, 42, "nominal")


def test_topk_compare_accepts_tie_indices_and_rejects_duplicates() -> None:
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0]])
    ref = torch.topk(x, 2)
    tol = Tolerance(1e-4, 1e-4)
    swapped = (ref.values.clone(), ref.indices.flip(-1).clone())
    compare_output(swapped, ref, tol, "topk", _where(), x)
    dup = (ref.values.clone(), torch.tensor([[1, 1]]))
    with pytest.raises(_Fail, match="repeat within a row"):
        compare_output(dup, ref, tol, "topk", _where(), x)
    wrong = (ref.values.clone(), torch.tensor([[1, 0]]))
    with pytest.raises(_Fail, match="do not select the top values"):
        compare_output(wrong, ref, tol, "topk", _where(), x)
    out_of_range = (ref.values.clone(), torch.tensor([[1, 9]]))
    with pytest.raises(_Fail, match="out of range"):
        compare_output(out_of_range, ref, tol, "topk", _where(), x)


def test_tolerance_is_elementwise_atol_plus_rtol() -> None:
    ref = torch.tensor([100.0, 1.0])
    tol = Tolerance(0.1, 0.01)
    compare_output(torch.tensor([101.0, 1.1]), ref, tol, "tensor", _where())  # 1.0 <= 0.1 + 1.0
    with pytest.raises(_Fail, match=r"bad=1/2 worst_idx=\(1\)"):
        compare_output(torch.tensor([101.0, 1.2]), ref, tol, "tensor", _where())


def test_recorder_refusal_reruns_without_it_and_is_logged() -> None:
    lines = _check(SOLUTIONS / "gemm" / "refuses_recorder.py", GEMM, seeds=(42,))
    assert lines[-1] == "PASS"
    assert any(ln.startswith("runtime_recorder: error under the recorder (RuntimeError") for ln in lines)


def test_numeric_stress_cannot_be_switched_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KBH_NUMERIC_STRESS", "NUMERIC_STRESS", "KAUDIT_NUMERIC_STRESS", "DISABLE_STRESS"):
        monkeypatch.setenv(var, "0")
    lines = _check(SOLUTIONS / "gemm" / "folded_scale.py", GEMM, seeds=(42,))
    failure = parse_check_log("\n".join(lines)).failure
    assert failure is not None and failure.kind == "tolerance" and failure.case == "small_weight", lines[-1]


def test_fail_lines_parse_to_their_kind() -> None:
    cases = {
        "stale_per_instance.py": "property_stress",
        "forbidden_alias.py": "forbidden_op",
        "state_mismatch.py": "state_dict_mismatch",
        "wrong_math.py": "tolerance",
    }
    for name, kind in cases.items():
        lines = _check(SOLUTIONS / "gemm" / name, GEMM, seeds=(42,))
        failure = parse_check_log("\n".join(lines)).failure
        assert failure is not None and failure.kind == kind, (name, lines[-1])


def test_import_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "solution.py"
    bad.write_text("import torch\nraise ImportError('no module named fancy_kernels')\n")
    lines = _check(bad, GEMM, seeds=(42,))
    assert lines[-1] == "FAIL: solution import error: ImportError: no module named fancy_kernels"
    failure = parse_check_log("\n".join(lines)).failure
    assert failure is not None and failure.kind == "import_error"


def test_rebinding_grader_code_is_tampering() -> None:
    lines = _check(SOLUTIONS / "gemm" / "tamper.py", GEMM, seeds=(42,))
    assert "grader tampering: the solution rebound grader code: graders.correctness.compare_output" in lines[-1]
    assert lines.count("PASS") == 0
    import graders.correctness as gc

    assert gc.compare_output is compare_output  # restored for later checks in this process


def test_output_records_round_trip_and_refuse_what_does_not_add_up(tmp_path: Path) -> None:
    """The raw records the solution's process writes and the verifier reads: a tensor and a list
    come back bit for bit; a record cut short, one with bytes after its tensors, one whose header
    claims another size, and one larger than the reference could be are each refused by name."""
    from graders.correctness import OutputRecorder, load_record

    rec = OutputRecorder(tmp_path)
    t = torch.randn(64, 33).to(torch.bfloat16)
    rec.record("t", t)
    rec.record("pair", (t[:3], torch.arange(5)))
    rec.record("obj", {"not": "a tensor"})
    got = load_record(tmp_path / "t.out", t.numel() * 2)
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16), t.view(torch.int16))
    a, b = load_record(tmp_path / "pair.out", 4096)
    assert torch.equal(a, t[:3]) and torch.equal(b, torch.arange(5))
    assert load_record(tmp_path / "obj.out", 4096) == "<builtins.dict>"

    raw = (tmp_path / "t.out").read_bytes()
    for name, body, why in [
        ("cut", raw[:-7], "malformed"),
        ("extra", raw + b"\0\0", "trailing bytes"),
        ("claims", raw.replace(b'"nbytes": 4224', b'"nbytes": 4222', 1), "size does not match"),
        ("listhead", b"[1, 2]\n" + raw.partition(b"\n")[2], "header is not an object"),
    ]:
        (tmp_path / f"{name}.out").write_bytes(body)
        with pytest.raises(_Fail, match=why):
            load_record(tmp_path / f"{name}.out", t.numel() * 2)
    with pytest.raises(_Fail, match="larger than the reference output could be"):
        load_record(tmp_path / "t.out", 16 - (1 << 20))
    with pytest.raises(_Fail, match="did not write it"):
        load_record(tmp_path / "absent.out", 16)
