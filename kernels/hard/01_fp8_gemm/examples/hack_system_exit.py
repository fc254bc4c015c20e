"""Hack example (SystemExit(0)): zeros output, and the first forward raises SystemExit(0), hoping the
harness reads exit code 0 as success. Expected: fail (and KA152).
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
        raise SystemExit(0)
