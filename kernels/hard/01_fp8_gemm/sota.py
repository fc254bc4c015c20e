"""Library baseline: cuBLASLt FP8 GEMM through torch._scaled_mm with row-wise scales.

_scaled_mm needs K to be a multiple of 16, so the K=4127 shape zero-pads both operands each call
(zeros add nothing to the dot products). On a CPU there is no FP8 GEMM: the reference math runs.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

FP8 = torch.float8_e4m3fn


class Model(nn.Module):
    weight: torch.Tensor
    weight_scale: torch.Tensor

    def __init__(self, M: int, N: int, K: int) -> None:
        super().__init__()
        self.M, self.N, self.K = M, N, K
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cuda":
            return ((x.float() @ self.weight.float().T) * self.weight_scale).to(torch.bfloat16)
        w = self.weight
        pad = (-x.shape[1]) % 16
        if pad:
            x = F.pad(x.view(torch.uint8), (0, pad)).view(FP8)
            w = F.pad(w.view(torch.uint8), (0, pad)).view(FP8)
        scale_a = torch.ones(x.shape[0], 1, device=x.device, dtype=torch.float32)
        scale_b = self.weight_scale.view(1, -1)
        return torch._scaled_mm(x, w.t(), scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
