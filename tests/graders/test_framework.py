from __future__ import annotations

import pytest

from graders.framework import FrameworkReport, detect, gate

TRITON = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n    pass\n"
CUDA_INLINE = (
    "from torch.utils.cpp_extension import load_inline\n"
    'src = """\n__global__ void k(float* x) { x[0] = 1; }\n"""\n'
    "m = load_inline('k', cpp_sources='', cuda_sources=src)\n"
)
PTX = 'src = """\n__global__ void k() {\n  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 ...");\n}\n"""\n'
CUTLASS_CU = "#include <cutlass/gemm/device/gemm.h>\n__global__ void k() {}\n"
CUTE_DSL = "import cutlass\nimport cutlass.cute as cute\n@cute.kernel\ndef k():\n    pass\n"


@pytest.mark.parametrize(
    ("sources", "framework", "evidence"),
    [
        ({"solution.py": TRITON}, "triton", "solution.py:1"),
        ({"solution.py": CUDA_INLINE}, "cuda_raw", "solution.py:1"),
        ({"solution.py": PTX}, "ptx", "solution.py:3"),
        ({"solution.py": "import torch\n", "k.cu": CUTLASS_CU}, "cutlass", "k.cu:1"),
        ({"solution.py": CUTE_DSL}, "cute_dsl", "solution.py:1"),
        ({"solution.py": "import torch\ny = torch.mm\n"}, "torch-only", None),
    ],
)
def test_detect(sources: dict[str, str], framework: str, evidence: str | None) -> None:
    rep = detect(sources)
    assert rep.framework == framework
    if evidence:
        assert rep.evidence[0].startswith(evidence + ": ")
        assert rep.log_line().startswith(f"framework: {framework} evidence={evidence}")
    else:
        assert rep.log_line() == "framework: torch-only evidence=none"


def test_comments_and_docstrings_do_not_count() -> None:
    src = '"""We do not use triton or __global__ kernels."""\n# import triton\nimport torch\n'
    cu = "// __global__ in a comment\n/* asm volatile( */\nint x;\n"
    assert detect({"solution.py": src, "k.cu": cu}).framework == "torch-only"


def test_hybrid_lists_every_framework() -> None:
    rep = detect({"solution.py": TRITON + CUDA_INLINE})
    assert rep.framework == "cuda_raw" and set(rep.all) == {"triton", "cuda_raw"}
    assert "also=triton" in rep.log_line()


def test_gate() -> None:
    cuda = detect({"solution.py": CUDA_INLINE})
    hybrid = detect({"solution.py": TRITON + CUDA_INLINE})
    triton = detect({"solution.py": TRITON})
    assert gate(cuda, None) is None and gate(triton, None) is None
    assert gate(cuda, "cuda") is None
    assert gate(triton, "cuda") == "required framework cuda not used (detected triton)"
    msg = gate(hybrid, "cuda")
    assert msg is not None and msg.startswith("required framework cuda but triton path present at solution.py:1")
    assert gate(triton, "triton") is None
    assert gate(FrameworkReport("torch-only"), "triton") is not None
