"""Kimi Delta Attention (KDA) forward: the gated delta rule with per-key-channel decay (reference).

Semantics (fla's naive recurrent KDA), per batch b and head h, state S (K, V) in fp32 from zero:
    S   = S * exp(g_t)[:, None]                      # per-key-channel decay, g_t <= 0
    S  += beta_t * k_t (v_t - k_t^T S)^T             # delta-rule correction against the decayed state
    o_t = (q_t * K**-0.5)^T S
Inputs q, k (B, T, H, K) bf16, v (B, T, H, V) bf16, g (B, T, H, K) fp32 log-decay, beta (B, T, H)
bf16 -> o (B, T, H, V) bf16.

Computed in the exactly equivalent chunked (WY) form with chunks of `chunk_size` steps, in fp32:
inside a chunk with in-chunk cumulative gate G_i = sum_{s<=i} g_s and chunk-start state S0,
    A_ij  = k_i . (exp(G_i - G_j) * k_j)              (j < i)
    delta = (I + diag(beta) A)^-1 diag(beta) (v - (exp(G) * k) S0)
    o_i   = (q_i * exp(G_i)) S0 + sum_{j<=i} (q_i . exp(G_i - G_j) * k_j) delta_j
    S_end = exp(G_C) * S0 + sum_j (exp(G_C - G_j) * k_j) delta_j^T
The pairwise decays exp(G_i - G_j) are formed per chunk (never as exp(G_i) * exp(-G_j)), so no
intermediate overflows whatever the decay strength. T need not be a multiple of the chunk: the
tail is zero-padded (g = 0, k = v = beta = 0), which leaves every real step unchanged.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

B, T, H, K, V = 2, 1024, 8, 128, 128
CHUNK_SIZE = 64


def kda_chunked_fp32(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor, chunk_size: int
) -> torch.Tensor:
    """The chunked-form KDA forward (see the module docstring); returns (B, T, H, V) fp32."""
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    c = chunk_size
    pad = (-t) % c
    # (B, H, T, D) fp32
    qf, kf, vf, gf = (x.transpose(1, 2).float() for x in (q, k, v, g))
    bf = beta.transpose(1, 2).float()
    qf = qf * dk**-0.5
    if pad:
        qf, kf, vf, gf = (F.pad(x, (0, 0, 0, pad)) for x in (qf, kf, vf, gf))
        bf = F.pad(bf, (0, pad))
    nt = (t + pad) // c
    qf, kf, gf = (x.reshape(b, h, nt, c, dk) for x in (qf, kf, gf))
    vf = vf.reshape(b, h, nt, c, dv)
    bf = bf.reshape(b, h, nt, c)
    G = gf.cumsum(dim=3)
    causal = torch.ones(c, c, dtype=torch.bool, device=q.device).tril()  # j <= i
    strict = causal.clone().fill_diagonal_(False)  # j < i
    eye = torch.eye(c, device=q.device)
    S = q.new_zeros((b, h, dk, dv), dtype=torch.float32)
    out = torch.empty((b, h, nt, c, dv), device=q.device, dtype=torch.float32)
    for n in range(nt):
        Gn, kn, qn, vn, bn = G[:, :, n], kf[:, :, n], qf[:, :, n], vf[:, :, n], bf[:, :, n]
        diff = Gn[:, :, :, None, :] - Gn[:, :, None, :, :]  # (b, h, i, j, dk): G_i - G_j
        decay = torch.exp(diff.masked_fill(~causal[:, :, None], float("-inf")))
        kj_decayed = decay * kn[:, :, None, :, :]  # exp(G_i - G_j) * k_j, zero for j > i
        A = (kn[:, :, :, None, :] * kj_decayed).sum(-1).masked_fill(~strict, 0.0)
        Aqk = (qn[:, :, :, None, :] * kj_decayed).sum(-1)  # causal incl. the diagonal
        lower = eye + bn[..., :, None] * A
        rhs = bn[..., None] * (vn - (torch.exp(Gn) * kn) @ S)
        delta = torch.linalg.solve_triangular(lower, rhs, upper=False, unitriangular=True)
        out[:, :, n] = (qn * torch.exp(Gn)) @ S + Aqk @ delta
        g_last = Gn[:, :, -1:, :]  # (b, h, 1, dk)
        k_to_end = torch.exp(g_last - Gn) * kn  # (b, h, c, dk)
        S = torch.exp(g_last).transpose(-1, -2) * S + k_to_end.transpose(-1, -2) @ delta
    o = out.reshape(b, h, nt * c, dv)[:, :, :t]
    return o.transpose(1, 2)


class Model(nn.Module):
    def __init__(self, B: int, T: int, H: int, K: int, V: int, chunk_size: int = 64) -> None:
        super().__init__()
        self.B, self.T, self.H, self.K, self.V = B, T, H, K, V
        self.chunk_size = chunk_size
        # No state: the buffer only gives .to(device) something to move; not in the state_dict.
        self.register_buffer("_dummy", torch.zeros(1), persistent=False)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor
    ) -> torch.Tensor:
        return kda_chunked_fp32(q, k, v, g, beta, self.chunk_size).to(torch.bfloat16)


def make_kda_inputs(b: int, t: int, h: int, dk: int, dv: int, gen: torch.Generator | None = None) -> list:
    """q, k, v, g, beta with the distributions of a trained KDA layer (k unit-norm, g < 0)."""
    q = torch.randn(b, t, h, dk, generator=gen)
    k = F.normalize(torch.randn(b, t, h, dk, generator=gen), p=2.0, dim=-1)
    v = torch.randn(b, t, h, dv, generator=gen)
    g = F.logsigmoid(torch.randn(b, t, h, dk, generator=gen))  # log-decay in (-inf, 0)
    beta = torch.sigmoid(torch.randn(b, t, h, generator=gen))
    return [q.bfloat16(), k.bfloat16(), v.bfloat16(), g.float(), beta.bfloat16()]


def get_inputs() -> list:
    return make_kda_inputs(B, T, H, K, V)


def get_init_inputs() -> list:
    return [B, T, H, K, V, CHUNK_SIZE]


def make_property_case(seed: int) -> tuple[dict, list]:
    """A small ragged case: T off the chunk grid (or a single step), odd head counts, strong decay."""
    gen = torch.Generator().manual_seed(seed)

    def pick(options: list[int]) -> int:
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    t = pick([1, 2, 17, 63, 64, 65, 100, 130])
    shape = {
        "B": pick([1, 2]),
        "T": t,
        "H": pick([1, 2, 3]),
        "K": pick([16, 32]),
        "V": pick([16, 32, 48]),
    }
    inputs = make_kda_inputs(shape["B"], t, shape["H"], shape["K"], shape["V"], gen)
    mode = int(torch.randint(3, (1,), generator=gen))
    if mode == 1:  # near-total forgetting on some channels: exp(g) underflows towards 0
        inputs[3] = inputs[3] * 20.0
    elif mode == 2:  # almost no decay: the state must carry across every chunk boundary
        inputs[3] = inputs[3] * 0.01
    return shape, inputs
