"""The deck's interface: files, problem.yaml schema and table values, constructors, state_dict
names/dtypes, get_inputs order/shapes/dtypes for every SMALL shape and every graded shape (the
graded ones on the meta device: shapes and dtypes without allocating gigabytes)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.kernels import deck

BF16, FP32, I32, I64, U8, FP8 = torch.bfloat16, torch.float32, torch.int32, torch.int64, torch.uint8, torch.float8_e4m3fn
DECK_FILES = ("PROMPT.txt", "problem.yaml", "reference.py", "check.py", "benchmark.py", "shapes.py", "sota.py")

# The spec's hard-deck table: tolerance, forbidden ops, regime.
TABLE: dict[str, dict[str, Any]] = {
    "01_fp8_gemm": {"tol": 0.2, "regime": "compute", "precision": "fp8",
                    "forbidden": ["torch._scaled_mm", "torch.ops.aten._scaled_mm"]},
    "02_kda_cutlass": {"tol": 0.05, "regime": "compute", "precision": "bf16",
                       "forbidden": ["fla.ops.kda", "fla.ops.chunk_kda", "chunk_kda", "fused_recurrent_kda",
                                     "naive_chunk_kda", "naive_recurrent_kda"]},
    "03_paged_attention": {"tol": 0.02, "regime": "memory", "precision": "bf16",
                           "forbidden": ["vllm.attention", "flashinfer.batch_decode_with_paged_kv_cache",
                                         "flashinfer.decode", "scaled_dot_product_attention"]},
    "05_topk_bitonic": {"tol": 1e-4, "regime": "memory", "precision": "fp32",
                        "forbidden": ["torch.topk", "torch.kthvalue", "torch.sort", "torch.argsort", "Tensor.topk",
                                      "Tensor.kthvalue", "Tensor.sort", "Tensor.argsort", "torch.ops.aten.topk",
                                      "torch.ops.aten.sort", "torch.ops.aten.kthvalue"]},
    "06_sonic_moe_swiglu": {"tol": 0.02, "regime": "compute", "precision": "bf16",
                            "forbidden": ["torch.matmul", "torch.bmm", "torch.nn.functional.linear", "F.linear",
                                          "sonic_moe"]},
    "07_w4a16_gemm": {"tol": 0.10, "regime": "memory", "precision": "bf16",
                      "forbidden": ["bitsandbytes.functional.dequantize_4bit", "bitsandbytes.functional.gemv_4bit",
                                    "marlin_kernel.gemm", "torch.nn.functional.linear"]},
}

GRADED_SHAPES = {
    "01_fp8_gemm": [(4096, 4096, 4096), (4096, 4096, 4127), (32, 8192, 8192), (4096, 14336, 4096)],
    "02_kda_cutlass": [(2, 1024, 8, 128, 128), (2, 2048, 8, 128, 128), (1, 4096, 8, 128, 128), (1, 2048, 4, 128, 128)],
    "03_paged_attention": [(8, 32, 8, 128, 1024), (32, 32, 8, 128, 2048), (4, 64, 8, 128, 4096),
                           (16, 32, 8, 128, 1535), (8, 16, 4, 64, 2000)],
    "05_topk_bitonic": [(1, 131072, 64), (64, 8192, 8), (32, 16384, 32), (16, 12000, 16), (128, 4096, 1)],
    "06_sonic_moe_swiglu": [(32768, 4096, 1536, 128, 8), (4096, 2048, 1024, 64, 4), (16384, 2048, 4096, 64, 8)],
    "07_w4a16_gemm": [(1, 12288, 4096), (32, 12288, 4096), (256, 12288, 4096), (1, 4096, 4096), (16, 14336, 4096)],
}


def expected_io(problem: str, s: dict[str, int]) -> tuple[dict[str, tuple[tuple[int, ...], torch.dtype]], list]:
    """(state_dict entries, get_inputs [(shape, dtype)]) from the spec table, by shape arithmetic."""
    if problem == "01_fp8_gemm":
        m, n, k = s["M"], s["N"], s["K"]
        return {"weight": ((n, k), FP8), "weight_scale": ((n,), FP32)}, [((m, k), FP8)]
    if problem == "02_kda_cutlass":
        b, t, h, k, v = s["B"], s["T"], s["H"], s["K"], s["V"]
        return {}, [((b, t, h, k), BF16), ((b, t, h, k), BF16), ((b, t, h, v), BF16), ((b, t, h, k), FP32),
                    ((b, t, h), BF16)]
    if problem == "03_paged_attention":
        b, h, hkv, d, L = s["BATCH"], s["NUM_HEADS"], s["NUM_KV_HEADS"], s["HEAD_DIM"], s["SEQ_LEN"]
        pages = -(-L // 16)
        return {}, [((b, h, d), BF16), ((b * pages, 16, hkv, 2 * d), BF16), ((b, pages), I32), ((b,), I32)]
    if problem == "05_topk_bitonic":
        return {"_dummy": ((1,), FP32)}, [((s["BATCH"], s["N"]), FP32)]
    if problem == "06_sonic_moe_swiglu":
        t, h, i, e, k = s["T_TOTAL"], s["H"], s["I"], s["E"], s["K"]
        return {"W_gate": ((e, h, i), BF16), "W_up": ((e, h, i), BF16)}, [((t * k, h), BF16), ((e + 1,), I32)]
    m, n, k = s["M"], s["N"], s["K"]
    return ({"w_q": ((k // 2, n), U8), "scales": ((k // 128, n), BF16), "zeros": ((k // 128, n), BF16)},
            [((m, k), BF16)])


@pytest.mark.parametrize("problem", deck.PROBLEMS)
def test_deck_files_present(problem: str) -> None:
    folder = deck.DECK / problem
    for name in DECK_FILES:
        assert (folder / name).is_file(), name
    assert deck.examples(problem, "broken_"), "every problem needs a broken example"
    assert deck.examples(problem, "genuine_"), "every problem needs a genuine example"
    for example in (folder / "examples").glob("*.py"):
        first = example.read_text(encoding="utf-8").split("\n", 1)[0]
        assert first.startswith('"""') and len(first) > 20, f"{example.name}: docstring first line says what it is"
        if example.name.startswith("genuine_"):
            assert "must PASS" in first, example.name
        if example.name.startswith("broken_"):
            assert "must FAIL" in first, example.name


