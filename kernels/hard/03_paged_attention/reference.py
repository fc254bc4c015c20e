"""Paged-attention decode (GQA, vLLM-style paged KV cache): the reference.

query (B, H, D) bf16; kv_cache (num_pages, page_size, Hkv, 2*D) bf16 with K in [..., :D] and V in
[..., D:]; block_table (B, max_pages) int32 maps each sequence's logical page p to a physical
page; seq_lens (B,) int32 live tokens per sequence (1 <= seq_len <= max_pages * page_size).
Query head h attends to KV head h // (H // Hkv) over the first seq_len tokens of its sequence:
    out[b, h] = softmax(q . K^T / sqrt(D)) V        (scores and softmax in fp32) -> bf16.
Pages past a sequence's live length and physical pages no block_table row names are never read.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

BATCH, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, SEQ_LEN = 8, 32, 8, 128, 1024
PAGE_SIZE = 16


def paged_attention_fp32(
    query: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor
) -> torch.Tensor:
    """Gather every sequence's pages, mask the dead tail, fp32 softmax attention; (B, H, D) fp32."""
    b, h, d = query.shape
    _, page, hkv, _ = kv_cache.shape
    max_pages = block_table.shape[1]
    group = h // hkv
    pages = kv_cache[block_table.long()]  # (B, max_pages, page, Hkv, 2D)
    kv = pages.reshape(b, max_pages * page, hkv, 2 * d).float()
    keys, values = kv[..., :d], kv[..., d:]
    q = query.float().reshape(b, hkv, group, d)
    scores = torch.einsum("bvgd,btvd->bvgt", q, keys) / math.sqrt(d)
    live = torch.arange(max_pages * page, device=query.device)[None, :] < seq_lens.long()[:, None]
    scores = scores.masked_fill(~live[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    out = torch.einsum("bvgt,btvd->bvgd", probs, values)
    return out.reshape(b, h, d)


class Model(nn.Module):
    def __init__(
        self, batch: int, num_heads: int, num_kv_heads: int, head_dim: int, seq_len: int, page_size: int = 16
    ) -> None:
        super().__init__()
        self.batch, self.num_heads, self.num_kv_heads = batch, num_heads, num_kv_heads
        self.head_dim, self.seq_len, self.page_size = head_dim, seq_len, page_size
        self.register_buffer("_dummy", torch.zeros(1), persistent=False)

    def forward(
        self, query: torch.Tensor, kv_cache: torch.Tensor, block_table: torch.Tensor, seq_lens: torch.Tensor
    ) -> torch.Tensor:
        return paged_attention_fp32(query, kv_cache, block_table, seq_lens).to(torch.bfloat16)


def make_paged_inputs(
    batch: int,
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    seq_lens: torch.Tensor,
    page_size: int,
    max_pages: int,
    spare_pages: int = 0,
    gen: torch.Generator | None = None,
) -> list:
    """Inputs for given live lengths: pages scattered by a random physical permutation."""
    num_pages = batch * max_pages + spare_pages
    query = torch.randn(batch, num_heads, head_dim, generator=gen).bfloat16()
    kv_cache = torch.randn(num_pages, page_size, num_kv_heads, 2 * head_dim, generator=gen).bfloat16()
    perm = torch.randperm(num_pages, generator=gen)[: batch * max_pages]
    block_table = perm.reshape(batch, max_pages).to(torch.int32)
    return [query, kv_cache, block_table, seq_lens.to(torch.int32)]


def get_inputs() -> list:
    max_pages = -(-SEQ_LEN // PAGE_SIZE)
    # Decode at context ~SEQ_LEN: each sequence loses 0..page_size-1 tokens, so tails are ragged.
    seq_lens = (SEQ_LEN - torch.randint(0, PAGE_SIZE, (BATCH,))).clamp(min=1)
    return make_paged_inputs(BATCH, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, seq_lens, PAGE_SIZE, max_pages)


def get_init_inputs() -> list:
    return [BATCH, NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, SEQ_LEN, PAGE_SIZE]


def make_property_case(seed: int) -> tuple[dict, list]:
    """Small ragged decode batch: lengths of 1, exact page multiples, full and odd tails; spare pages."""
    gen = torch.Generator().manual_seed(seed)

    def pick(options: list[int]) -> int:
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    hkv = pick([1, 2, 4])
    shape = {
        "BATCH": pick([1, 2, 3, 5]),
        "NUM_HEADS": hkv * pick([1, 2, 4]),
        "NUM_KV_HEADS": hkv,
        "HEAD_DIM": pick([16, 32, 64]),
        "SEQ_LEN": pick([1, 16, 17, 40, 64, 100]),
        "PAGE_SIZE": 16,
    }
    max_pages = -(-shape["SEQ_LEN"] // 16)
    special = torch.tensor([1, shape["SEQ_LEN"], max(1, (shape["SEQ_LEN"] // 16) * 16)])
    lens = torch.randint(1, shape["SEQ_LEN"] + 1, (shape["BATCH"],), generator=gen)
    use_special = torch.rand(shape["BATCH"], generator=gen) < 0.5
    lens = torch.where(use_special, special[torch.randint(3, (shape["BATCH"],), generator=gen)], lens)
    inputs = make_paged_inputs(
        shape["BATCH"], shape["NUM_HEADS"], hkv, shape["HEAD_DIM"], lens, 16, max_pages,
        spare_pages=pick([0, 3]), gen=gen,
    )
    return shape, inputs
