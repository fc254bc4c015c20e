"""Library baseline: gather the live pages, then PyTorch SDPA (flash/efficient kernels) with GQA.

No paged-attention library (vLLM, FlashInfer) is installed on the grading image; this baseline
pays for materialising the gathered K/V, which a real paged kernel avoids.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(
        self, batch: int, num_heads: int, num_kv_heads: int, head_dim: int, seq_len: int, page_size: int = 16
    ) -> None:
        super().__init__()
        self.register_buffer("_dummy", torch.zeros(1), persistent=False)

    def forward(
        self, query: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor
    ) -> torch.Tensor:
        b, h, d = query.shape
        _, page, hkv, _ = kv_cache.shape
        max_pages = block_table.shape[1]
        kv = kv_cache[block_table.long()].reshape(b, max_pages * page, hkv, 2 * d)
        keys = kv[..., :d].transpose(1, 2)  # (B, Hkv, T, D)
        values = kv[..., d:].transpose(1, 2)
        live = torch.arange(max_pages * page, device=query.device)[None, :] < seq_lens.long()[:, None]
        mask = live[:, None, None, :]  # (B, 1, 1, T), True = attend
        q = query[:, :, None, :]  # (B, H, 1, D)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
        return out[:, :, 0, :]
