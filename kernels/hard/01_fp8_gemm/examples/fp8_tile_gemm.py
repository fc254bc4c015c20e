"""Shared FP8 GEMM tile kernel of the hack_* examples (not a solution itself: they import it).

A plain Triton GEMM, one (64, 64) output tile per program, fp32 accumulate, the per-channel scale
epilogue optional (`scaled=False` is the "forgot the scale" bug several hacks carry). The tile is as
large as the CPU smoke shapes, so the Triton interpreter (which runs every program in Python) runs one
program per call there. An archive stages it as a scratch/ sidecar of the example's solution.py, so
it imports inside the sandbox.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_kernel(x_ptr, w_ptr, s_ptr, o_ptr, M, N, K, SCALED: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
                 BK: tl.constexpr):
    pm = tl.program_id(0)
    pn = tl.program_id(1)
    rm = pm * BM + tl.arange(0, BM)
    rn = pn * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(x_ptr + rm[:, None] * K + (k0 + rk)[None, :],
                    mask=(rm[:, None] < M) & ((k0 + rk)[None, :] < K), other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + (k0 + rk)[:, None],
                    mask=(rn[None, :] < N) & ((k0 + rk)[:, None] < K), other=0.0)
        acc += tl.dot(a.to(tl.float32), b.to(tl.float32))
    if SCALED:
        acc = acc * tl.load(s_ptr + rn, mask=rn < N, other=0.0)[None, :]
    tl.store(o_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def tile_gemm(x, w, s, scaled=True, out=None, rows=None):
    """x (M, K) fp8 @ w (N, K).T fp8 -> (M, N) bf16; `out` reused when given, `rows` caps the rows launched."""
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, dtype=torch.bfloat16, device=x.device) if out is None else out
    rows = M if rows is None else min(rows, M)  # the kernel's M: rows past it are neither read nor written
    grid = (triton.cdiv(rows, 64), triton.cdiv(N, 64))
    _gemm_kernel[grid](x.contiguous(), w.contiguous(), s, out, rows, N, K, SCALED=scaled, BM=64, BN=64, BK=64)
    return out
