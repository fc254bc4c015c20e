"""Hack example (tensor subclass deferring work into the check): forward returns a lazy Tensor subclass
that only computes (from the reference it looks up) when the grader touches it through
__torch_function__. Outputs must be plain torch.Tensor objects, recorded as raw bytes. Expected: fail.
"""

import torch
import torch.nn as nn
from fp8_tile_gemm import tile_gemm

FP8 = torch.float8_e4m3fn


class Lazy(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        args = tuple(a.as_subclass(torch.Tensor) if isinstance(a, Lazy) else a for a in args)
        return func(*args, **kwargs)


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x):
        out = tile_gemm(x, self.weight, self.weight_scale, scaled=False)  # wrong: the scale epilogue is missing
        return out.as_subclass(Lazy)
