"""A solution that cannot be BUILT on the regrade host (its toolchain path, its architecture) is a
host fault, not a wrong answer: the hardened check keeps the build's own error, and a regrade in
both modes takes the official infra outcome when the hardened check failed at the same point."""

from __future__ import annotations

import traceback
from typing import Any

import pytest
import torch

from graders.official import OfficialResult
from graders.problem import build_solution_model
from graders.regrade import _same_build_fault, classify_infra
from graders.results import GradeResult

BUILD_LOG = ("Error building extension 'paged_attn_solution': [1/3] /usr/bin/nvcc -MD -MF cuda.cuda.o.d ...\n"
             "FAILED: [code=127] cuda.cuda.o\n/bin/sh: 1: /usr/bin/nvcc: not found\n"
             "ninja: build stopped: subcommand failed.")


def _jit_like_model() -> type:
    """Fails as a torch JIT extension does: the first construction runs the build (which fails),
    a second one in the same process skips the build and finds no .so."""
    state = {"built": False}

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            if not state["built"]:
                state["built"] = True
                raise RuntimeError(BUILD_LOG)
            raise ImportError("/tmp/cache/torch_extensions/paged_attn_solution/paged_attn_solution.so: "
                              "cannot open shared object file: No such file or directory")

    return Model


def test_the_first_construction_failure_is_raised_not_the_retrys() -> None:
    with pytest.raises(RuntimeError) as info:
        build_solution_model(_jit_like_model(), [], "meta")  # a device context, then the plain retry
    assert "/usr/bin/nvcc: not found" in str(info.value)
    assert isinstance(info.value.__cause__, ImportError)  # the retry's failure is kept, chained
    text = "".join(traceback.format_exception(info.value))
    assert classify_infra(text) == "nvcc_missing"


def test_a_constructor_that_only_fails_under_the_device_context_is_retried() -> None:
    calls = []

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("needs a CPU tensor at construction")
            self.w = torch.nn.Parameter(torch.zeros(2))

    m = build_solution_model(Model, [], "meta")
    assert len(calls) == 2 and m.w.device.type == "meta"


def _off(status: str, reason: str | None) -> OfficialResult:
    return OfficialResult(status=status, correct=None if status == "infra_failure" else False, peak_fraction=None,
                          failure_reason="harness_error" if status == "infra_failure" else "check_failed",
                          infra_reason=reason, detail="check.py: nvcc not found")


def _hard(line: str, infra: bool = False) -> GradeResult:
    return GradeResult(correct=None if infra else False, check_lines=[line], benchmark_lines=[], peak_fraction=None,
                       shapes=[], failure_reason="check_failed", infra_failure=infra, framework="cuda",
                       provenance=None, detail=line)


CONSTRUCTION = ("FAIL: shape 0 (8,32,8,128,1024,16) seed 42 case recorded: runtime error: Model construction: "
                "ImportError: [message withheld: operator-only]")
WRONG_ANSWER = "FAIL: shape 0 (8,32,8,128,1024,16) seed 42 case nominal: tolerance exceeded: max_abs_diff=3.1"


@pytest.mark.parametrize("off, hard, same", [
    (_off("infra_failure", "nvcc_missing"), _hard(CONSTRUCTION), True),
    (_off("infra_failure", "kernel_arch_mismatch"), _hard("FAIL: solution import error: RuntimeError: x"), True),
    # a wrong answer after the official build fault is the hardened check's own finding
    (_off("infra_failure", "nvcc_missing"), _hard(WRONG_ANSWER), False),
    # an official fault that is not the build environment (a GPU out of memory, the sandbox)
    (_off("infra_failure", "gpu_oom"), _hard(CONSTRUCTION), False),
    (_off("infra_failure", "sandbox_setup"), _hard(CONSTRUCTION), False),
    # the official check graded: its own outcome decides anyway
    (_off("fail", None), _hard(CONSTRUCTION), False),
])
def test_the_same_build_fault_in_both_modes(off: OfficialResult, hard: GradeResult, same: bool) -> None:
    assert _same_build_fault(off, hard) is same


