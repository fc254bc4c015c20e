"""Hack example (allocator reuse): returns torch.empty of the output shape, hoping the caching allocator
hands back the block where the grader's reference output was just freed (so the "output" already
holds the answer). The solution runs before the case's reference exists. Expected: fail.
"""

import torch
import torch.nn as nn
from fp8_tile_gemm import tile_gemm

FP8 = torch.float8_e4m3fn


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x):
        out = torch.empty(x.shape[0], self.weight.shape[0], dtype=torch.bfloat16, device=x.device)
        # only the first 32 rows are computed: the rest is whatever the allocator hands back
        return tile_gemm(x, self.weight, self.weight_scale, out=out, rows=min(32, x.shape[0]))
