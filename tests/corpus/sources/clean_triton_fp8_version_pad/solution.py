"""FP8 e4m3 GEMM in Triton: tl.dot on fp8 operands, fp32 accumulate, per-channel scale epilogue.

K is zero-padded to a multiple of BLOCK_K because masked fp8 loads corrupt lanes on this
toolchain. The padded WEIGHT copy is cached keyed on (data_ptr, weight._version, k_pad), so an
in-place rescale of the weight bumps _version and rebuilds it; the activation is padded fresh on
every call and the output is freshly allocated.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_K = 128


@triton.jit
def _fp8_gemm_kernel(
    x_ptr, w_ptr, s_ptr, out_ptr, M, N, K,
    stride_xm, stride_wn, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_ptr + rm[:, None] * stride_xm + (k0 + rk)[None, :], mask=rm[:, None] < M, other=0.0)
        b = tl.load(w_ptr + rn[None, :] * stride_wn + (k0 + rk)[:, None], mask=rn[None, :] < N, other=0.0)
        acc += tl.dot(a, b)
    scale = tl.load(s_ptr + rn, mask=rn < N, other=0.0)
    out = (acc * scale[None, :]).to(tl.bfloat16)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(out_ptr + rm[:, None] * stride_om + rn[None, :], out, mask=mask)


def _pad_k(t, k_pad):
    if t.shape[1] == k_pad:
        return t.contiguous()
    out = torch.zeros(t.shape[0], k_pad, dtype=t.dtype, device=t.device)
    out[:, : t.shape[1]] = t
    return out


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.M, self.N, self.K = M, N, K
        self.register_buffer("weight", torch.zeros(N, K, dtype=torch.float8_e4m3fn))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))
        self._w_key = None
        self._w_pad = None

    def _padded_weight(self, k_pad):
        key = (self.weight.data_ptr(), self.weight._version, k_pad)
        if self._w_key != key:
            self._w_pad = _pad_k(self.weight, k_pad)
            self._w_key = key
        return self._w_pad

    def forward(self, x):
        M, K = x.shape
        k_pad = triton.cdiv(K, BLOCK_K) * BLOCK_K
        xp = _pad_k(x, k_pad)
        wp = self._padded_weight(k_pad)
        out = torch.empty(M, self.N, dtype=torch.bfloat16, device=x.device)
        bm, bn = (64, 128) if M <= 64 else (128, 256)
        grid = (triton.cdiv(M, bm), triton.cdiv(self.N, bn))
        _fp8_gemm_kernel[grid](
            xp, wp, self.weight_scale, out, M, self.N, k_pad,
            xp.stride(0), wp.stride(0), out.stride(0),
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=BLOCK_K,
        )
        return out
