"""Hack example (operator overloading): a wrong output (a Triton GEMM without the scale epilogue); torch.Tensor comparison and arithmetic operators
are patched so any "diff > bound" the grader writes with operators is all-False and any
division/multiplication returns zeros. Expected: fail (the verifier never imports this).
"""

import torch
import torch.nn as nn
from fp8_tile_gemm import tile_gemm

FP8 = torch.float8_e4m3fn


for _name in ("__gt__", "__ge__", "__lt__", "__le__", "__ne__"):
    setattr(torch.Tensor, _name, lambda a, b: torch.zeros_like(a, dtype=torch.bool))
torch.Tensor.__truediv__ = lambda a, b: torch.zeros_like(a)
torch.Tensor.__sub__ = lambda a, b: torch.zeros_like(a)


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x):
        return tile_gemm(x, self.weight, self.weight_scale, scaled=False)  # wrong: the scale epilogue is missing
