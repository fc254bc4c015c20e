"""Broken KDA (wrong math: the decay gate g is ignored, a plain delta rule); must FAIL.

Without exp(g_t) the state never forgets, so outputs drift from the reference after a few steps.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, B: int, T: int, H: int, K: int, V: int, chunk_size: int = 64) -> None:
        super().__init__()
        self.register_buffer("_dummy", torch.zeros(1), persistent=False)

    def forward(self, q, k, v, g, beta):
        b, t, h, dk = q.shape
        qf, kf, vf, bf = q.float() * dk**-0.5, k.float(), v.float(), beta.float()
        state = torch.zeros(b, h, dk, v.shape[-1], device=q.device)
        out = torch.empty(b, t, h, v.shape[-1], device=q.device)
        for i in range(t):
            err = vf[:, i] - torch.einsum("bhk,bhkv->bhv", kf[:, i], state)
            state = state + torch.einsum("bhk,bhv->bhkv", bf[:, i, :, None] * kf[:, i], err)
            out[:, i] = torch.einsum("bhk,bhkv->bhv", qf[:, i], state)
        return out.to(torch.bfloat16)
