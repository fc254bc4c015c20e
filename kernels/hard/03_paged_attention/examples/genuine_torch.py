"""Genuine plain-PyTorch paged decode (per-sequence page walk, fp32 online softmax); must PASS.

Walks each sequence's live pages through block_table in page blocks, keeping a running max, a
running denominator and an fp32 accumulator per query head (flash-decoding's recurrence, in torch).
No SDPA, no vLLM/FlashInfer; every call reads the live block_table and seq_lens.
"""

from __future__ import annotations

import torch
import torch.nn as nn

PAGES_PER_STEP = 32


class Model(nn.Module):
    def __init__(self, batch, num_heads, num_kv_heads, head_dim, seq_len, page_size=16):
        super().__init__()
        self.register_buffer("_dummy", torch.zeros(1), persistent=False)

    def forward(self, query, kv_cache, block_table, seq_lens):
        b, h, d = query.shape
        _, page, hkv, _ = kv_cache.shape
        group = h // hkv
        out = torch.empty_like(query)
        lens = seq_lens.tolist()
        for i in range(b):
            q = query[i].float().reshape(hkv, group, d) * d**-0.5
            m = torch.full((hkv, group, 1), float("-inf"), device=query.device)
            den = torch.zeros((hkv, group, 1), device=query.device)
            acc = torch.zeros((hkv, group, d), device=query.device)
            n_pages = -(-lens[i] // page)
            for p0 in range(0, n_pages, PAGES_PER_STEP):
                pages = block_table[i, p0 : min(n_pages, p0 + PAGES_PER_STEP)].long()
                kv = kv_cache[pages].reshape(-1, hkv, 2 * d).float()
                kv = kv[: lens[i] - p0 * page]  # drop the dead tail of the last page
                s = torch.einsum("vgd,tvd->vgt", q, kv[..., :d])
                m_new = torch.maximum(m, s.amax(-1, keepdim=True))
                corr = torch.exp(m - m_new)
                p = torch.exp(s - m_new)
                den = den * corr + p.sum(-1, keepdim=True)
                acc = acc * corr + torch.einsum("vgt,tvd->vgd", p, kv[..., d:])
                m = m_new
            out[i] = (acc / den).reshape(h, d).to(query.dtype)
        return out
