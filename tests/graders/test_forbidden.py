"""Forbidden-op scanner: positive and negative fixtures, sidecars, C++ sources, runtime recorder."""

from __future__ import annotations

import textwrap

import pytest
import torch

from graders.forbidden import RuntimeRecord, record_ops, runtime_hits, scan
from graders.sources import collect_sources

from .conftest import SOLUTIONS

FP8 = ["torch._scaled_mm", "torch.ops.aten._scaled_mm"]
TOPK = ["torch.topk", "torch.sort", "torch.argsort", "Tensor.topk", "torch.ops.aten.topk"]
MOE = ["torch.matmul", "torch.bmm", "torch.nn.functional.linear", "F.linear", "sonic_moe"]
KDA = ["fla.ops.kda", "chunk_kda", "fused_recurrent_kda"]


def _ops(src: str, forbidden: list[str], name: str = "solution.py") -> set[tuple[str, int]]:
    return {(h.op, h.line) for h in scan({name: textwrap.dedent(src)}, forbidden)}


POSITIVE = [
    ("plain", "import torch\ny = torch._scaled_mm(a, b)\n", FP8, {("torch._scaled_mm", 2)}),
    ("module alias", "import torch as t\ny = t._scaled_mm(a, b)\n", FP8, {("torch._scaled_mm", 2)}),
    ("from-import alias", "from torch import _scaled_mm as f\ny = f(a, b)\n", FP8,
     {("torch._scaled_mm", 1), ("torch._scaled_mm", 2)}),
    ("getattr concat", 'import torch\nf = getattr(torch, "_scaled" + "_mm")\n', FP8, {("torch._scaled_mm", 2)}),
    ("getattr via name", 'import torch\nn = "_scal"\nn += "ed_mm"\nf = getattr(torch, n)\n', FP8,
     {("torch._scaled_mm", 4)}),
    ("getattr join", 'import torch\nf = getattr(torch, "".join(["_sca", "led", "_mm"]))\n', FP8,
     {("torch._scaled_mm", 2)}),
    ("getattr fstring", 'import torch\np = "_scaled"\nf = getattr(torch, f"{p}_mm")\n', FP8, {("torch._scaled_mm", 3)}),
    ("getattr reversed slice", 'import torch\nf = getattr(torch, "mm_delacs_"[::-1])\n', FP8, {("torch._scaled_mm", 2)}),
    ("ops.aten", "import torch\ny = torch.ops.aten._scaled_mm.default(a, b)\n", FP8, {("torch._scaled_mm", 2)}),
    ("import_module", 'import importlib\nm = importlib.import_module("torch")\ny = m._scaled_mm(a, b)\n', FP8,
     {("torch._scaled_mm", 3)}),
    ("vars subscript", 'import torch\nf = vars(torch)["_scaled_mm"]\n', FP8, {("torch._scaled_mm", 2)}),
    ("eval string", 'import torch\nf = eval("torch." + "_scaled_mm")\n', FP8, {("torch._scaled_mm", 2)}),
    ("load_inline C++", 'src = """\n#include <torch/extension.h>\nauto y = at::_scaled_mm(a, b);\n"""\n', FP8,
     {("torch._scaled_mm", 3)}),
    ("tensor method", "def f(x):\n    return x.topk(3).values\n", TOPK, {("torch.topk", 2)}),
    ("tensor method sort", "def f(x):\n    return x.sort(dim=-1)\n", TOPK, {("torch.sort", 2)}),
    ("F alias", "import torch.nn.functional as F\ny = F.linear(a, w)\n", MOE, {("torch.nn.functional.linear", 2)}),
    ("matmul operator", "def f(a, b):\n    return a @ b\n", MOE, {("torch.matmul", 2)}),
    ("bare module", "import sonic_moe\n", MOE, {("sonic_moe", 1)}),
    ("library module", "from fla.ops.kda import chunk_kda\ny = chunk_kda(q)\n", KDA,
     {("fla.ops.kda", 1), ("chunk_kda", 1), ("fla.ops.kda", 2), ("chunk_kda", 2)}),
]


@pytest.mark.parametrize(("label", "src", "forbidden", "want"), POSITIVE, ids=[p[0] for p in POSITIVE])
def test_scanner_positive(label: str, src: str, forbidden: list[str], want: set[tuple[str, int]]) -> None:
    got = _ops(src, forbidden)
    assert want <= got, (label, got)


