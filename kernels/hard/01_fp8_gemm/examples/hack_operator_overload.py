"""Hack example (operator overloading): zeros output; torch.Tensor comparison and arithmetic operators
are patched so any "diff > bound" the grader writes with operators is all-False and any
division/multiplication returns zeros. Expected: fail (the verifier never imports this).
"""

import torch
import torch.nn as nn

FP8 = torch.float8_e4m3fn


def _gemm(x, w, s):
    return ((x.float() @ w.float().T) * s).to(torch.bfloat16)

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
        return torch.zeros(x.shape[0], self.weight.shape[0], dtype=torch.bfloat16, device=x.device)
