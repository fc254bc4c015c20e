"""MoE up-projection with fused SwiGLU over expert-sorted tokens (grouped GEMM): the reference.

hidden (T_total*K, H) bf16 holds the routed token copies sorted by expert; expert_offsets (E+1,)
int32 is non-decreasing with offsets[0] = 0 and offsets[E] = T_total*K: rows
offsets[e]:offsets[e+1] belong to expert e (possibly none). Per expert, with W_gate[e], W_up[e]
of shape (H, I):
    out[rows] = silu(hidden[rows] @ W_gate[e]) * (hidden[rows] @ W_up[e])      -> (rows, I) bf16
The GEMMs accumulate in fp32 and stay fp32 (no bf16 rounding of gate/up) for the SwiGLU, which
runs in fp32; only the product is rounded to bf16. On CUDA that is cuBLAS's bf16 GEMM with an fp32
output (torch.mm(..., out_dtype=torch.float32)); on a CPU an fp32 GEMM of the upcast operands.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

T_TOTAL, H, I, E, K = 32768, 4096, 1536, 128, 8


def _gemm_fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """bf16 x bf16 -> fp32 product with fp32 accumulation, never rounded to bf16."""
    if a.is_cuda:
        try:
            return torch.mm(a, b, out_dtype=torch.float32)
        except (TypeError, RuntimeError, NotImplementedError):  # a torch without aten::mm.dtype
            return torch.matmul(a, b).float()  # bf16-rounded GEMM output: within 2^-8 relative
    return torch.matmul(a.float(), b.float())


class Model(nn.Module):
    def __init__(self, T_total: int, H: int, I: int, E: int, K: int) -> None:
        super().__init__()
        self.T_total, self.H, self.I, self.E, self.K = T_total, H, I, E, K
        std = H**-0.5  # keeps h @ W ~ N(0, 1) for unit-variance hidden states
        self.W_gate = nn.Parameter(torch.randn(E, H, I, dtype=torch.bfloat16) * std, requires_grad=False)
        self.W_up = nn.Parameter(torch.randn(E, H, I, dtype=torch.bfloat16) * std, requires_grad=False)

    def forward(self, hidden: torch.Tensor, expert_offsets: torch.Tensor) -> torch.Tensor:
        out = torch.empty(hidden.shape[0], self.W_gate.shape[2], device=hidden.device, dtype=torch.bfloat16)
        bounds = expert_offsets.tolist()
        for e in range(self.W_gate.shape[0]):
            lo, hi = bounds[e], bounds[e + 1]
            if hi == lo:
                continue
            rows = hidden[lo:hi]
            gate = _gemm_fp32(rows, self.W_gate[e])
            up = _gemm_fp32(rows, self.W_up[e])
            out[lo:hi] = (F.silu(gate) * up).to(torch.bfloat16)
        return out


def ragged_offsets(rows: int, experts: int, gen: torch.Generator | None = None, skew: float = 0.5) -> torch.Tensor:
    """Expert offsets of a routed batch: per-expert loads drawn from a skewed multinomial."""
    probs = torch.softmax(torch.randn(experts, generator=gen) * skew, dim=0)
    choice = torch.multinomial(probs, rows, replacement=True, generator=gen)
    # index_add_ rather than bincount: a static output shape (also traceable on the meta device)
    counts = torch.zeros(experts, dtype=torch.int64).index_add_(0, choice, torch.ones_like(choice))
    offsets = torch.zeros(experts + 1, dtype=torch.int64)
    offsets[1:] = counts.cumsum(0)
    return offsets.to(torch.int32)


def get_inputs() -> list:
    rows = T_TOTAL * K
    hidden = torch.randn(rows, H, dtype=torch.bfloat16)
    return [hidden, ragged_offsets(rows, E)]


def get_init_inputs() -> list:
    return [T_TOTAL, H, I, E, K]


def make_property_case(seed: int) -> tuple[dict, list]:
    """Small ragged routing: empty experts (first, last, runs of them), one expert taking all rows,
    row counts off any tile grid."""
    gen = torch.Generator().manual_seed(seed)

    def pick(options: list[int]) -> int:
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    shape = {"T_TOTAL": pick([1, 3, 17, 40]), "H": pick([16, 32, 64]), "I": pick([16, 24, 48]),
             "E": pick([1, 2, 5, 8]), "K": pick([1, 2, 4])}
    rows, e = shape["T_TOTAL"] * shape["K"], shape["E"]
    mode = pick([0, 1, 2])
    if mode == 0:  # very skewed loads: many experts get nothing
        offsets = ragged_offsets(rows, e, gen, skew=4.0)
    elif mode == 1:  # everything on one expert, the rest empty
        offsets = torch.zeros(e + 1, dtype=torch.int32)
        offsets[1 + int(torch.randint(e, (1,), generator=gen)) :] = rows
    else:  # random cut points (duplicates give empty experts)
        cuts = torch.sort(torch.randint(0, rows + 1, (e - 1,), generator=gen)).values
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), cuts, torch.tensor([rows])]).to(torch.int32)
    hidden = torch.randn(rows, shape["H"], generator=gen, dtype=torch.bfloat16)
    return shape, [hidden, offsets]
