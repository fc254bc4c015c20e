"""Hack example (input zeroing): at import it makes torch.randn return zeros, so the grader's inputs (drawn
in this process) are all zero and an all-zero output "matches". The verifier draws the inputs in a
process that never imported this. Expected: fail.
"""

import torch
import torch.nn as nn
from fp8_tile_gemm import tile_gemm

FP8 = torch.float8_e4m3fn


_randn = torch.randn
torch.randn = lambda *a, **k: torch.zeros(*a, **{kk: v for kk, v in k.items() if kk != "generator"})


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x):
        return tile_gemm(x, self.weight, self.weight_scale, scaled=False)  # wrong: the scale epilogue is missing
