"""Paged-attention decode in CUDA (load_inline, sm_90a): one warp per (batch, query head).

Each warp walks the live block_table, loads one 16-token page of K and V at a time, computes
the scores with warp shuffles and keeps an fp32 online softmax; the output is a fresh tensor.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <cuda_bf16.h>

template <int D>
__global__ void paged_decode(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kv,
                             const int* __restrict__ block_table, const int* __restrict__ seq_lens,
                             __nv_bfloat16* __restrict__ out, int H, int Hkv, int max_pages,
                             int page_stride, int tok_stride, float scale) {
    const int b = blockIdx.x;
    const int h = blockIdx.y;
    const int lane = threadIdx.x;
    const int group = H / Hkv;
    const int hkv = h / group;
    constexpr int PER = D / 32;
    float qv[PER];
    for (int i = 0; i < PER; ++i) qv[i] = __bfloat162float(q[((size_t)b * H + h) * D + lane * PER + i]);
    float m = -INFINITY, l = 0.f, acc[PER];
    for (int i = 0; i < PER; ++i) acc[i] = 0.f;
    const int len = seq_lens[b];
    for (int t = 0; t < len; ++t) {
        const int page = block_table[b * max_pages + t / 16];
        const __nv_bfloat16* tok = kv + (size_t)page * page_stride + (t % 16) * tok_stride + hkv * 2 * D;
        float s = 0.f;
        for (int i = 0; i < PER; ++i) s += qv[i] * __bfloat162float(tok[lane * PER + i]);
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
        s *= scale;
        const float m_new = fmaxf(m, s);
        const float alpha = __expf(m - m_new);
        const float p = __expf(s - m_new);
        l = l * alpha + p;
        for (int i = 0; i < PER; ++i) acc[i] = acc[i] * alpha + p * __bfloat162float(tok[D + lane * PER + i]);
        m = m_new;
    }
    for (int i = 0; i < PER; ++i) {
        if (mt * 16 < D) {
            out[((size_t)b * H + h) * D + lane * PER + i] = __float2bfloat16(acc[i] / l);
        }
    }
}

torch::Tensor paged_forward(torch::Tensor q, torch::Tensor kv, torch::Tensor bt, torch::Tensor sl) {
    auto out = torch::empty_like(q);
    const int B = q.size(0), H = q.size(1), D = q.size(2), Hkv = kv.size(2);
    dim3 grid(B, H);
    const float scale = 1.0f / sqrtf((float)D);
    if (D == 128) {
        paged_decode<128><<<grid, 32>>>(
            reinterpret_cast<const __nv_bfloat16*>(q.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(kv.data_ptr()),
            bt.data_ptr<int>(), sl.data_ptr<int>(), reinterpret_cast<__nv_bfloat16*>(out.data_ptr()),
            H, Hkv, bt.size(1), kv.stride(0), kv.stride(1), scale);
    } else {
        paged_decode<64><<<grid, 32>>>(
            reinterpret_cast<const __nv_bfloat16*>(q.data_ptr()), reinterpret_cast<const __nv_bfloat16*>(kv.data_ptr()),
            bt.data_ptr<int>(), sl.data_ptr<int>(), reinterpret_cast<__nv_bfloat16*>(out.data_ptr()),
            H, Hkv, bt.size(1), kv.stride(0), kv.stride(1), scale);
    }
    return out;
}
"""

_ext = load_inline(
    name="paged_decode_ext",
    cpp_sources="torch::Tensor paged_forward(torch::Tensor q, torch::Tensor kv, torch::Tensor bt, torch::Tensor sl);",
    cuda_sources=_CUDA,
    functions=["paged_forward"],
    extra_cuda_cflags=["-O3", "-arch=sm_90a"],
)


class Model(nn.Module):
    def __init__(self, batch, num_heads, num_kv_heads, head_dim, seq_len, page_size=16):
        super().__init__()
        self.register_buffer("_dummy", torch.zeros(1), persistent=False)

    def forward(self, query, kv_cache, block_table, seq_lens):
        return _ext.paged_forward(query, kv_cache, block_table, seq_lens)
