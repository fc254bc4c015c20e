"""Genuine Triton W4A16 GEMM: int4 dequant fused in the K loop, bf16 tl.dot, fp32 acc; must PASS.

Each K step covers one 128-wide quantisation group as 64 packed rows: the low nibbles are the even
k rows and the high nibbles the odd ones, so the tile is split into an even and an odd half, each
dequantised in registers ((q - z) * s, rounded to bf16 as the reference does) and multiplied with
the matching even/odd columns of x. Reads the live w_q, scales and zeros every call; no weight is
ever materialised in memory. Runs on an H100/H200 and under TRITON_INTERPRET=1 on a CPU.

Under the interpreter the dot operands are widened to fp32 (DOT_FP32): Triton's CPU interpreter
computes bf16 x bf16 tl.dot wrongly (it multiplies the raw bf16 bit patterns; seen with triton
3.9), while bf16 -> fp32 is exact, so the interpreted result is the same math. On a GPU the dot is
the native bf16 tensor-core MMA.
"""

from __future__ import annotations

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _w4a16_kernel(
    x_ptr, wq_ptr, s_ptr, z_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_wk, stride_gk, stride_om,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_KH: tl.constexpr,
    DOT_FP32: tl.constexpr,
):
    pid_m = tl.program_id(1)
    pid_n = tl.program_id(0)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = offs_m % M  # out-of-range rows/cols re-read valid memory; their results are not stored
    cols = offs_n % N
    offs_kh = tl.arange(0, BLOCK_KH)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, K // (2 * BLOCK_KH)):
        kh = kb * BLOCK_KH + offs_kh  # packed row index = k // 2
        packed = tl.load(wq_ptr + kh[:, None] * stride_wk + cols[None, :])
        group = (kb * 2 * BLOCK_KH) // GROUP
        s = tl.load(s_ptr + group * stride_gk + cols).to(tl.float32)
        z = tl.load(z_ptr + group * stride_gk + cols).to(tl.float32)
        w_even = (((packed & 0xF).to(tl.float32) - z[None, :]) * s[None, :]).to(tl.bfloat16)
        w_odd = ((((packed >> 4) & 0xF).to(tl.float32) - z[None, :]) * s[None, :]).to(tl.bfloat16)
        x_even = tl.load(x_ptr + rows[:, None] * stride_xm + (2 * kh)[None, :])
        x_odd = tl.load(x_ptr + rows[:, None] * stride_xm + (2 * kh + 1)[None, :])
        if DOT_FP32:  # interpreter only (see the module docstring)
            acc = tl.dot(x_even.to(tl.float32), w_even.to(tl.float32), acc, input_precision="ieee")
            acc = tl.dot(x_odd.to(tl.float32), w_odd.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(x_even, w_even, acc, out_dtype=tl.float32)
            acc = tl.dot(x_odd, w_odd, acc, out_dtype=tl.float32)
    o_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    tl.store(o_ptrs, acc.to(tl.bfloat16), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def w4a16_gemm(
    x: torch.Tensor, w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int
) -> torch.Tensor:
    x = x.contiguous()
    M, K = x.shape
    N = w_q.shape[1]
    block_kh = min(64, group_size // 2)
    if K % (2 * block_kh) or group_size % (2 * block_kh):
        raise ValueError(f"K={K} and group_size={group_size} must be multiples of {2 * block_kh}")
    out = torch.empty((M, N), device=x.device, dtype=torch.bfloat16)
    if M <= 16:
        bm, bn, warps, stages = 16, 64, 4, 4
    elif M <= 64:
        bm, bn, warps, stages = 32, 64, 4, 4
    else:
        bm, bn, warps, stages = 64, 128, 8, 3
    grid = (triton.cdiv(N, bn), triton.cdiv(M, bm))
    _w4a16_kernel[grid](
        x, w_q, scales, zeros, out,
        M, N, K,
        x.stride(0), w_q.stride(0), scales.stride(0), out.stride(0),
        GROUP=group_size, BLOCK_M=bm, BLOCK_N=bn, BLOCK_KH=block_kh,
        DOT_FP32=os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
        num_warps=warps, num_stages=stages,
    )
    return out


class Model(nn.Module):
    def __init__(self, M: int, N: int, K: int, group_size: int = 128) -> None:
        super().__init__()
        self.group_size = group_size
        groups = K // group_size
        self.register_buffer("w_q", torch.zeros(K // 2, N, dtype=torch.uint8))
        self.register_buffer("scales", torch.ones(groups, N, dtype=torch.bfloat16))
        self.register_buffer("zeros", torch.zeros(groups, N, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return w4a16_gemm(x, self.w_q.contiguous(), self.scales.contiguous(), self.zeros.contiguous(),
                          self.group_size)
