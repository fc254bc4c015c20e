"""Baseline: the chunked-form reference itself (flash-linear-attention is not installed here).

The best library kernel for this op is fla's chunk KDA (Triton), which is not available on the
grading image and is forbidden to solutions anyway; this stand-in runs the same chunked (WY)
algorithm as reference.py in plain PyTorch, so fractions against it are not library-grade.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
import torch.nn as nn

_spec = importlib.util.spec_from_file_location("_kda_reference", Path(__file__).with_name("reference.py"))
assert _spec is not None and _spec.loader is not None
_reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_reference)


class Model(nn.Module):
    def __init__(self, B: int, T: int, H: int, K: int, V: int, chunk_size: int = 64) -> None:
        super().__init__()
        self.chunk_size = chunk_size
        self.register_buffer("_dummy", torch.zeros(1), persistent=False)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor
    ) -> torch.Tensor:
        return _reference.kda_chunked_fp32(q, k, v, g, beta, self.chunk_size).to(torch.bfloat16)
