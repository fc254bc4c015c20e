"""Compile the genuine Triton examples' kernels for sm_90 (Hopper) without a GPU; print a JSON report.

Run as a subprocess by test_triton_compile.py: compiled (not interpreted) Triton needs
TRITON_INTERPRET off for the whole process, which a CPU test run keeps on.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import triton
from triton.backends.compiler import GPUTarget

from tests.kernels import deck

GEMM_SIG = {"M": "i32", "N": "i32", "K": "i32", "stride_xm": "i32"}


def _compile(fn: object, signature: dict[str, str], constexprs: dict[str, object], **options: int) -> str:
    for name in constexprs:
        signature[name] = "constexpr"
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs)
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
    return str(compiled.asm["ptx"])


def main() -> None:
    report: dict[str, dict[str, bool]] = {}
    fp8 = deck.load_module(deck.DECK / "01_fp8_gemm" / "examples" / "genuine_triton.py", interpret=False)
    ptx = _compile(
        fp8._fp8_gemm_kernel,
        {"x_ptr": "*fp8e4nv", "w_ptr": "*fp8e4nv", "s_ptr": "*fp32", "out_ptr": "*bf16", **GEMM_SIG,
         "stride_wn": "i32", "stride_om": "i32"},
        {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "EVEN_K": False},
        num_warps=4, num_stages=2,
    )
    # e.g. wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3: fp8 x fp8 into fp32 on tensor cores
    report["01_fp8_gemm"] = {"fp8_wgmma": re.search(r"wgmma\.mma_async\S*\.f32\.e4m3\.e4m3", ptx) is not None}
    topk = deck.load_module(deck.DECK / "05_topk_bitonic" / "examples" / "genuine_triton.py", interpret=False)
    ptx1 = _compile(
        topk._chunk_select_kernel,
        {"x_ptr": "*fp32", "cand_v_ptr": "*fp32", "cand_i_ptr": "*i32", "n": "i32", "stride_row": "i32"},
        {"K": 64, "KP": 64, "CHUNK": 2048},
    )
    ptx2 = _compile(
        topk._merge_select_kernel,
        {"cand_v_ptr": "*fp32", "cand_i_ptr": "*i32", "out_v_ptr": "*fp32", "out_i_ptr": "*i64", "ncand": "i32"},
        {"K": 64, "KO": 64, "NCP": 4096},
    )
    report["05_topk_bitonic"] = {"chunk": ".entry" in ptx1, "merge": ".entry" in ptx2}
    w4 = deck.load_module(deck.DECK / "07_w4a16_gemm" / "examples" / "genuine_triton.py", interpret=False)
    ptx = _compile(
        w4._w4a16_kernel,
        {"x_ptr": "*bf16", "wq_ptr": "*u8", "s_ptr": "*bf16", "z_ptr": "*bf16", "out_ptr": "*bf16", **GEMM_SIG,
         "stride_wk": "i32", "stride_gk": "i32", "stride_om": "i32"},
        {"GROUP": 128, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_KH": 64, "DOT_FP32": False},
    )
    # M = 16 tiles take mma.sync (wgmma needs M >= 64): bf16 x bf16 into fp32
    report["07_w4a16_gemm"] = {"bf16_mma": re.search(r"mma\S*\.f32\.bf16\.bf16", ptx) is not None}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
