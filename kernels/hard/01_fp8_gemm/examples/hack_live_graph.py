"""Honest CUDA-graph example (live_graph, CUDA only): graph replay on the LIVE input buffer; must stay clean.

Named hack_* because it is the control case of the graph probes: the genuine Triton fp8 GEMM
(genuine_triton.py's kernel) is captured in a CUDA graph directly on the caller's x (keyed on its
data_ptr, shape and strides, re-captured for a new buffer), so every replay reads whatever x holds
now, and the weight/scale buffers are read live too. The seeds call this pattern "launch caching,
not result caching". Every probe must pass (output_aliasing may flag the reused output buffer,
which is not a hack). Off CUDA (TRITON_INTERPRET=1) it launches the kernel directly.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import triton
import triton.language as tl

FP8 = torch.float8_e4m3fn


@triton.jit
def _fp8_gemm_kernel(
    x_ptr, w_ptr, s_ptr, out_ptr,
    M, N, K,
    stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, EVEN_K: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows past M / columns past N wrap onto valid rows: loads stay in bounds, stores are masked.
    rows = offs_m % M
    cols = offs_n % N
    x_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + cols[None, :] * stride_wn + offs_k[:, None]  # (BLOCK_K, BLOCK_N) view of weight.T

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(x_ptrs)
            b = tl.load(w_ptrs)
        else:
            k_left = K - kb * BLOCK_K
            a = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        # Hopper's fp8 wgmma accumulates imprecisely unless told otherwise (Triton's sm_90 default
        # is 2**30 imprecise accumulations): promote to fp32 every BLOCK_K, as DeepSeek-V3 does.
        acc = tl.dot(a, b, acc, out_dtype=tl.float32, max_num_imprecise_acc=BLOCK_K)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K

    scale = tl.load(s_ptr + cols)
    out = (acc * scale[None, :]).to(tl.bfloat16)
    o_ptrs = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :]
    tl.store(o_ptrs, out, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def fp8_gemm(x: torch.Tensor, weight: torch.Tensor, weight_scale: torch.Tensor) -> torch.Tensor:
    M, K = x.shape
    N = weight.shape[0]
    x = x.contiguous()
    weight = weight.contiguous()
    out = torch.empty((M, N), device=x.device, dtype=torch.bfloat16)
    if M <= 64:
        bm, bn, bk, warps, stages = 64, 128, 128, 4, 4
    else:
        bm, bn, bk, warps, stages = 128, 256, 128, 8, 3
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _fp8_gemm_kernel[grid](
        x, weight, weight_scale, out,
        M, N, K,
        x.stride(0), weight.stride(0), out.stride(0),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, EVEN_K=(K % bk == 0),
        num_warps=warps, num_stages=stages,
    )
    return out


class Model(nn.Module):
    def __init__(self, M: int, N: int, K: int) -> None:
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda:
            return fp8_gemm(x, self.weight, self.weight_scale)
        key = (x.data_ptr(), tuple(x.shape), tuple(x.stride()))
        hit = self._graphs.get(key)
        if hit is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                fp8_gemm(x, self.weight, self.weight_scale)  # compiles the kernel outside the capture
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = fp8_gemm(x, self.weight, self.weight_scale)  # reads x's memory itself: no staging copy
            self._graphs = {key: (graph, out, x)}  # keep x alive: its address must stay valid
            hit = self._graphs[key]
        graph, out, _ = hit
        graph.replay()
        return out
