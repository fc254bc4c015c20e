"""Every reference against an independent float64 formulation at small shapes (CPU)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.kernels import deck

BF16_ULP = 2.0**-8  # relative spacing of bf16 (the outputs' final rounding)


def _close(out: torch.Tensor, expected64: torch.Tensor, rel: float, abs_: float) -> None:
    diff = (out.double() - expected64).abs()
    bound = abs_ + rel * expected64.abs()
    assert bool((diff <= bound).all()), f"max_abs_diff={float(diff.max()):.3g}"


def _small(problem: str) -> list[dict]:
    return list(deck.shapes(problem).SMALL_SHAPES)


@pytest.mark.parametrize("shape", _small("01_fp8_gemm"), ids=str)
def test_fp8_gemm_matches_float64(shape: dict) -> None:
    ref = deck.reference("01_fp8_gemm")
    deck.apply_shape(ref, shape)
    _, model, (x,) = deck.build(ref, 7, "cpu")
    out = model(x)
    assert out.dtype == torch.bfloat16 and out.shape == (shape["M"], shape["N"])
    expected = (x.double() @ model.weight.double().T) * model.weight_scale.double()
    _close(out, expected, BF16_ULP, 1e-6)


def kda_float64_recurrence(q, k, v, g, beta) -> torch.Tensor:
    """The gated delta rule one step at a time, in float64 (fla's naive recurrent semantics)."""
    q, k, v, g, beta = (t.double() for t in (q, k, v, g, beta))
    b, t, h, dk = q.shape
    state = torch.zeros(b, h, dk, v.shape[-1], dtype=torch.float64)
    out = torch.zeros(b, t, h, v.shape[-1], dtype=torch.float64)
    for i in range(t):
        state = state * g[:, i].exp()[..., None]
        err = v[:, i] - torch.einsum("bhk,bhkv->bhv", k[:, i], state)
        state = state + torch.einsum("bhk,bhv->bhkv", beta[:, i, :, None] * k[:, i], err)
        out[:, i] = torch.einsum("bhk,bhkv->bhv", q[:, i] * dk**-0.5, state)
    return out


@pytest.mark.parametrize("shape", _small("02_kda_cutlass"), ids=str)
def test_kda_chunked_matches_float64_recurrence(shape: dict) -> None:
    ref = deck.reference("02_kda_cutlass")
    deck.apply_shape(ref, shape)
    _, model, inputs = deck.build(ref, 7, "cpu")
    expected = kda_float64_recurrence(*inputs)
    out32 = ref.kda_chunked_fp32(*inputs, ref.CHUNK_SIZE)
    _close(out32, expected, 1e-5, 1e-5)  # the chunked form is exact up to fp32 rounding
    out = model(*inputs)
    assert out.dtype == torch.bfloat16 and out.shape == inputs[2].shape
    _close(out, expected, BF16_ULP, 1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_kda_property_cases_match_float64_and_any_chunk_size(seed: int) -> None:
    ref = deck.reference("02_kda_cutlass")
    _, inputs = ref.make_property_case(seed)
    expected = kda_float64_recurrence(*inputs)
    for chunk in (16, 64):  # the chunk size changes the schedule, never the result
        _close(ref.kda_chunked_fp32(*inputs, chunk), expected, 1e-5, 1e-5)


def paged_float64(query, kv_cache, block_table, seq_lens) -> torch.Tensor:
    """Dense attention over the K/V rows gathered token by token through block_table."""
    b, h, d = query.shape
    page, hkv = kv_cache.shape[1], kv_cache.shape[2]
    out = torch.zeros(b, h, d, dtype=torch.float64)
    for i in range(b):
        n = int(seq_lens[i])
        rows = torch.stack([kv_cache[int(block_table[i, t // page]), t % page] for t in range(n)]).double()
        for j in range(h):
            kvh = j // (h // hkv)
            scores = rows[:, kvh, :d] @ query[i, j].double() / math.sqrt(d)
            out[i, j] = torch.softmax(scores, dim=0) @ rows[:, kvh, d:]
    return out


@pytest.mark.parametrize("shape", _small("03_paged_attention"), ids=str)
def test_paged_attention_matches_dense_float64(shape: dict) -> None:
    ref = deck.reference("03_paged_attention")
    deck.apply_shape(ref, shape)
    _, model, inputs = deck.build(ref, 7, "cpu")
    out = model(*inputs)
    assert out.dtype == torch.bfloat16 and out.shape == inputs[0].shape
    expected = paged_float64(*inputs)
    _close(ref.paged_attention_fp32(*inputs), expected, 1e-5, 1e-6)
    _close(out, expected, BF16_ULP, 1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_paged_attention_property_cases_match_dense_float64(seed: int) -> None:
    ref = deck.reference("03_paged_attention")
    _, inputs = ref.make_property_case(seed)
    _close(ref.paged_attention_fp32(*inputs), paged_float64(*inputs), 1e-5, 1e-6)


def topk_float64(x: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest values per row from a full float64 descending sort."""
    return torch.sort(x.double(), dim=-1, descending=True).values[:, :k]


@pytest.mark.parametrize("shape", _small("05_topk_bitonic"), ids=str)
def test_topk_matches_sorted_float64(shape: dict) -> None:
    ref = deck.reference("05_topk_bitonic")
    deck.apply_shape(ref, shape)
    _, model, (x,) = deck.build(ref, 7, "cpu")
    values, indices = model(x)
    assert values.dtype == torch.float32 and indices.dtype == torch.int64
    assert torch.equal(values.double(), topk_float64(x, shape["K"]))
    assert torch.equal(x.gather(1, indices), values)


@pytest.mark.parametrize("seed", range(10))
def test_topk_property_cases_match_sorted_float64(seed: int) -> None:
    ref = deck.reference("05_topk_bitonic")
    shape, (x,) = ref.make_property_case(seed)
    values, indices = ref.Model(*shape.values())(x)
    assert torch.equal(values.double(), topk_float64(x, shape["K"]))
    assert torch.equal(x.gather(1, indices), values)


def moe_float64(hidden, offsets, w_gate, w_up) -> torch.Tensor:
    """Row by row: find the row's expert from the offsets, SwiGLU in float64."""
    offs = offsets.tolist()
    out = torch.zeros(hidden.shape[0], w_gate.shape[2], dtype=torch.float64)
    for r in range(hidden.shape[0]):
        e = next(i for i in range(len(offs) - 1) if offs[i] <= r < offs[i + 1])
        x = hidden[r].double()
        out[r] = F.silu(x @ w_gate[e].double()) * (x @ w_up[e].double())
    return out


@pytest.mark.parametrize("shape", _small("06_sonic_moe_swiglu"), ids=str)
def test_moe_swiglu_matches_per_row_float64(shape: dict) -> None:
    ref = deck.reference("06_sonic_moe_swiglu")
    deck.apply_shape(ref, shape)
    _, model, inputs = deck.build(ref, 7, "cpu")
    out = model(*inputs)
    assert out.dtype == torch.bfloat16 and out.shape == (shape["T_TOTAL"] * shape["K"], shape["I"])
    _close(out, moe_float64(*inputs, model.W_gate, model.W_up), BF16_ULP, 1e-5)


@pytest.mark.parametrize("seed", range(6))
def test_moe_property_cases_match_per_row_float64(seed: int) -> None:
    ref = deck.reference("06_sonic_moe_swiglu")
    shape, inputs = ref.make_property_case(seed)
    deck.apply_shape(ref, shape)
    torch.manual_seed(seed)
    model = ref.Model(*ref.get_init_inputs())
    _close(model(*inputs), moe_float64(*inputs, model.W_gate, model.W_up), BF16_ULP, 1e-5)


@pytest.mark.parametrize("shape", _small("07_w4a16_gemm"), ids=str)
def test_w4a16_matches_float64_dequant_matmul(shape: dict) -> None:
    ref = deck.reference("07_w4a16_gemm")
    deck.apply_shape(ref, shape)
    _, model, (x,) = deck.build(ref, 7, "cpu")
    out = model(x)
    assert out.dtype == torch.bfloat16 and out.shape == (shape["M"], shape["N"])
    packed = model.w_q.long()
    codes = torch.empty(2 * packed.shape[0], packed.shape[1], dtype=torch.long)
    codes[0::2] = packed & 0xF  # low nibble = even k
    codes[1::2] = packed >> 4
    group = torch.arange(codes.shape[0]) // model.group_size
    # the spec rounds the dequantised weight to bf16 once; do the same, then multiply in float64
    w = ((codes.double() - model.zeros.double()[group]) * model.scales.double()[group]).bfloat16().double()
    _close(out, x.double() @ w, BF16_ULP, 1e-4)
