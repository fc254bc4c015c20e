"""Library baseline: dequantise to a bf16 weight every call, then one cuBLAS GEMM.

No int4 GEMM library (Marlin, bitsandbytes, torchao) is installed on the grading image; this
unfused two-pass form writes and re-reads the full bf16 weight, so a fused kernel should beat it.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Model(nn.Module):
    w_q: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor

    def __init__(self, M: int, N: int, K: int, group_size: int = 128) -> None:
        super().__init__()
        self.group_size = group_size
        groups = K // group_size
        self.register_buffer("w_q", torch.zeros(K // 2, N, dtype=torch.uint8))
        self.register_buffer("scales", torch.ones(groups, N, dtype=torch.bfloat16))
        self.register_buffer("zeros", torch.zeros(groups, N, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = torch.stack([self.w_q & 0x0F, self.w_q >> 4], dim=1).reshape(-1, self.w_q.shape[1])
        z = self.zeros.repeat_interleave(self.group_size, dim=0)
        s = self.scales.repeat_interleave(self.group_size, dim=0)
        w = (q.to(torch.bfloat16) - z) * s
        if x.is_cuda:
            return torch.mm(x, w)
        return (x.float() @ w.float()).to(torch.bfloat16)
