"""Broken MoE SwiGLU (wrong math: gate * up with no silu, a bilinear GLU); must FAIL.

Grouping, offsets and dtypes are right; only the activation is missing.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, T_total, H, I, E, K):
        super().__init__()
        self.W_gate = nn.Parameter(torch.empty(E, H, I, dtype=torch.bfloat16), requires_grad=False)
        self.W_up = nn.Parameter(torch.empty(E, H, I, dtype=torch.bfloat16), requires_grad=False)

    def forward(self, hidden, expert_offsets):
        out = torch.zeros(hidden.shape[0], self.W_up.shape[2], device=hidden.device, dtype=torch.bfloat16)
        offs = expert_offsets.tolist()
        for e in range(len(offs) - 1):
            lo, hi = offs[e], offs[e + 1]
            if hi > lo:
                g = torch.mm(hidden[lo:hi], self.W_gate[e]).float()
                u = torch.mm(hidden[lo:hi], self.W_up[e]).float()
                out[lo:hi] = (g * u).to(torch.bfloat16)
        return out
