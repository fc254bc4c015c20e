"""bench/preflight_compile.py: a solution's Triton kernels compiled for sm_90 on the CPU, per graded shape.

The lane tool that tells, before any GPU time is spent, that a kernel will sit in its compile: the
corpus case that hung at `check: shape 0` for 500 s on the H100 (2026-12-06) is rebuilt here in its
old form and does not finish; its current form compiles at every graded shape.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.preflight_compile import preflight

REPO = Path(__file__).resolve().parents[2]
DECK = REPO / "kernels" / "hard"
CASE = REPO / "tests" / "corpus" / "sources" / "dead_evict_last_branch" / "solution.py"

# The case's old kernel: one program per row holds the whole row (BLOCK = next_pow2(n)) and unrolls
# K extraction rounds; at n = 131072, K = 64 the compile does not end in minutes.
ONE_BLOCK = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_topk(x_ptr, v_ptr, i_ptr, n, stride, K: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + offs, mask=offs < n, other=float("-inf"))
    for j in tl.static_range(K):
        m = tl.max(x, axis=0)
        at = tl.min(tl.where(x == m, offs, BLOCK), axis=0)
        tl.store(v_ptr + row * K + j, m)
        tl.store(i_ptr + row * K + j, at.to(tl.int64))
        x = tl.where(offs == at, float("-inf"), x)


class Model(nn.Module):
    def __init__(self, batch, n, k):
        super().__init__()
        self.k = k
        self.register_buffer("_dummy", torch.zeros(1))

    def forward(self, x):
        b, n = x.shape
        v = torch.empty(b, self.k, device=x.device)
        i = torch.empty(b, self.k, device=x.device, dtype=torch.int64)
        _row_topk[(b,)](x, v, i, n, x.stride(0), K=self.k, BLOCK=triton.next_power_of_2(n))
        return v, i
'''


@pytest.fixture(autouse=True)
def _fusion_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9 warns when it is unset
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


def test_the_current_case_compiles_for_sm90_at_every_graded_shape() -> None:
    rows = preflight(CASE, DECK, "05_topk_bitonic", limit_s=240)
    assert [r["shape_index"] for r in rows] == list(range(5))
    for row in rows:
        assert row["finished"] and row["error"] is None, row
        assert sorted({launch["kernel"].rsplit(".", 1)[-1] for launch in row["launches"]}) == \
            ["_chunk_topk", "_merge_topk"], row
        # the dead branch stays dead at the call site: EVICT=False reaches the compiler
        assert all(launch["constexprs"].get("EVICT") is False for launch in row["launches"]
                   if launch["kernel"].endswith("_chunk_topk")), row


def test_a_kernel_whose_compile_does_not_end_is_reported_unfinished(tmp_path: Path) -> None:
    sol = tmp_path / "solution.py"
    sol.write_text(ONE_BLOCK)
    small = preflight(sol, DECK, "05_topk_bitonic", limit_s=240, shapes=[4])  # n = 4096, K = 1: compiles
    assert small[0]["finished"] and [launch["kernel"].rsplit(".", 1)[-1] for launch in small[0]["launches"]] == \
        ["_row_topk"], small
    big = preflight(sol, DECK, "05_topk_bitonic", limit_s=10, shapes=[0])  # n = 131072, K = 64
    assert not big[0]["finished"] and big[0]["launches"] == [], big


def test_a_forward_that_needs_cuda_is_reported_not_hidden(tmp_path: Path) -> None:
    sol = tmp_path / "solution.py"
    sol.write_text(ONE_BLOCK.replace("b, n = x.shape", "torch.cuda.current_device()\n        b, n = x.shape"))
    row = preflight(sol, DECK, "05_topk_bitonic", limit_s=240, shapes=[4])[0]
    assert row["finished"] and row["launches"] == [] and row["error"], row
