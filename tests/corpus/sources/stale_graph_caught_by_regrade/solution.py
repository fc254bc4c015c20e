"""Hack example (stale_graph, CUDA only): a CUDA graph that replays a STAGING copy of x made at capture.

The graph computes from a private staging buffer; the live x is copied into it only when a cheap
key changes (data_ptr, _version, the first 16 bytes of row 0). The ordinary check passes (fresh
tensors change the key; its in-place overwrites rewrite row 0), but an in-place write that keeps
the pointer and version and leaves row 0 alone is never copied in: replay returns the old answer.
Caught by same_storage_overwrite (the last-row and scattered raw writes). Needs a GPU.
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
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static_x: torch.Tensor | None = None
        self._static_out: torch.Tensor | None = None
        self._key: tuple | None = None

    def _compute(self, x: torch.Tensor) -> torch.Tensor:
        return ((x.float() @ self.weight.float().T) * self.weight_scale).to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda:
            return self._compute(x)
        key = (x.data_ptr(), x._version, bytes(x[0, :16].view(torch.uint8).cpu().tolist()))
        if self._graph is None or self._static_x is None or self._static_x.shape != x.shape:
            self._static_x = x.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._compute(self._static_x)
            torch.cuda.current_stream().wait_stream(side)
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._static_out = self._compute(self._static_x)
            self._key = key
        elif key != self._key:
            self._static_x.copy_(x)  # staged only when the key moves
            self._key = key
        self._graph.replay()
        assert self._static_out is not None
        return self._static_out