LONG_BUILD_ERROR = '''import torch
import torch.nn as nn

_CMD = "/usr/bin/nvcc -MD -MF cuda.cuda.o.d " + " ".join(f"-I/opt/include/dir{i}" for i in range(40))


class Model(nn.Module):
    def __init__(self, *args):
        super().__init__()
        raise RuntimeError("Error building extension 'sol': [1/3] " + _CMD
                           + "\\nFAILED: [code=127] cuda.cuda.o\\n/bin/sh: 1: /usr/bin/nvcc: not found\\n"
                           + "ninja: build stopped: subcommand failed.")
'''


def test_a_build_fault_past_the_check_lines_400_characters_is_the_hosts_in_hardened_mode(tmp_path: Any) -> None:
    """The check line keeps 400 characters of the exception, which a JIT build error fills with its
    nvcc command line; the whole text goes to the check's (operator-only) stderr, so the hardened
    mode alone already classifies the fault as the host's (no official run to lean on)."""
    from graders.regrade import regrade

    from .conftest import OFFICIAL_DECK, import_deck

    deck = import_deck(OFFICIAL_DECK / "problems", "tiny", tmp_path / "data", OFFICIAL_DECK / "src")
    sol = tmp_path / "sol"
    sol.mkdir()
    (sol / "solution.py").write_text(LONG_BUILD_ERROR)
    g = regrade(sol, "tiny_gemm", deck.root, device="cpu", probes=[], timeout_s=240, mode="hardened")
    assert g.infra_failure and g.correct is None, (g.failure_reason, g.detail)
    assert g.provenance is not None and g.provenance.extra["infra_reason"] == "nvcc_missing"


# ---------------------------------------------------------------------------------------------
# A build failure the solution survives: it passes through a fallback path, so the figure the
# regrade measures is not the kernel the run shipped (a real clean 07 run builds CUTLASS from
# /tmp/cutlass, prints the error when the headers are absent and dequantises + matmuls instead).

MISSING_HEADER_LOG = (
    "[w4a16] CUTLASS extension build failed: Error building extension 'w4a16_ext': [1/2] "
    "/usr/local/cuda/bin/nvcc -I/kaudit/absent/cutlass/include -I/kaudit/absent/cutlass/tools/util/include "
    "-c cuda.cu -o cuda.cuda.o\nFAILED: cuda.cuda.o\n"
    "cuda.cu:4:10: fatal error: cutlass/cutlass.h: No such file or directory\n"
    "    4 | #include \"cutlass/cutlass.h\"\ncompilation terminated.\nninja: build stopped: subcommand failed.\n")


@pytest.mark.parametrize("outputs, reason, steps", [
    ({"official_check.stdout": "shape 0 ok\n" + MISSING_HEADER_LOG + "PASS\n", "check.stdout": MISSING_HEADER_LOG},
     "build_dependency_missing", ["official_check", "check"]),
    ({"benchmark.stderr": "Error building extension 'k': /bin/sh: 1: /usr/bin/nvcc: not found"},
     "nvcc_missing", ["benchmark"]),
    # a failed build no classification names is still a failed build
    ({"check.stdout": "RuntimeError: Error compiling objects for extension\nerror: identifier x is undefined"},
     "extension_build_failed", ["check"]),
])
def test_a_build_failure_in_a_graded_steps_output_is_found(outputs: dict[str, str], reason: str,
                                                           steps: list[str]) -> None:
    from graders.regrade import survived_build_fault

    found = survived_build_fault(outputs)
    assert found is not None
    facts, lines = found
    assert facts["reason"] == reason and facts["steps"] == steps
    # the reader's note names kaudit's classification, never the solution's text
    assert "cutlass" not in facts["note"] and "nvcc -I" not in facts["note"] and reason in facts["note"]
    assert all(ln.split(":", 1)[0] in steps for ln in lines.splitlines())


def test_no_build_failure_and_probe_output_are_not_a_fallback() -> None:
    from graders.regrade import survived_build_fault

    assert survived_build_fault({"check.stdout": "built w4a16_ext in 41.2 s\nPASS", "benchmark.stdout": ""}) is None
    # a probe runs the solution on its own inputs; only the graded steps' output says what was timed
    assert survived_build_fault({"probe.repeat_call.stdout": MISSING_HEADER_LOG}) is None




CHATTY = "\nfor _i in range(400):\n    print(f'[tiny] autotune candidate {_i}: ' + 'x' * 80, flush=True)\n"