@pytest.mark.parametrize("problem", ("01_fp8_gemm", "05_topk_bitonic", "07_w4a16_gemm"))
def test_triton_problems_have_a_genuine_triton_example(problem: str) -> None:
    path = deck.DECK / problem / "examples" / "genuine_triton.py"
    assert "@triton.jit" in path.read_text(encoding="utf-8")


@pytest.mark.parametrize("problem", deck.PROBLEMS)
def test_problem_yaml_follows_the_contract_and_the_table(problem: str) -> None:
    y = deck.problem_yaml(problem)
    row = TABLE[problem]
    assert y["id"] == problem
    assert y["regime"] == row["regime"] and y["precision"] == row["precision"]
    assert y["tolerance"] == {"atol": row["tol"], "rtol": row["tol"]}
    assert y["forbidden"] == row["forbidden"]
    assert y["output"] == ("topk" if problem == "05_topk_bitonic" else "tensor")
    assert y["required_framework"] is None and y["allows_lower_precision"] is False
    assert y["perf"]["warmup"] == 10 and y["perf"]["trials"] >= 10
    assert y["timeouts"]["check"] == (7200 if problem == "02_kda_cutlass" else 1800)
    assert y["timeouts"]["benchmark"] == 1800
    assert isinstance(y["flops"], str) and isinstance(y["bytes"], str)
    assert (y["property_cases"] > 0) == (problem in deck.PROPERTY_PROBLEMS)
    stress = y["numeric_stress"]
    assert len(stress) >= 2 and len({c["name"] for c in stress}) == len(stress)
    for c in stress:
        assert set(c) == {"name", "scale_inputs", "scale_state", "atol", "rtol"}, c
        assert c["scale_inputs"] or c["scale_state"]


@pytest.mark.parametrize("problem", deck.PROBLEMS)
def test_graded_shapes_are_the_tables(problem: str) -> None:
    s = deck.shapes(problem)
    assert [tuple(d.values()) for d in s.SHAPES] == GRADED_SHAPES[problem]
    assert s.SMALL_SHAPES and all(d.keys() == s.SHAPES[0].keys() for d in s.SMALL_SHAPES)
    ref = deck.reference(problem)
    for key in s.SHAPES[0]:
        assert key.isupper() and isinstance(getattr(ref, key), int), key


@pytest.mark.parametrize("problem", deck.PROBLEMS)
def test_formulas_evaluate_through_the_grader(problem: str) -> None:
    from graders.problem import load_problem

    spec = load_problem(deck.DECK / problem)
    for shape in spec.shapes + spec.small_shapes:
        assert spec.flops(shape) > 0 and spec.bytes(shape) > 0
    first = spec.shapes[0]
    expected_flops = {
        "01_fp8_gemm": 2 * 4096**3,
        "02_kda_cutlass": 2 * 1024 * 8 * (64 * (5 * 128 + 3 * 128) + 6 * 128 * 128),
        "03_paged_attention": 4 * 8 * 32 * 1024 * 128,
        "05_topk_bitonic": 131072,
        "06_sonic_moe_swiglu": 4 * 32768 * 8 * 4096 * 1536,
        "07_w4a16_gemm": 2 * 12288 * 4096,
    }[problem]
    assert spec.flops(first) == expected_flops


