"""Broken FP8 GEMM (wrong dtype: returns the fp32 result instead of bf16); must FAIL.

The values are right to fp32 precision; the output contract (a bf16 tensor) is not.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, M: int, N: int, K: int) -> None:
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=torch.float8_e4m3fn))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() @ self.weight.float().T) * self.weight_scale
