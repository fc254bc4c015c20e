"""FP8 (e4m3) GEMM with a per-output-channel weight scale: the reference.

out = ((x.float() @ weight.float().T) * weight_scale).to(bf16)

x (M, K) float8_e4m3fn, weight (N, K) float8_e4m3fn, weight_scale (N,) fp32 -> (M, N) bf16.
Straightforward PyTorch on purpose: an fp32 matmul of the exactly-upcast fp8 operands, so the
reference carries no fp8 tensor-core rounding of its own.
"""

from __future__ import annotations

import torch
import torch.nn as nn

M, N, K = 4096, 4096, 4096

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
# randn scaled by 1/2 and clamped: the bulk of the e4m3 grid is used, no value saturates at 448.
INPUT_STD = 0.5


def _to_fp8(t: torch.Tensor) -> torch.Tensor:
    return t.clamp(-FP8_MAX, FP8_MAX).to(FP8)


class Model(nn.Module):
    weight: torch.Tensor
    weight_scale: torch.Tensor

    def __init__(self, M: int, N: int, K: int) -> None:
        super().__init__()
        self.M, self.N, self.K = M, N, K
        self.register_buffer("weight", _to_fp8(torch.randn(N, K) * INPUT_STD))
        # Per-channel scale ~ 1/(std_x * std_w * sqrt(K)) so outputs are O(1), spread over [0.5, 1.5].
        scale = (0.5 + torch.rand(N)) / (INPUT_STD * INPUT_STD * K**0.5)
        self.register_buffer("weight_scale", scale.to(torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = x.float() @ self.weight.float().T
        return (acc * self.weight_scale).to(torch.bfloat16)


def get_inputs() -> list:
    # Drawn as (K, M) and transposed: the grader reseeds before Model(...) and before get_inputs(),
    # and a same-shaped (M, K) draw would make x == weight when M == N (a diagonal of squares).
    return [_to_fp8(torch.randn(K, M).T.contiguous() * INPUT_STD)]


def get_init_inputs() -> list:
    return [M, N, K]
