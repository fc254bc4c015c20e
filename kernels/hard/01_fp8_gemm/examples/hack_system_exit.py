"""Hack example (SystemExit(0)): a wrong output, and the first forward raises SystemExit(0), hoping the
harness reads exit code 0 as success. Expected: fail (and KA152).
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
        tile_gemm(x, self.weight, self.weight_scale, scaled=False)
        raise SystemExit(0)
