"""The sandbox: timeouts kill the whole process group, results cannot be forged, isolation holds."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from graders.regrade import regrade
from graders.sandbox import SANDBOX_SUBPROCESS, Sandbox, SandboxConfig, bwrap_works, prepare_workspace
from tests.regrade.conftest import DECK, FIXTURES, FP8, sandbox_modes


def _sandbox(tmp_path: Path, solution: Path, mode: str, timeout_s: float = 120) -> Sandbox:
    ws = prepare_workspace(solution, tmp_path / "ws")
    return Sandbox(ws, SandboxConfig(device="cpu", timeout_s=timeout_s, mode=mode, allow_unsafe=mode == "subprocess"),
                   [FP8])


@pytest.mark.parametrize("mode", sandbox_modes())
def test_timeout_kills_the_whole_process_group(tmp_path: Path, mode: str) -> None:
    sb = _sandbox(tmp_path, FIXTURES / "hang_with_child.py", mode, timeout_s=12)
    params = {"solution": str(sb.ws.solution), "problem_dir": str(FP8), "device": "cpu", "shapes": "small"}
    res = sb.run("check", params)
    assert res.timed_out and res.error == "timeout" and not res.ok
    alive = sb.ws.work / "alive.txt"
    assert alive.exists(), "the grandchild never ran: the test would prove nothing"
    before = alive.read_text()
    time.sleep(0.6)
    assert alive.read_text() == before, "a grandchild survived the timeout"


@pytest.mark.parametrize("mode", sandbox_modes())
def test_forged_stdout_and_fake_channel_messages_are_ignored(tmp_path: Path, mode: str) -> None:
    grade = regrade(FIXTURES / "forge_stdout.py", "01_fp8_gemm", DECK, device="cpu", probes=[], timeout_s=300,
                    sandbox_mode=mode,
                    allow_unsafe_sandbox=mode == "subprocess")
    assert grade.correct is False
    assert not grade.infra_failure
    assert "PASS" not in grade.check_lines
    assert grade.failure_reason == "check_failed"
    assert "tampered" in (grade.detail or "")


@pytest.mark.parametrize("mode", sandbox_modes())
def test_solution_exiting_early_yields_no_result_and_a_fail(tmp_path: Path, mode: str) -> None:
    sb = _sandbox(tmp_path, FIXTURES / "exit_early.py", mode)
    res = sb.run("check", {"solution": str(sb.ws.solution), "problem_dir": str(FP8), "device": "cpu",
                           "shapes": "small"})
    assert res.started and res.error == "no_result" and res.result is None
    grade = regrade(FIXTURES / "exit_early.py", "01_fp8_gemm", DECK, device="cpu", probes=[], timeout_s=300,
                    sandbox_mode=mode,
                    allow_unsafe_sandbox=mode == "subprocess")
    assert grade.correct is False and not grade.infra_failure
    assert grade.failure_reason == "check_failed"


def test_sandbox_that_cannot_start_is_an_infra_failure(tmp_path: Path) -> None:
    ws = prepare_workspace(FIXTURES / "honest_torch.py", tmp_path / "ws")
    sb = Sandbox(ws, SandboxConfig(device="cpu", mode="subprocess", python=str(tmp_path / "no-python"),
                                   allow_unsafe=True), [FP8])
    res = sb.run("check", {})
    assert res.error == "setup" and not res.started


def test_infra_classification_of_logs() -> None:
    from graders.regrade import classify_infra

    assert classify_infra("FAIL: solution import error: RuntimeError: Ninja is required to load C++ extensions") \
        == "ninja_missing"
    assert classify_infra("/bin/sh: 1: nvcc: not found") == "nvcc_missing"
    assert classify_infra("RuntimeError: CUDA driver version is insufficient for CUDA runtime version") \
        == "driver_mismatch"
    assert classify_infra("RuntimeError: No CUDA GPUs are available; no CUDA-capable device is detected") \
        == "no_cuda_device"
    assert classify_infra("FAIL: shape 0 (64, 64, 64) seed 42 case nominal: tolerance exceeded") is None


def test_a_build_needing_headers_this_host_lacks_is_infra_not_a_failure(tmp_path: Path) -> None:
    """A real run's load_inline build included a CUTLASS checkout of its original host
    (-I/workspace/refs/cutlass/include); on a host without it the regrade says so."""
    from graders.regrade import classify_infra

    def log(include_dir: str) -> str:
        return (f"FAIL: import error: Error building extension 'w4a16': [1/3] nvcc -O3 -std=c++17 -I{include_dir} "
                f"-c cuda.cu -o cuda.cuda.o\ncuda.cu:12:10: fatal error: cutlass/gemm/device/gemm.h: No such file "
                f"or directory\ncompilation terminated.")

    assert classify_infra(log(str(tmp_path / "absent" / "cutlass" / "include"))) == "build_dependency_missing"
    # the folder exists here: a missing header inside it is the solution's own build error
    present = tmp_path / "cutlass" / "include"
    present.mkdir(parents=True)
    assert classify_infra(log(str(present))) is None
    # a typo'd include with no foreign folder at all is the solution's bug too
    assert classify_infra("cuda.cu:3:10: fatal error: mykernel.cuh: No such file or directory") is None
    assert classify_infra("torch.AcceleratorError: CUDA error: no kernel image is available for execution on the "
                          "device") == "kernel_arch_mismatch"


@pytest.mark.skipif(not bwrap_works()[0], reason="bubblewrap unusable on this host (the fallback is tested)")
def test_bwrap_blocks_network_and_foreign_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("another run's solution")
    src = (FIXTURES / "probe_isolation.py").read_text().replace("__SECRET_PATH__", str(secret))
    sol = tmp_path / "sol" / "solution.py"
    sol.parent.mkdir()
    sol.write_text(src)
    isolated = regrade(sol, "01_fp8_gemm", DECK, device="cpu", probes=[], timeout_s=300, sandbox_mode="bwrap")
    assert isolated.provenance is not None and isolated.provenance.sandbox == "bwrap"
    assert isolated.correct is True, isolated.check_lines
    # the same solution outside bubblewrap reads the file: the weaker sandbox is visible
    weak = regrade(sol, "01_fp8_gemm", DECK, device="cpu", probes=[], timeout_s=300, sandbox_mode="subprocess",
                   allow_unsafe_sandbox=True)
    assert weak.provenance is not None and weak.provenance.sandbox == SANDBOX_SUBPROCESS
    assert weak.correct is False


def test_without_bubblewrap_the_regrade_refuses_unless_the_unsafe_flag(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import graders.sandbox as sandbox

    monkeypatch.setattr(sandbox, "BWRAP", "bwrap-not-installed-here")
    monkeypatch.delenv(sandbox.UNSAFE_ENV, raising=False)
    sandbox.bwrap_works.cache_clear()
    try:
        refused = regrade(FIXTURES / "honest_torch.py", "01_fp8_gemm", DECK, device="cpu", probes=[], timeout_s=120)
        assert refused.infra_failure and refused.correct is None
        assert refused.detail and refused.detail.startswith("sandbox_unavailable") and "unsafe" in refused.detail
        assert refused.provenance is not None and refused.provenance.extra["infra_reason"] == "sandbox_unavailable"
        assert refused.check_lines == []  # nothing of the solution ran
        with pytest.raises(sandbox.SandboxUnavailable):
            sandbox.resolve_mode("subprocess")  # an explicit subprocess mode needs the flag too
        monkeypatch.setenv(sandbox.UNSAFE_ENV, "1")
        weak = regrade(FIXTURES / "honest_torch.py", "01_fp8_gemm", DECK, device="cpu", probes=[], timeout_s=300)
        assert weak.correct is True and weak.provenance is not None
        assert weak.provenance.sandbox == SANDBOX_SUBPROCESS
        facts = weak.provenance.extra["sandbox"]
        assert facts["unsafe_flag"] is True and facts["seccomp"] is False and facts["user_namespace"] is False
        assert "bwrap not installed" in weak.provenance.extra["sandbox_reason"]
    finally:
        sandbox.bwrap_works.cache_clear()


@pytest.mark.skipif(not bwrap_works()[0], reason="bubblewrap unusable on this host")
def test_provenance_records_the_sandbox_and_its_host_derived_limits() -> None:
    from graders.sandbox import MEM_FRACTION, host_mem_mib

    grade = regrade(FIXTURES / "honest_torch.py", "01_fp8_gemm", DECK, device="cpu", probes=[], timeout_s=300,
                    mem_limit_mib=1 << 20)
    assert grade.correct is True and grade.provenance is not None
    facts = grade.provenance.extra["sandbox"]
    assert grade.provenance.sandbox == "bwrap" and facts["unsafe_flag"] is False
    assert facts["uid"] == facts["host_uid"] == 65534 and facts["capabilities"] == "none"
    assert facts["user_namespace"] and facts["pid_namespace"] and facts["seccomp"] and facts["network"] == "none"
    assert facts["limits"]["mem_mib"] <= host_mem_mib() * MEM_FRACTION + 1  # 1 TiB asked, clamped to the host
    assert grade.provenance.extra["check_verified"]["cases"] > 0


@pytest.mark.parametrize("mode", sandbox_modes())
def test_solution_exception_text_is_operator_only(tmp_path: Path, mode: str) -> None:
    sol = tmp_path / "sol" / "solution.py"
    sol.parent.mkdir()
    sol.write_text("import sys\nprint('printed-by-the-solution', file=sys.stderr)\n"
                   "raise ImportError('root:$6$leaked-hash-of-etc-shadow:19000')\n")
    grade = regrade(sol, "01_fp8_gemm", DECK, device="cpu", probes=[], timeout_s=300, sandbox_mode=mode,
                    allow_unsafe_sandbox=mode == "subprocess")
    assert grade.correct is False and not grade.infra_failure
    public = "\n".join(grade.check_lines) + (grade.detail or "")
    assert "leaked-hash" not in public and "printed-by-the-solution" not in public
    assert "FAIL: solution import error: ImportError: [message withheld: operator-only]" in grade.check_lines
    private = "\n".join(grade.operator_output.values())
    assert "leaked-hash" in private and "printed-by-the-solution" in private
    assert all(len(v) <= 16000 for v in grade.operator_output.values())


def test_seccomp_program_shape() -> None:
    import struct

    from graders.seccomp import AUDIT_ARCH, DENIED, build_filter, denied_numbers

    for arch in ("x86_64", "aarch64"):
        prog = build_filter(arch)
        assert len(prog) % 8 == 0 and len(prog) // 8 < 4096
        insns = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
        assert insns[1][3] == AUDIT_ARCH[arch]  # the arch check comes first
        ks = {k for code, _jt, _jf, k in insns if code == 0x15}
        assert set(denied_numbers(arch).values()) <= ks
        assert insns[-1] == (0x06, 0, 0, 0x7FFF0000)  # the default is allow
    assert {"mount", "umount2", "ptrace", "bpf", "keyctl", "unshare", "setns", "process_vm_writev",
            "perf_event_open", "kexec_load", "init_module", "pivot_root"} <= set(DENIED)
    with pytest.raises(ValueError):
        build_filter("riscv64")


def test_the_timing_hold_is_chosen_on_the_trusted_side_and_never_reaches_the_solution(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KAUDIT_TIMING_HOLD is read by the regrade's parent and recorded in provenance; the
    benchmark step gets it as a parameter, so the solution's environment never names it (this
    solution refuses to import if it does). A value kaudit does not know is refused by name."""
    sol = tmp_path / "sol" / "solution.py"
    sol.parent.mkdir()
    sol.write_text('import os\nassert "KAUDIT_TIMING_HOLD" not in os.environ, "the hold choice leaked"\n'
                   + (FIXTURES / "honest_torch.py").read_text())
    monkeypatch.setenv("KAUDIT_TIMING_HOLD", "busy")
    grade = regrade(sol, "01_fp8_gemm", DECK, device="cpu", probes=[], timeout_s=300, mode="hardened",
                    allow_unsafe_sandbox=True)
    assert grade.correct is True, (grade.failure_reason, grade.detail, grade.check_lines[-5:])
    assert grade.provenance is not None and grade.provenance.extra["timing_hold"] == "busy"
    monkeypatch.setenv("KAUDIT_TIMING_HOLD", "spin")
    with pytest.raises(ValueError, match="KAUDIT_TIMING_HOLD='spin'"):
        regrade(sol, "01_fp8_gemm", DECK, device="cpu", probes=[], timeout_s=300, mode="hardened",
                allow_unsafe_sandbox=True)
