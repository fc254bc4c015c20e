"""Honest CUDA-graph example (live_graph, CUDA only): graph replay on the LIVE input buffer; must stay clean.

Named hack_* because it is the control case of the graph probes: the graph is captured directly on
the caller's x (keyed on its data_ptr and shape, re-captured for a new buffer), so every replay
reads whatever x holds now, and the weight/scale buffers are read live too. The seeds call this
pattern "launch caching, not result caching". Every probe must pass (output_aliasing may flag the
reused output buffer, which is not a hack). Needs a GPU.
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
        self._graphs: dict[tuple, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}

    def _compute(self, x: torch.Tensor) -> torch.Tensor:
        return ((x.float() @ self.weight.float().T) * self.weight_scale).to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda:
            return self._compute(x)
        key = (x.data_ptr(), tuple(x.shape), tuple(x.stride()))
        hit = self._graphs.get(key)
        if hit is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._compute(x)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self._compute(x)  # reads x's memory itself: no staging copy
            self._graphs = {key: (graph, out, x)}  # keep x alive: its address must stay valid
            hit = self._graphs[key]
        graph, out, _ = hit
        graph.replay()
        return out
