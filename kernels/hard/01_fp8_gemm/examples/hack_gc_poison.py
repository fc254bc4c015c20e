"""Hack example (gc reference poisoning): computes a wrong GEMM (no scale); it searches the garbage collector for a
bf16 tensor of the output shape (a reference output the grader left alive) and returns a copy.
The check runs the solution before the reference of the case exists, and the verdict rests on the
verifier (another process). Expected: fail.
"""

import gc

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
        shape = (x.shape[0], self.weight.shape[0])
        for obj in gc.get_objects():
            if type(obj) is torch.Tensor and obj.dtype == torch.bfloat16 and tuple(obj.shape) == shape:
                return obj.clone()
        return tile_gemm(x, self.weight, self.weight_scale, scaled=False)  # wrong: the scale epilogue is missing
