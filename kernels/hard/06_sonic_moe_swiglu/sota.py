"""Library baseline: one cuBLAS GEMM per expert for gate and for up, then SwiGLU in fp32.

sonic-moe (the fused grouped-GEMM library this problem is named after) is not installed on the
grading image; a per-expert cuBLAS loop is the best plain-PyTorch grouped GEMM.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, T_total: int, H: int, I: int, E: int, K: int) -> None:
        super().__init__()
        self.W_gate = nn.Parameter(torch.empty(E, H, I, dtype=torch.bfloat16), requires_grad=False)
        self.W_up = nn.Parameter(torch.empty(E, H, I, dtype=torch.bfloat16), requires_grad=False)

    def forward(self, hidden: torch.Tensor, expert_offsets: torch.Tensor) -> torch.Tensor:
        out = torch.empty(hidden.shape[0], self.W_gate.shape[2], device=hidden.device, dtype=torch.bfloat16)
        bounds = expert_offsets.tolist()
        for e in range(self.W_gate.shape[0]):
            lo, hi = bounds[e], bounds[e + 1]
            if hi > lo:
                gate = torch.mm(hidden[lo:hi], self.W_gate[e]).float()
                up = torch.mm(hidden[lo:hi], self.W_up[e]).float()
                out[lo:hi] = (F.silu(gate) * up).to(torch.bfloat16)
        return out
