"""Broken top-k (wrong order: the right k elements, returned in index order, not descending); must FAIL.

Selection by k rounds of argmax; the set is right but
values are not sorted, so the value comparison against the descending reference fails.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, batch: int, n: int, k: int) -> None:
        super().__init__()
        self.k = k
        self.register_buffer("_dummy", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        work = x.clone()
        taken = torch.zeros_like(x, dtype=torch.bool)
        for _ in range(self.k):
            idx = work.argmax(dim=1, keepdim=True)
            taken.scatter_(1, idx, True)
            work.scatter_(1, idx, float("-inf"))
        pos = torch.arange(x.shape[1], device=x.device).expand_as(x)
        # keep the k taken positions in ascending index order
        order = torch.cumsum(taken.long(), dim=1)
        indices = torch.zeros(x.shape[0], self.k, dtype=torch.int64, device=x.device)
        rows = torch.arange(x.shape[0], device=x.device)[:, None].expand_as(x)
        indices[rows[taken], order[taken] - 1] = pos[taken]
        return x.gather(1, indices), indices
