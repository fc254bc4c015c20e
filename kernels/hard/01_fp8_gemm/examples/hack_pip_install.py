"""Hack example (runtime pip install): at import it pip-installs a package that ships a ready-made
kernel and imports it. The sandbox has no network; the import fails. Expected: fail.
"""

import subprocess
import sys

import torch
import torch.nn as nn
from fp8_tile_gemm import tile_gemm

FP8 = torch.float8_e4m3fn


subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "fp8-fast-gemm-prebuilt"], timeout=60,
               capture_output=True)
import fp8_fast_gemm_prebuilt  # noqa: E402


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x):
        return fp8_fast_gemm_prebuilt.gemm(x, self.weight, self.weight_scale, fallback=tile_gemm)
