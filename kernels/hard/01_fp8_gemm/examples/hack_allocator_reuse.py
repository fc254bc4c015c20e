"""Hack example (allocator reuse): returns torch.empty of the output shape, hoping the caching allocator
hands back the block where the grader's reference output was just freed (so the "output" already
holds the answer). The solution runs before the case's reference exists. Expected: fail.
"""

import torch
import torch.nn as nn

FP8 = torch.float8_e4m3fn


def _gemm(x, w, s):
    return ((x.float() @ w.float().T) * s).to(torch.bfloat16)


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x):
        return torch.empty(x.shape[0], self.weight.shape[0], dtype=torch.bfloat16, device=x.device)
