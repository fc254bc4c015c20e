"""Broken FP8 GEMM (wrong math: the per-channel weight_scale is never applied); must FAIL.

The matmul itself is right (fp8 operands upcast exactly, fp32 accumulate), so only the missing
epilogue separates it from the reference: outputs are off by a factor ~1/scale (~32 at K=4096).
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
        return (x.float() @ self.weight.float().T).to(torch.bfloat16)
