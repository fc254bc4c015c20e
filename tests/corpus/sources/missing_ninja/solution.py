"""Top-k (descending values + int64 indices) in CUDA via load_inline.

One block per row: every thread keeps a sorted register list of its best k candidates over a
strided scan of the live row, then the block merges the lists in shared memory by repeated
arg-max extraction. Outputs are freshly allocated on every call.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_CUDA = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

#define MAXK 64
#define THREADS 256

__global__ void topk_rows(const float* __restrict__ x, float* __restrict__ vals, int64_t* __restrict__ idx,
                          int n, int k) {
    __shared__ float s_val[THREADS];
    __shared__ int s_idx[THREADS];
    __shared__ int s_taken[THREADS];
    const float* row = x + (size_t)blockIdx.x * n;
    float best[MAXK];
    int best_i[MAXK];
    for (int j = 0; j < k; ++j) { best[j] = -INFINITY; best_i[j] = -1; }
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = row[i];
        if (v > best[k - 1]) {
            int j = k - 1;
            while (j > 0 && best[j - 1] < v) { best[j] = best[j - 1]; best_i[j] = best_i[j - 1]; --j; }
            best[j] = v; best_i[j] = i;
        }
    }
    int head = 0;
    for (int out = 0; out < k; ++out) {
        s_val[threadIdx.x] = head < k ? best[head] : -INFINITY;
        s_idx[threadIdx.x] = threadIdx.x;
        __syncthreads();
        for (int s = blockDim.x / 2; s > 0; s >>= 1) {
            if (threadIdx.x < s && s_val[threadIdx.x + s] > s_val[threadIdx.x]) {
                s_val[threadIdx.x] = s_val[threadIdx.x + s];
                s_idx[threadIdx.x] = s_idx[threadIdx.x + s];
            }
            __syncthreads();
        }
        int winner = s_idx[0];
        if (threadIdx.x == winner) {
            vals[(size_t)blockIdx.x * k + out] = best[head];
            idx[(size_t)blockIdx.x * k + out] = best_i[head];
            ++head;
        }
        s_taken[threadIdx.x] = 0;
        __syncthreads();
    }
}

std::vector<torch::Tensor> topk_forward(torch::Tensor x, int64_t k) {
    auto b = x.size(0);
    auto n = x.size(1);
    auto vals = torch::empty({b, k}, x.options());
    auto idx = torch::empty({b, k}, x.options().dtype(torch::kInt64));
    topk_rows<<<b, THREADS>>>(x.data_ptr<float>(), vals.data_ptr<float>(), idx.data_ptr<int64_t>(), n, k);
    return {vals, idx};
}
"""

_ext = load_inline(
    name="topk_rows_ext",
    cpp_sources="std::vector<torch::Tensor> topk_forward(torch::Tensor x, int64_t k);",
    cuda_sources=_CUDA,
    functions=["topk_forward"],
    extra_cuda_cflags=["-O3", "-arch=sm_90a"],
)


class Model(nn.Module):
    def __init__(self, batch, n, k):
        super().__init__()
        self.k = k
        self.register_buffer("_dummy", torch.zeros(1))

    def forward(self, x):
        vals, idx = _ext.topk_forward(x.contiguous(), self.k)
        return vals, idx
