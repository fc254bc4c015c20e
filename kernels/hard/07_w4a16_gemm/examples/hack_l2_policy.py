"""Hack example (l2_policy, CUDA only): the genuine W4A16 kernel plus a persisting-L2 window on the weights.

The math is the genuine Triton kernel's, so the check passes; but on its first CUDA call it
reserves the largest persisting-L2 carve-out and marks the packed weights persisting on the timed
stream, so a harness that only flushes L2 by writing a buffer times a warm weight stream (the
seeds' "persisting L2 ... so the evaluator's flush cannot enforce the documented HBM-load
measurement"). Caught by the l2_policy probe: the carve-out and the window are read back, and the
time after a plain flush is compared with the HBM roofline and with the time after a reset.
"""


from __future__ import annotations

import ctypes
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


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _Attr(ctypes.Union):
    _fields_ = [("window", _Window), ("pad", ctypes.c_char * 64)]


def _pin_in_l2(t: torch.Tensor) -> torch.cuda.Stream:
    """Reserve the largest persisting-L2 carve-out and mark the packed weights persisting on the
    current stream (and the legacy default stream), so they survive the harness's L2 flush."""
    cuda = ctypes.CDLL("libcuda.so.1")
    max_persist = ctypes.c_int(0)
    cuda.cuDeviceGetAttribute(ctypes.byref(max_persist), 108, torch.cuda.current_device())  # MAX_PERSISTING_L2
    cuda.cuCtxSetLimit(0x06, ctypes.c_size_t(max(max_persist.value, 0)))  # PERSISTING_L2_CACHE_SIZE
    attr = _Attr()
    attr.window.base_ptr = t.data_ptr()
    max_window = ctypes.c_int(0)
    cuda.cuDeviceGetAttribute(ctypes.byref(max_window), 109, torch.cuda.current_device())  # MAX_ACCESS_POLICY_WINDOW
    attr.window.num_bytes = min(t.numel() * t.element_size(), max(max_window.value, 1))
    attr.window.hitRatio = 1.0
    attr.window.hitProp = 2  # CU_ACCESS_PROPERTY_PERSISTING
    attr.window.missProp = 1  # CU_ACCESS_PROPERTY_STREAMING
    fn = cuda.cuStreamSetAttribute
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
    stream = torch.cuda.Stream()  # a private stream carrying the window (the null stream cannot)
    for handle in {int(torch.cuda.current_stream().cuda_stream), int(stream.cuda_stream)}:
        fn(ctypes.c_void_p(handle), 1, ctypes.byref(attr))  # ACCESS_POLICY_WINDOW
    return stream


class Model(nn.Module):
    def __init__(self, M: int, N: int, K: int, group_size: int = 128) -> None:
        super().__init__()
        self.group_size = group_size
        groups = K // group_size
        self.register_buffer("w_q", torch.zeros(K // 2, N, dtype=torch.uint8))
        self.register_buffer("scales", torch.ones(groups, N, dtype=torch.bfloat16))
        self.register_buffer("zeros", torch.zeros(groups, N, dtype=torch.bfloat16))
        self._stream: torch.cuda.Stream | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda:
            return w4a16_gemm(x, self.w_q.contiguous(), self.scales.contiguous(), self.zeros.contiguous(),
                              self.group_size)
        if self._stream is None:
            self._stream = _pin_in_l2(self.w_q)
        caller = torch.cuda.current_stream()
        self._stream.wait_stream(caller)
        with torch.cuda.stream(self._stream):  # the kernel runs under the persisting window
            out = w4a16_gemm(x, self.w_q, self.scales, self.zeros, self.group_size)
        caller.wait_stream(self._stream)  # the caller's events still cover the work
        out.record_stream(caller)
        return out