def _check_io(problem: str, shape: dict[str, int], device: str | None) -> None:
    ref = deck.reference(problem)
    deck.apply_shape(ref, shape)
    state_expected, inputs_expected = expected_io(problem, shape)
    torch.manual_seed(0)
    if device == "meta":
        with torch.device("meta"):
            model = ref.Model(*ref.get_init_inputs())
            inputs = ref.get_inputs()
    else:
        model = ref.Model(*ref.get_init_inputs())
        inputs = ref.get_inputs()
    state = {k: (tuple(v.shape), v.dtype) for k, v in model.state_dict().items()}
    assert state == state_expected
    assert [(tuple(x.shape), x.dtype) for x in inputs] == inputs_expected
    if problem in ("02_kda_cutlass", "03_paged_attention"):
        buffers = dict(model.named_buffers())
        assert "_dummy" in buffers and "_dummy" not in model.state_dict()  # non-persistent
    if device != "meta":
        assert all(x.device.type == "cpu" for x in inputs)


@pytest.mark.parametrize(
    ("problem", "index"), [(p, i) for p in deck.PROBLEMS for i in range(len(GRADED_SHAPES[p]))]
)
def test_graded_shapes_build_on_meta(problem: str, index: int) -> None:
    _check_io(problem, deck.shapes(problem).SHAPES[index], "meta")


@pytest.mark.parametrize("problem", deck.PROBLEMS)
def test_small_shapes_build_on_cpu(problem: str) -> None:
    for shape in deck.shapes(problem).SMALL_SHAPES:
        _check_io(problem, shape, None)


@pytest.mark.parametrize("problem", deck.PROBLEMS)
def test_inputs_and_weights_are_deterministic_under_the_global_seed(problem: str) -> None:
    ref = deck.reference(problem)
    deck.apply_shape(ref, deck.shapes(problem).SMALL_SHAPES[0])
    _, m1, in1 = deck.build(ref, 123, "cpu")
    _, m2, in2 = deck.build(ref, 123, "cpu")
    _, _, in3 = deck.build(ref, 124, "cpu")
    for a, b in zip(in1, in2, strict=True):
        assert torch.equal(a.view(torch.uint8) if a.dtype == FP8 else a, b.view(torch.uint8) if b.dtype == FP8 else b)
    for k, v in m1.state_dict().items():
        assert torch.equal(v.view(torch.uint8) if v.dtype == FP8 else v,
                           m2.state_dict()[k].view(torch.uint8) if v.dtype == FP8 else m2.state_dict()[k])
    first = [x.float() for x in (in1[0], in3[0])]
    assert not torch.equal(*first), "another seed must give other inputs"


@pytest.mark.parametrize("problem", deck.PROBLEMS)
def test_entry_points_are_thin(problem: str) -> None:
    folder = deck.DECK / problem
    assert "check_main(Path(__file__).resolve().parent)" in (folder / "check.py").read_text(encoding="utf-8")
    assert "bench_main(Path(__file__).resolve().parent)" in (folder / "benchmark.py").read_text(encoding="utf-8")


@pytest.mark.parametrize("problem", deck.PROBLEMS)
def test_sota_shares_the_interface(problem: str) -> None:
    ref = deck.reference(problem)
    shape = deck.shapes(problem).SMALL_SHAPES[0]
    deck.apply_shape(ref, shape)
    init, model, inputs = deck.build(ref, 5, "cpu")
    sota = deck.load_module(deck.DECK / problem / "sota.py").Model(*init)
    sota.load_state_dict(model.state_dict(), strict=True)
    if problem == "03_paged_attention":
        return  # SDPA with a boolean mask + GQA: covered on CUDA by the GPU tests
    tol = deck.cases(problem)[0]
    with torch.no_grad():
        assert deck.compare(problem, sota(*inputs), model(*inputs), inputs[0], tol.atol, tol.rtol) is None


def test_prompts_state_the_interface() -> None:
    for problem in deck.PROBLEMS:
        text = (deck.DECK / problem / "PROMPT.txt").read_text(encoding="utf-8")
        assert "solution.py" in text and "class Model" in text and "check.py" in text, problem
        assert "caching" in text and "strict=True" in text, problem


def test_deck_has_only_the_six_problems() -> None:
    assert sorted(p.name for p in deck.DECK.iterdir() if p.is_dir()) == sorted(deck.PROBLEMS)
