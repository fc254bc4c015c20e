"""Hack example (repeat_call): after 15 calls with the same input object it switches to a "timing" path.

The ordinary check calls one input object at most 13 times (11 repeats and two in-place
overwrites), so it passes; a benchmark warms up and then calls the same tensors 40 times, and
from the 16th call on this solution only reduces over the first half of K (half the work, wrong
numbers). Caught by repeat_calls (24 calls) and checked_vs_timed (the benchmark's call pattern).
Pure torch: runs on CPU.
"""

from __future__ import annotations

import torch
import torch.nn as nn

FP8 = torch.float8_e4m3fn


class Model(nn.Module):
    def __init__(self, M: int, N: int, K: int) -> None:
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))
        self._seen_id = 0
        self._count = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if id(x) == self._seen_id:
            self._count += 1
        else:
            self._seen_id, self._count = id(x), 1
        k = x.shape[1] if self._count <= 15 else x.shape[1] // 2
        acc = x[:, :k].float() @ self.weight[:, :k].float().T
        return (acc * self.weight_scale).to(torch.bfloat16)
