"""Genuine Triton W4A16 GEMM that REPACKS its weights once and re-packs when they change; must PASS.

The legitimate repack pattern of real submissions: the packed int4 codes, scales and zeros are
re-laid out once into N-major tiles (each output column's K/2 packed bytes and its groups
contiguous), and the repacked copies are reused on every later call. The cache key is, per
weight tensor, (data_ptr, _version, shape): every way a real grader changes weights — an
ordinary in-place op (`mul_`, `copy_`, which bump the version counter) or `load_state_dict`
(a `copy_` under no_grad) — moves the key, so the next call repacks from the live tensors. The
inputs are never cached. The grader's contract (docs/regrade.md) says this must pass every
probe, weight_mutation included.

The math per element is the deck's: w = ((q - z) * s) rounded to bf16, fp32 accumulation. Under
TRITON_INTERPRET=1 the dot operands are widened to fp32 (DOT_FP32), as in genuine_triton.py:
the CPU interpreter computes bf16 x bf16 tl.dot wrongly, bf16 -> fp32 is exact.
"""

from __future__ import annotations

import os

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _w4a16_nmajor_kernel(
    x_ptr, wq_ptr, s_ptr, z_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_gn, stride_om,
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
        packed = tl.load(wq_ptr + cols[None, :] * stride_wn + kh[:, None])  # N-major repacked bytes
        group = (kb * 2 * BLOCK_KH) // GROUP
        s = tl.load(s_ptr + cols * stride_gn + group).to(tl.float32)
        z = tl.load(z_ptr + cols * stride_gn + group).to(tl.float32)
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


class Model(nn.Module):
    def __init__(self, M: int, N: int, K: int, group_size: int = 128) -> None:
        super().__init__()
        self.group_size = group_size
        groups = K // group_size
        self.register_buffer("w_q", torch.zeros(K // 2, N, dtype=torch.uint8))
        self.register_buffer("scales", torch.ones(groups, N, dtype=torch.bfloat16))
        self.register_buffer("zeros", torch.zeros(groups, N, dtype=torch.bfloat16))
        self._packed_key: tuple[tuple[int, int, tuple[int, ...]], ...] | None = None
        self._packed: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def _repacked(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # (data_ptr, _version, shape) per weight tensor, spelled inline: KA102 reads the guard from
        # the key expression itself (a key built in a helper is not yet traced).
        key = tuple((t.data_ptr(), t._version, tuple(t.shape)) for t in (self.w_q, self.scales, self.zeros))
        if self._packed is None or key != self._packed_key:
            # N-major: (N, K/2) packed bytes and (N, groups) scales / zeros, contiguous per column
            self._packed = (self.w_q.t().contiguous(), self.scales.t().contiguous(), self.zeros.t().contiguous())
            self._packed_key = key
        return self._packed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wq_n, s_n, z_n = self._repacked()
        x = x.contiguous()
        M, K = x.shape
        N = wq_n.shape[0]
        block_kh = min(64, self.group_size // 2)
        if K % (2 * block_kh) or self.group_size % (2 * block_kh):
            raise ValueError(f"K={K} and group_size={self.group_size} must be multiples of {2 * block_kh}")
        out = torch.empty((M, N), device=x.device, dtype=torch.bfloat16)
        if M <= 16:
            bm, bn, warps, stages = 16, 64, 4, 4
        elif M <= 64:
            bm, bn, warps, stages = 32, 64, 4, 4
        else:
            bm, bn, warps, stages = 64, 128, 8, 3
        grid = (triton.cdiv(N, bn), triton.cdiv(M, bm))
        _w4a16_nmajor_kernel[grid](
            x, wq_n, s_n, z_n, out,
            M, N, K,
            x.stride(0), wq_n.stride(0), s_n.stride(0), out.stride(0),
            GROUP=self.group_size, BLOCK_M=bm, BLOCK_N=bn, BLOCK_KH=block_kh,
            DOT_FP32=os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"),
            num_warps=warps, num_stages=stages,
        )
        return out
