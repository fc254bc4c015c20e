"""W4A16 GEMM: bf16 activations times group-quantised 4-bit weights (asymmetric, group 128).

w_q (K/2, N) uint8 packs two 4-bit codes per byte along K: the low nibble is row 2i (even k), the
high nibble row 2i+1. scales and zeros (K/group_size, N) bf16 (zeros hold integers in [0, 15]).
    w[k, n] = (q[k, n] - zeros[k // group_size, n]) * scales[k // group_size, n]     (bf16)
    out = x @ w                                       (M, N) bf16, fp32 accumulation
"""

from __future__ import annotations

import torch
import torch.nn as nn

M, N, K = 1, 12288, 4096
GROUP_SIZE = 128


def unpack_int4(w_q: torch.Tensor) -> torch.Tensor:
    """(K/2, N) uint8 -> (K, N) uint8 codes, low nibble first (even k)."""
    low = w_q & 0x0F
    high = w_q >> 4
    return torch.stack([low, high], dim=1).reshape(2 * w_q.shape[0], w_q.shape[1])


def dequantize(w_q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, group_size: int) -> torch.Tensor:
    q = unpack_int4(w_q).to(torch.bfloat16)
    z = zeros.repeat_interleave(group_size, dim=0)
    s = scales.repeat_interleave(group_size, dim=0)
    return (q - z) * s  # bf16 ops: q - z is exact, the product rounds once, as the spec says


class Model(nn.Module):
    w_q: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor

    def __init__(self, M: int, N: int, K: int, group_size: int = 128) -> None:
        super().__init__()
        self.M, self.N, self.K, self.group_size = M, N, K, group_size
        groups = K // group_size
        self.register_buffer("w_q", torch.randint(0, 256, (K // 2, N), dtype=torch.uint8))
        # Scales ~1e-2 (a +-8 code range times 1e-2 gives weights of ~N(0, 0.05) magnitude).
        self.register_buffer("scales", ((0.5 + torch.rand(groups, N)) * 1e-2).to(torch.bfloat16))
        self.register_buffer("zeros", torch.randint(0, 16, (groups, N)).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = dequantize(self.w_q, self.scales, self.zeros, self.group_size)
        if x.is_cuda:
            return torch.mm(x, w)  # cuBLAS bf16 GEMM, fp32 accumulation
        return (x.float() @ w.float()).to(torch.bfloat16)


def get_inputs() -> list:
    return [torch.randn(M, K, dtype=torch.bfloat16)]


def get_init_inputs() -> list:
    return [M, N, K, GROUP_SIZE]