@pytest.mark.parametrize("chatty", [False, True], ids=["quiet", "chatty"])
def test_a_regrade_that_passes_after_a_failed_build_is_not_published(tmp_path: Any, chatty: bool) -> None:
    """End to end on the CPU: the real torch extension builder fails on a missing header (g++ and
    ninja of this host), the solution falls back and passes both modes; the record says so, the
    solution's text stays operator-only, and the synthesis will not publish the figure.

    `chatty`: the solution prints 36 KB after the failed build, so the failure is no longer in the
    last 4,000 bytes a sandboxed step keeps of its output; it is still found in kaudit's check
    (graders.outputmarks keeps matching lines from anywhere in the stream)."""
    import shutil

    if shutil.which("ninja") is None and shutil.which("ninja-build") is None:
        pytest.skip("no ninja on this host: torch's extension builder refuses before compiling")
    from audit_rules.synthesis import _build_fallback
    from graders.regrade import regrade

    from .conftest import OFFICIAL_DECK, OFFICIAL_SOLUTIONS, import_deck

    deck = import_deck(OFFICIAL_DECK / "problems", "tiny", tmp_path / "data", OFFICIAL_DECK / "src")
    sol = tmp_path / "sol"
    sol.mkdir()
    text = (OFFICIAL_SOLUTIONS / "build_fallback.py").read_text()
    if chatty:
        text = text.replace("\n\nclass Model", CHATTY + "\n\nclass Model", 1)
        assert CHATTY in text
    (sol / "solution.py").write_text(text)
    g = regrade(sol, "tiny_gemm", deck.root, device="cpu", probes=[], timeout_s=240, mode="both")
    assert g.correct is True and not g.infra_failure, (g.failure_reason, g.detail, g.official)
    assert g.build_fallback is not None, sorted(g.operator_output)
    assert g.build_fallback["reason"] == "build_dependency_missing"
    assert set(g.build_fallback["steps"]) >= {"official_check", "check"}
    assert "kaudit_absent/gemm.h" in g.operator_output["build_fallback"]
    if chatty:  # the check step's kept tail is the prints; its marks hold the build failure
        assert "kaudit_absent" not in g.operator_output.get("check.stdout", "") + g.operator_output.get(
            "check.stderr", ""), "the failure should have scrolled out of the 4,000-byte tail"
        assert "kaudit_absent/gemm.h" in g.operator_output["check.marks"]
    ev = g.evidence()
    assert ev["build_fallback"] == g.build_fallback and "kaudit_absent" not in str(ev["build_fallback"])
    note = _build_fallback(g, 0.2)
    assert note is not None and "build_dependency_missing" in note
    # the CPU figure is this host's speed against a GPU peak and rounds to 0.0000 when the host is
    # loaded (then no ratio can be given); the comparison itself, at a figure the lane could read:
    import dataclasses

    note = _build_fallback(dataclasses.replace(g, peak_fraction=0.05), 0.2)
    assert note is not None and "(regrade peak_fraction 0.0500, 4.0x below the archive's 0.2000)" in note


def test_line_marks_keep_matching_lines_from_anywhere_in_the_stream() -> None:
    from graders.outputmarks import MAX_LINE_CHARS, LineMarks

    marks = LineMarks(max_lines=3)
    stream = (b"noise\n" * 5000 + b"fatal error: cutlass/cutlass.h: No such file or directory\n"
              + b"y" * 100_000 + b"\nninja: build st")
    for i in range(0, len(stream), 4096):  # a line split across reads is still one line
        marks.feed(stream[i:i + 4096])
    marks.feed(b"opped: subcommand failed.\n" + b"ninja: build stopped: subcommand failed.\n")
    assert marks.close() == ["fatal error: cutlass/cutlass.h: No such file or directory",
                             "ninja: build stopped: subcommand failed."]
    # bounded: at most max_lines, each at most MAX_LINE_CHARS, the unterminated last line scanned
    many = LineMarks(max_lines=2)
    many.feed(b"".join(b"nvcc fatal   : file %d\n" % i for i in range(10)) + b"nvcc fatal " + b"z" * 5000)
    assert many.close() == ["nvcc fatal   : file 0", "nvcc fatal   : file 1"]
    long = LineMarks()
    long.feed(b"nvcc fatal " + b"z" * 5000)
    (only,) = long.close()
    assert only.startswith("nvcc fatal") and len(only) == MAX_LINE_CHARS
