"""Genuine plain-PyTorch KDA (chunked delta rule, explicit forward substitution); must PASS.

An independent write-up of the chunked form: per chunk the decayed key-key and query-key
matrices, then (I + diag(beta) A)^-1 by forward substitution over all chunks at once, then one
serial pass over chunks carrying the fp32 state. No flash-linear-attention code, no triangular
solver, every call from the live inputs.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def _delta_rule_chunks(q, k, v, g, beta, c: int) -> torch.Tensor:
    b, t, h, dk = q.shape
    dv = v.shape[-1]
    pad = (-t) % c
    qf = q.float().permute(0, 2, 1, 3) * dk**-0.5
    kf = k.float().permute(0, 2, 1, 3)
    vf = v.float().permute(0, 2, 1, 3)
    gf = g.float().permute(0, 2, 1, 3)
    bf = beta.float().permute(0, 2, 1)
    if pad:
        qf, kf, vf, gf = (F.pad(x, (0, 0, 0, pad)) for x in (qf, kf, vf, gf))
        bf = F.pad(bf, (0, pad))
    n = (t + pad) // c
    qf, kf, gf = (x.reshape(b, h, n, c, dk) for x in (qf, kf, gf))
    vf = vf.reshape(b, h, n, c, dv)
    bf = bf.reshape(b, h, n, c)
    gc = gf.cumsum(3)
    tri = torch.tril(torch.ones(c, c, dtype=torch.bool, device=q.device))
    akk = torch.empty(b, h, n, c, c, device=q.device)
    aqk = torch.empty(b, h, n, c, c, device=q.device)
    for i in range(n):
        e = gc[:, :, i, :, None, :] - gc[:, :, i, None, :, :]
        e = torch.where(tri[:, :, None], e, torch.full_like(e, -torch.inf)).exp() * kf[:, :, i, None, :, :]
        aqk[:, :, i] = (qf[:, :, i, :, None, :] * e).sum(-1)
        akk[:, :, i] = (kf[:, :, i, :, None, :] * e).sum(-1)
    akk = akk * bf[..., :, None]
    akk = akk * (~torch.eye(c, dtype=torch.bool, device=q.device))  # strictly lower part only
    # X = (I + A)^-1 R by forward substitution, R = beta * [k * exp(G), v]
    rhs = torch.cat([kf * gc.exp(), vf], dim=-1) * bf[..., None]
    x = torch.empty_like(rhs)
    for i in range(c):
        x[..., i, :] = rhs[..., i, :] - torch.einsum("bhnj,bhnjd->bhnd", akk[..., i, :i], x[..., :i, :])
    w, u = x[..., :dk], x[..., dk:]
    state = torch.zeros(b, h, dk, dv, device=q.device)
    out = torch.empty(b, h, n, c, dv, device=q.device)
    for i in range(n):
        delta = u[:, :, i] - w[:, :, i] @ state
        out[:, :, i] = (qf[:, :, i] * gc[:, :, i].exp()) @ state + aqk[:, :, i] @ delta
        last = gc[:, :, i, -1]  # (b, h, dk)
        state = last.exp()[..., None] * state + ((last[:, :, None] - gc[:, :, i]).exp() * kf[:, :, i]).transpose(
            -1, -2
        ) @ delta
    o = out.reshape(b, h, n * c, dv)[:, :, :t].permute(0, 2, 1, 3)
    return o.to(torch.bfloat16).contiguous()


class Model(nn.Module):
    def __init__(self, B: int, T: int, H: int, K: int, V: int, chunk_size: int = 64) -> None:
        super().__init__()
        self.chunk_size = chunk_size
        self.register_buffer("_dummy", torch.zeros(1), persistent=False)

    def forward(self, q, k, v, g, beta):
        return _delta_rule_chunks(q, k, v, g, beta, self.chunk_size)
