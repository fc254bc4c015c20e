"""Row-wise top-k of an fp32 matrix: the reference.

x (batch, n) fp32 -> (values (batch, k) fp32 in descending order, indices (batch, k) int64) with
x.gather(1, indices) == values. Among equal values any index order is accepted (the grader checks
indices by gathering), so ties need not be broken like torch.topk breaks them.
"""

from __future__ import annotations

import torch
import torch.nn as nn

BATCH, N, K = 1, 131072, 64


class Model(nn.Module):
    def __init__(self, batch: int, n: int, k: int) -> None:
        super().__init__()
        self.batch, self.n, self.k = batch, n, k
        # Persistent (1,) buffer, as in the deck: the state_dict holds exactly `_dummy`.
        self.register_buffer("_dummy", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.topk(x, self.k, dim=-1, largest=True, sorted=True)
        return values, indices


def get_inputs() -> list:
    return [torch.randn(BATCH, N)]


def get_init_inputs() -> list:
    return [BATCH, N, K]


def make_property_case(seed: int) -> tuple[dict, list]:
    """Small adversarial rows: heavy ties, duplicated maxima, -inf padding, huge/tiny magnitudes, +-0,
    k = 1 or k = n (n <= 64). -inf never reaches the top k (k <= finite entries per row): outputs stay finite,
    yet a selection that uses -inf as its "already taken" sentinel can still pick a padding entry.
    """
    gen = torch.Generator().manual_seed(seed)

    def pick(options: list[int]) -> int:
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    batch = pick([1, 2, 3, 7])
    n = pick([1, 5, 64, 100, 257, 1000])
    # k = n (a full descending sort of the row) only where n <= 64, the deck's largest k
    k = n if n <= 64 and pick([0, 1]) == 0 else min(n, pick([1, 2, 8, 16, 64]))
    mode = pick([0, 1, 2, 3])
    if mode == 0:  # few distinct values: ties everywhere, including across the k-th boundary
        x = torch.randint(-3, 4, (batch, n), generator=gen).float()
    elif mode == 1:  # a duplicated maximum and -inf padding
        x = torch.randn(batch, n, generator=gen)
        x[:, : n // 4] = float("-inf")
        x[:, -1] = x.max(dim=1).values
        x = x[:, torch.randperm(n, generator=gen)]
    elif mode == 2:  # huge and tiny magnitudes, +-0, float32 extremes, sparse -inf
        x = torch.randn(batch, n, generator=gen) * torch.tensor([1e-30, 1.0, 1e30])[
            torch.randint(3, (batch, n), generator=gen)
        ]
        fmax = torch.finfo(torch.float32).max
        specials = torch.tensor([fmax, -fmax, 0.0, -0.0, float("-inf")])
        pos = torch.rand(batch, n, generator=gen) < 0.15
        x = torch.where(pos, specials[torch.randint(5, (batch, n), generator=gen)], x)
    else:  # all equal
        x = torch.full((batch, n), float(torch.randn(1, generator=gen)))
    finite = int(torch.isfinite(x).sum(dim=1).min())
    k = max(1, min(k, finite))
    if finite == 0:  # a row of only -inf: make it finite rather than emit -inf outputs
        x = torch.zeros_like(x)
    return {"BATCH": batch, "N": n, "K": k}, [x.contiguous()]