NEGATIVE = [
    ("docstring and comment", '"""Never call torch._scaled_mm or x.topk(k) here."""\n# torch._scaled_mm\nimport torch\n',
     FP8 + TOPK),
    ("string that is only printed", 'print("torch._scaled_mm is forbidden")\n', FP8),
    ("C++ comment", 'src = """\n// at::_scaled_mm is forbidden\n/* torch::topk */\nint x = 1;\n"""\n', FP8 + TOPK),
    ("triton sort", "import triton.language as tl\ndef k(x):\n    return tl.sort(x)\n", TOPK),
    ("python list sort", "xs = [3, 1]\nxs.sort()\n", TOPK),
    ("own function named like the op", "def chunk_kda_like(q):\n    return q\n", KDA),
    ("backends flag is not matmul", "import torch\ntorch.backends.cuda.matmul.allow_tf32 = False\n", MOE),
    ("allowed op", "import torch\ny = torch.mm(a, b)\n", FP8 + TOPK),
    ("matmul inside a triton kernel", "import triton\n@triton.jit\ndef k(a, b):\n    return a @ b\n", MOE),
]


@pytest.mark.parametrize(("label", "src", "forbidden"), NEGATIVE, ids=[n[0] for n in NEGATIVE])
def test_scanner_negative(label: str, src: str, forbidden: list[str]) -> None:
    assert _ops(src, forbidden) == set(), label


def test_native_sources_scanned() -> None:
    cu = "// torch::topk in a comment\n#include <torch/extension.h>\nauto r = torch::topk(x, 8);\n"
    hits = scan({"kernel.cu": cu}, TOPK)
    assert {(h.op, h.path, h.line) for h in hits} == {("torch.topk", "kernel.cu", 3)}


def test_sidecar_collection_follows_imports_and_file_names(tmp_path: pytest.TempPathFactory) -> None:
    root = tmp_path  # type: ignore[assignment]
    (root / "scratch").mkdir()  # type: ignore[operator]
    (root / "solution.py").write_text(  # type: ignore[operator]
        "import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), 'scratch'))\n"
        "import helper\nfrom torch.utils.cpp_extension import load\nm = load('k', sources=['scratch/k.cu'])\n"
    )
    (root / "scratch" / "helper.py").write_text("import torch\nf = torch._scaled_mm\n")  # type: ignore[operator]
    (root / "scratch" / "k.cu").write_text('#include "k.cuh"\n')  # type: ignore[operator]
    (root / "scratch" / "k.cuh").write_text("auto y = at::_scaled_mm(a, b);\n")  # type: ignore[operator]
    (root / "other_example.py").write_text("import torch\ntorch._scaled_mm\n")  # type: ignore[operator]
    sources = collect_sources(root / "solution.py")  # type: ignore[operator]
    assert set(sources) == {"solution.py", "scratch/helper.py", "scratch/k.cu", "scratch/k.cuh"}
    hits = scan(sources, FP8)
    assert {(h.path, h.line) for h in hits} == {("scratch/helper.py", 2), ("scratch/k.cuh", 1)}


def test_sidecar_fixture_sources_exclude_unused_sibling() -> None:
    sources = collect_sources(SOLUTIONS / "topk" / "helper_sidecar" / "solution.py")
    assert set(sources) == {"solution.py", "helpers.py"}
    # Static analysis cannot fold bytes(...).decode(): only the runtime recorder sees this one.
    assert scan(sources, TOPK) == []


def test_runtime_recorder_catches_indirect_op() -> None:
    def helper(x: torch.Tensor) -> object:
        return getattr(torch, bytes([116, 111, 112, 107]).decode())(x, 2)

    record = RuntimeRecord()
    with record_ops(record):
        helper(torch.randn(3, 8))
    assert "aten.topk" in record.aten_ops
    hits = runtime_hits(record, TOPK)
    assert hits and hits[0].op == "torch.topk" and hits[0].how.startswith("runtime:")


def test_runtime_recorder_sees_composites_and_operator_forms() -> None:
    record = RuntimeRecord()
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with record_ops(record):
        _ = a @ b
        _ = torch.nn.functional.linear(a, b)
    ops = {h.op for h in runtime_hits(record, MOE)}
    assert {"torch.matmul", "torch.nn.functional.linear"} <= ops


def test_runtime_recorder_clean_run_has_no_hits() -> None:
    record = RuntimeRecord()
    x = torch.randn(4, 16)
    with record_ops(record):
        x.argmax(-1)
        x.amax(-1)
    assert runtime_hits(record, TOPK) == []
    assert "aten.argmax" in record.aten_ops


@pytest.mark.parametrize(
    "src",
    [
        'x = "%0999999999d" % 1\n',
        'x = "{:999999999}".format("a")\n',
        'x = "ab" * 60\n' + "x += x\n" * 60,
        'x = "a" * 60\ny = "".join([' + ", ".join(["x"] * 2000) + "])\n",
    ],
)
def test_folding_refuses_to_build_huge_strings(src: str) -> None:
    """A hostile source cannot make the static scan allocate gigabytes (it would hang or OOM here)."""
    assert scan({"solution.py": src}, FP8) == []
