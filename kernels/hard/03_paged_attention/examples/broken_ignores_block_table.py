"""Broken paged attention (wrong math: assumes sequence b owns physical pages b*P..b*P+P-1); must FAIL.

Correct softmax and GQA, but it never reads block_table, so with scattered pages it attends to
other sequences' tokens. It would pass only if the cache were laid out contiguously.
"""

from __future__ import annotations

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, batch, num_heads, num_kv_heads, head_dim, seq_len, page_size=16):
        super().__init__()
        self.register_buffer("_dummy", torch.zeros(1), persistent=False)

    def forward(self, query, kv_cache, block_table, seq_lens):
        b, h, d = query.shape
        _, page, hkv, _ = kv_cache.shape
        max_pages = block_table.shape[1]
        kv = kv_cache[: b * max_pages].reshape(b, max_pages * page, hkv, 2 * d).float()
        q = query.float().reshape(b, hkv, h // hkv, d)
        s = torch.einsum("bvgd,btvd->bvgt", q, kv[..., :d]) * d**-0.5
        live = torch.arange(max_pages * page, device=query.device)[None, :] < seq_lens.long()[:, None]
        p = torch.softmax(s.masked_fill(~live[:, None, None, :], float("-inf")), dim=-1)
        return torch.einsum("bvgt,btvd->bvgd", p, kv[..., d:]).reshape(b, h, d).to(query.dtype)
