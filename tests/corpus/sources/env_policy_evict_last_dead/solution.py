"""Paged-attention decode, CUDA via load_inline: one block per (batch, kv head), fp32 online softmax.

The KV loads take an L2 cache-policy hint chosen by KV_HINT (0 = evict_first, 1 = evict_last,
2 = evict_normal) for profiling experiments; unset, the default is 0: streaming KV, read once.
"""

import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <cuda_bf16.h>

__device__ __forceinline__ unsigned long long make_hint(int which) {
    unsigned long long h = 0;
    if (which == 1) {
        asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(h));
    } else if (which == 2) {
        asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(h));
    } else {
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(h));
    }
    return h;
}

template <int D, int G>
__global__ void decode_kernel(const __nv_bfloat16* q, const __nv_bfloat16* kv, const int* bt,
                              const int* sl, __nv_bfloat16* out, int max_pages, float scale, const int hint_mode) {
    const unsigned long long hint = make_hint(hint_mode);
    const int b = blockIdx.x, hkv = blockIdx.y, lane = threadIdx.x;
    const int L = sl[b];
    float acc = 0.f, m = -1e30f, l = 0.f;
    for (int t = lane; t < L; t += blockDim.x) {
        const int page = bt[b * max_pages + t / 16];
        const __nv_bfloat16* k = kv + ((size_t)page * 16 + t % 16) * (2 * D);
        float kval;
        asm volatile("{ .reg .b16 x; ld.global.L2::cache_hint.b16 x, [%1], %2; cvt.f32.bf16 %0, x; }"
                     : "=f"(kval) : "l"(k), "l"(hint));
        const float s = kval * __bfloat162float(q[b * G * D]) * scale;
        const float mn = fmaxf(m, s);
        l = l * __expf(m - mn) + __expf(s - mn);
        acc = acc * __expf(m - mn) + __expf(s - mn) * __bfloat162float(k[D]);
        m = mn;
    }
    if (lane == 0) out[(b * gridDim.y + hkv) * G * D] = __float2bfloat16(acc / l);
}

#define LAUNCH(D_, G_) \
    decode_kernel<D_, G_><<<grid, 32>>>(qp, kvp, btp, slp, op, max_pages, (float)scale, (int)hint)

torch::Tensor decode(torch::Tensor q, torch::Tensor kv, torch::Tensor bt, torch::Tensor sl,
                     double scale, int64_t hint) {
    auto out = torch::empty_like(q);
    const int max_pages = bt.size(1);
    dim3 grid(q.size(0), kv.size(2));
    auto qp = reinterpret_cast<const __nv_bfloat16*>(q.data_ptr());
    auto kvp = reinterpret_cast<const __nv_bfloat16*>(kv.data_ptr());
    auto btp = bt.data_ptr<int>();
    auto slp = sl.data_ptr<int>();
    auto op = reinterpret_cast<__nv_bfloat16*>(out.data_ptr());
    const int G = q.size(1) / kv.size(2);
    if (q.size(2) == 128) {
        if (G == 8) LAUNCH(128, 8); else LAUNCH(128, 4);
    } else {
        LAUNCH(64, 4);
    }
    return out;
}
"""

_CPP = "torch::Tensor decode(torch::Tensor q, torch::Tensor kv, torch::Tensor bt, torch::Tensor sl, double scale, int64_t hint);"

_HINT = int(os.environ.get("KV_HINT", "0"))
_ext = None
_decode = None


def _build():
    global _ext, _decode
    if _ext is None:
        _ext = load_inline(name="paged_decode_hint", cpp_sources=_CPP, cuda_sources=_CUDA, functions=["decode"])
        _decode = _ext.decode
    return _ext


class Model(nn.Module):
    def __init__(self, batch, num_heads, num_kv_heads, head_dim, seq_len, page_size):
        super().__init__()
        self.scale = head_dim**-0.5
        _build()

    def forward(self, query, kv_cache, block_table, seq_lens):
        return _decode(query, kv_cache, block_table, seq_lens, self.scale, _HINT)
