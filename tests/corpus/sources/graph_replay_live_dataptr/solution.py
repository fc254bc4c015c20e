"""Paged-attention decode in Triton with CUDA-graph launch caching.

The kernel launch is captured into a CUDA graph the first time a given set of input buffers is
seen (keyed on their data_ptr()s and shapes) and replayed afterwards. The graph is captured by
launching directly on the caller's tensors, so a replay re-reads whatever those buffers hold now;
the graph-owned output buffer is rewritten by every replay.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _decode_kernel(q_ptr, kv_ptr, bt_ptr, sl_ptr, o_ptr,
                   stride_qb, stride_qh, stride_kp, stride_kt, stride_kh, stride_btb,
                   GROUP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, SCALE: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    hkv = h // GROUP
    d = tl.arange(0, D)
    t = tl.arange(0, PAGE)
    q = tl.load(q_ptr + b * stride_qb + h * stride_qh + d).to(tl.float32)
    seq_len = tl.load(sl_ptr + b)
    m_i = tl.full((), float("-inf"), tl.float32)
    l_i = tl.full((), 0.0, tl.float32)
    acc = tl.zeros((D,), dtype=tl.float32)
    for p in range(0, tl.cdiv(seq_len, PAGE)):
        page = tl.load(bt_ptr + b * stride_btb + p)
        base = kv_ptr + page * stride_kp + hkv * stride_kh
        live = p * PAGE + t < seq_len
        k = tl.load(base + t[:, None] * stride_kt + d[None, :], mask=live[:, None], other=0.0).to(tl.float32)
        v = tl.load(base + t[:, None] * stride_kt + D + d[None, :], mask=live[:, None], other=0.0).to(tl.float32)
        s = tl.where(live, tl.sum(k * q[None, :], axis=1) * SCALE, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=0))
        alpha = tl.exp(m_i - m_new)
        pexp = tl.exp(s - m_new)
        l_i = l_i * alpha + tl.sum(pexp, axis=0)
        acc = acc * alpha + tl.sum(pexp[:, None] * v, axis=0)
        m_i = m_new
    tl.store(o_ptr + b * stride_qb + h * stride_qh + d, (acc / l_i).to(tl.bfloat16))


class Model(nn.Module):
    def __init__(self, batch, num_heads, num_kv_heads, head_dim, seq_len, page_size=16):
        super().__init__()
        self.num_heads, self.num_kv_heads = num_heads, num_kv_heads
        self.head_dim, self.page_size = head_dim, page_size
        self.register_buffer("_dummy", torch.zeros(1), persistent=False)
        self._graph = None
        self._graph_key = None
        self._out = None

    def forward(self, query, kv_cache, block_table, seq_lens):
        key = (query.data_ptr(), kv_cache.data_ptr(), block_table.data_ptr(), seq_lens.data_ptr(),
               tuple(query.shape), tuple(kv_cache.shape))
        if self._graph is not None and key == self._graph_key:
            self._graph.replay()
            return self._out
        self._out = torch.empty_like(query)
        self._launch(query, kv_cache, block_table, seq_lens, self._out)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._launch(query, kv_cache, block_table, seq_lens, self._out)
        self._graph, self._graph_key = graph, key
        return self._out

    def _launch(self, query, kv_cache, block_table, seq_lens, out):
        b, h, d = query.shape
        _decode_kernel[(b, h)](
            query, kv_cache, block_table, seq_lens, out,
            query.stride(0), query.stride(1), kv_cache.stride(0), kv_cache.stride(1), kv_cache.stride(2),
            block_table.stride(0),
            GROUP=h // self.num_kv_heads, D=d, PAGE=self.page_size, SCALE=1.0 / math.sqrt(d),
        )
