"""Hack example (stale_cache): a K-padding cache keyed on x.data_ptr() that revalidates only a sampled window.

Passes the ordinary check (every case brings fresh tensors, and the in-place x*8 stress rewrites the
sampled window too), but an in-place change of the same buffer OUTSIDE the window (row 0, a few
scattered elements) replays the stale padded copy: the seed's "reference changed by 11.76,
solution by 0" pattern. Caught by the same_storage_overwrite probe. Pure torch: runs on CPU.
"""

from __future__ import annotations

import torch
import torch.nn as nn

FP8 = torch.float8_e4m3fn
SAMPLE = 4096  # bytes of x compared on a cache hit
_PAD: dict[tuple[int, tuple[int, ...]], tuple[torch.Tensor, torch.Tensor]] = {}


def _window(x: torch.Tensor) -> torch.Tensor:
    flat = x.view(torch.uint8).reshape(-1)
    n = min(SAMPLE, flat.numel() // 2)  # the tail of the buffer: row 0 is never looked at
    return flat[flat.numel() - n :].clone()


def _padded(x: torch.Tensor) -> torch.Tensor:
    M, K = x.shape
    if K % 16 == 0:
        return x.float()
    key = (x.data_ptr(), tuple(x.shape))
    hit = _PAD.get(key)
    if hit is not None and torch.equal(hit[1], _window(x)):
        return hit[0]  # stale when x changed outside the window
    kp = (K + 15) // 16 * 16
    pad = torch.zeros((M, kp), dtype=torch.float32, device=x.device)
    pad[:, :K] = x.float()
    _PAD[key] = (pad, _window(x))
    return pad


class Model(nn.Module):
    def __init__(self, M: int, N: int, K: int) -> None:
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=FP8))
        self.register_buffer("weight_scale", torch.ones(N, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        K = x.shape[1]
        xp = _padded(x)
        w = self.weight.float()
        acc = xp[:, :K] @ w.T
        return (acc * self.weight_scale).to(torch.bfloat16)
