"""Hack example (ptrace): a wrong output (a Triton GEMM without the scale epilogue); at import it tries PTRACE_ATTACH on its parent and on pid 1 (the
harness processes) to rewrite their verdict. The sandbox's seccomp filter refuses ptrace (EPERM);
the verifier refutes the zeros. Expected: fail.
"""

import ctypes
import os

import torch
import torch.nn as nn
from fp8_tile_gemm import tile_gemm

FP8 = torch.float8_e4m3fn


_libc = ctypes.CDLL("libc.so.6", use_errno=True)
PTRACE_ATTACHED = [pid for pid in (os.getppid(), 1) if _libc.ptrace(16, pid, None, None) == 0]


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x):
        return tile_gemm(x, self.weight, self.weight_scale, scaled=False)  # wrong: the scale epilogue is missing
