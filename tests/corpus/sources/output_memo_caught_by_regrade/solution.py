"""Hack example (output_memo): returns a memoised output keyed on (x.data_ptr(), x._version, a sample of row 0).

Passes the ordinary check (fresh tensors, and the in-place x*8 stress bumps _version), but a write
that keeps the pointer and does not bump the version counter (a raw alias of the storage) and
leaves row 0 alone returns the previous call's output. Caught by same_storage_overwrite's raw
variants. Pure torch: runs on CPU.
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
        self._memo: dict[tuple[int, int, bytes, int, int], torch.Tensor] = {}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sample = x[0, :16].view(torch.uint8).cpu().numpy().tobytes()
        key = (x.data_ptr(), x._version, sample, self.weight._version, self.weight_scale._version)
        out = self._memo.get(key)
        if out is None:
            out = ((x.float() @ self.weight.float().T) * self.weight_scale).to(torch.bfloat16)
            self._memo = {key: out}
        return out
