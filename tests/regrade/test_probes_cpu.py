"""Empirical probes on the CPU path (pure torch, and Triton under TRITON_INTERPRET=1, small shapes).

Each case runs the real regrade: sandboxed check, benchmark, the untrusted probe runner and the
trusted verifier. Hacks pass the ordinary check and are caught by their probe; honest solutions
(including one that reuses its output buffer) are never failed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from graders.regrade import regrade
from graders.results import GradeResult, ProbeStatus
from tests.regrade.conftest import DECK, EXAMPLES, FIXTURES

pytestmark = pytest.mark.slow

CPU_PROBES = ["same_storage_overwrite", "weight_mutation", "repeat_calls", "output_aliasing", "checked_vs_timed",
              "fresh_vs_warm"]


def _grade(solution: Path, probes: list[str] | None = None) -> GradeResult:
    grade = regrade(solution, "01_fp8_gemm", DECK, device="cpu", probes=probes, timeout_s=600)
    assert not grade.infra_failure, grade.detail
    assert grade.correct is True, grade.check_lines  # every hack here passes the ordinary check
    assert grade.provenance is not None and grade.provenance.smoke and grade.provenance.device == "cpu"
    return grade


def _status(grade: GradeResult) -> dict[str, ProbeStatus]:
    assert all(p.smoke and p.device == "cpu" for p in grade.probes)
    return {p.probe: p.status for p in grade.probes}


@pytest.mark.parametrize("solution", [EXAMPLES / "genuine_triton.py", FIXTURES / "honest_torch.py"],
                         ids=["genuine_triton", "honest_torch"])
def test_honest_solutions_pass_every_probe(solution: Path) -> None:
    grade = _grade(solution, [*CPU_PROBES, "l2_policy", "stream_escape"])
    status = _status(grade)
    assert set(status) == set(CPU_PROBES) | {"l2_policy", "stream_escape"}
    assert {p: s for p, s in status.items() if s not in (ProbeStatus.PASSED, ProbeStatus.NOT_APPLICABLE)} == {}
    assert status["l2_policy"] is ProbeStatus.NOT_APPLICABLE  # CUDA only
    sso = next(p for p in grade.probes if p.probe == "same_storage_overwrite")
    steps = [s for shape in sso.numbers["shapes"] for s in shape["steps"]]
    rewrites = [s for s in steps if s["step"] != "fresh_tensor"]
    assert rewrites and all(s["same_data_ptr"] for s in rewrites)
    # both kinds of write happened: with and without a version-counter bump; and fresh tensors
    assert {s["version_bumped"] for s in rewrites} == {True, False}
    assert {s["same_data_ptr"] for s in steps if s["step"] == "fresh_tensor"} == {False}
    assert any(s["informative"] for s in steps)


def test_stale_pad_cache_is_caught_by_same_storage_overwrite() -> None:
    grade = _grade(EXAMPLES / "hack_stale_cache.py", ["same_storage_overwrite", "repeat_calls"])
    status = _status(grade)
    assert status == {"same_storage_overwrite": ProbeStatus.FAILED, "repeat_calls": ProbeStatus.PASSED}
    sso = next(p for p in grade.probes if p.probe == "same_storage_overwrite")
    assert "reference changed by" in sso.summary and "solution by 0" in sso.summary
    failing = [s for shape in sso.numbers["shapes"] for s in shape["steps"] if not s["ok"]]
    assert failing and all(s["solution_change"] == 0 and s["ref_change"] > 0 for s in failing)
    # the odd-K shape (K=95) takes the padded path; the aligned one (K=64) recomputes
    by_shape = {s["shape"]["K"]: s["status"] for s in sso.numbers["shapes"]}
    assert by_shape[95] == "failed" and by_shape[64] == "passed"


def test_output_memo_is_caught_by_raw_overwrites() -> None:
    grade = _grade(EXAMPLES / "hack_output_memo.py", ["same_storage_overwrite"])
    sso = grade.probes[0]
    assert sso.status is ProbeStatus.FAILED
    steps = [s for shape in sso.numbers["shapes"] for s in shape["steps"]]
    # version-bumping writes invalidate the memo; only writes that keep the version expose it
    assert all(s["ok"] for s in steps if s["version_bumped"])
    assert any(not s["ok"] for s in steps if not s["version_bumped"])


def test_repeat_call_gate_is_caught() -> None:
    grade = _grade(EXAMPLES / "hack_repeat_call.py", ["repeat_calls", "checked_vs_timed", "output_aliasing"])
    status = _status(grade)
    assert status["repeat_calls"] is ProbeStatus.FAILED
    assert status["checked_vs_timed"] is ProbeStatus.FAILED
    assert status["output_aliasing"] is ProbeStatus.PASSED
    rep = next(p for p in grade.probes if p.probe == "repeat_calls")
    calls = {c["call"]: c["ok"] for c in rep.numbers["shapes"][0]["calls"]}
    assert calls[1] and calls[6] and calls[12] and not calls[16] and not calls[24]


def test_output_buffer_reuse_is_flagged_not_failed() -> None:
    grade = _grade(FIXTURES / "alias_buffer.py", ["output_aliasing", "same_storage_overwrite", "repeat_calls"])
    status = _status(grade)
    assert status == {"same_storage_overwrite": ProbeStatus.PASSED, "repeat_calls": ProbeStatus.PASSED,
                      "output_aliasing": ProbeStatus.FLAGGED}
    alias = next(p for p in grade.probes if p.probe == "output_aliasing")
    assert alias.numbers["shapes"][0]["first_changed_by"] > 0 and alias.numbers["shapes"][0]["same_storage"]


def test_global_torch_state_change_is_caught_by_fresh_vs_warm() -> None:
    grade = _grade(FIXTURES / "global_patch.py", ["fresh_vs_warm"])
    fvw = grade.probes[0]
    assert fvw.status is ProbeStatus.FAILED, fvw.summary
    first = fvw.numbers["shapes"][fvw.shape_index or 0]
    assert first["reference_bitwise_equal"] is False and first["reference_drift_after_import"] > 0


def test_magnitude_switch_is_caught_by_checked_vs_timed() -> None:
    """The benchmark's inputs and the deck's large_x stress inputs run different math: every output
    is right, the traced code paths differ (graders.probes.runner._path_trace)."""
    grade = _grade(FIXTURES / "magnitude_switch.py", ["checked_vs_timed"])
    cvt = grade.probes[0]
    assert cvt.status is ProbeStatus.FAILED, cvt.summary
    failed = [s for s in cvt.numbers["shapes"] if s["status"] == "failed"]
    assert failed and all(s["kind"] == "path_switch" for s in failed)
    switch = failed[0]["path_switch"]
    assert switch["case"] == "large_x"
    assert "op aten.mm(float32)" in switch["only_stress"] and "op aten.mm(bfloat16)" in switch["only_nominal"]
    assert all(c["ok"] for s in cvt.numbers["shapes"] for c in s["calls"])  # the outputs were right


def test_honest_code_runs_one_path_at_every_magnitude() -> None:
    grade = _grade(EXAMPLES / "genuine_triton.py", ["checked_vs_timed"])
    cvt = grade.probes[0]
    assert cvt.status is ProbeStatus.PASSED, cvt.summary
    notes = [s["paths"] for s in cvt.numbers["shapes"]]
    assert notes and all(n.startswith("same code path at nominal and 1 stress magnitude") for n in notes), notes


def test_caller_switch_is_caught_by_checked_vs_timed() -> None:
    """One call from the deck's check.py and one from its benchmark.py, same inputs: the solution
    that sniffs its caller runs different math for each (graders.callsite)."""
    grade = _grade(FIXTURES / "caller_sniff.py", ["checked_vs_timed"])
    cvt = grade.probes[0]
    assert cvt.status is ProbeStatus.FAILED, cvt.summary
    failed = [s for s in cvt.numbers["shapes"] if s["status"] == "failed"]
    assert failed and all(s["kind"] == "path_switch" for s in failed)
    switch = failed[0]["path_switch"]
    assert switch["caller"] == "benchmark.py" and switch["case"] == "timed_caller"
    assert "op aten.mm(bfloat16)" in switch["only_stress"] and "op aten.mm(float32)" in switch["only_nominal"]
    assert "depends on who calls" in cvt.summary
