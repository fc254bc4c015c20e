"""Metamorphic checks of the static audit (bench/metamorphic.py): rewrite solutions without changing
what they do, re-audit, nothing moves.

A rule that reads names or one shape of code instead of what the code does would move a verdict
here. The corpus is the real ../shared/kbh-dev, read in place (the rewritten copy goes to
tmp_path); the rule fixtures are tests/audit_rules/fixtures. The transforms themselves are checked
to preserve behaviour by running a small module before and after each on the CPU."""

from __future__ import annotations

import importlib.util
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from audit_rules.registry import rules_by_id
from bench.metamorphic import TRANSFORMS, main, outline, rename_attrs

from .test_static_rules import _ctx, _sources, _static_entries

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "kbh-dev"
SEMANTIC = ("rename", "attrs", "outline", "aliases", "positional", "launchers", "combined")


@pytest.mark.skipif(not (CORPUS / "labels.json").is_file(), reason="../shared/kbh-dev not present")
@pytest.mark.parametrize("transform", ["combined"])
def test_rewriting_every_solution_moves_no_verdict(transform: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # combined = every rewrite but strip/reorder at once (each alone also moved none on 2026-12-06:
    # `bench/metamorphic.py --transform T` for each, docs/fidelity.md)
    rc = main([str(CORPUS), "--out", str(tmp_path / transform), "--jobs", "1", "--transform", transform])
    out = capsys.readouterr().out
    assert f"solutions rewritten ({transform})" in out and "verdict moved on 0 of" in out, out[-2000:]
    assert rc == 0


def _effects(rule_id: str, sources: dict[str, str], decks: Any) -> list[str]:
    return sorted({f.effect.value for f in rules_by_id()[rule_id].check(_ctx(sources, decks))})


@pytest.mark.parametrize("transform", (*SEMANTIC, "cpp_names"))
def test_every_rule_fixture_keeps_its_effects_when_rewritten(transform: str, decks: Any) -> None:
    moved = []
    rewrote = 0
    for rule_id, entry in _static_entries():
        src = _sources(entry)
        if "solution.py" not in src:
            continue
        rewritten = dict(src)
        # the fixture's `# problem:` line names its deck problem (the archive's metadata does, in a run)
        head = "".join(ln for ln in src["solution.py"].splitlines(keepends=True) if ln.startswith("# problem:"))
        try:
            rewritten["solution.py"] = head + TRANSFORMS[transform](src["solution.py"])
        except ValueError:  # cpp_names: no inline CUDA in this fixture
            continue
        rewrote += 1
        before, after = _effects(rule_id, src, decks), _effects(rule_id, rewritten, decks)
        if before != after:
            moved.append(f"{rule_id}/{entry.name}: {before} -> {after}")
    assert rewrote >= 5, rewrote  # the transform reached fixtures (cpp_names: those with inline CUDA)
    assert not moved, moved


def test_cpp_names_renames_kernels_and_device_functions_but_nothing_reached_from_outside() -> None:
    src = (
        'import torch\n'
        'from torch.utils.cpp_extension import load_inline\n'
        'CUDA = r"""\n'
        '__device__ __forceinline__ float warp_sum(float v) { return v; }\n'
        '__device__ float exported_too(float v) { return v; }\n'
        'template <int B>\n'
        '__global__ void __launch_bounds__(256) topk_kernel(const float* x, float* y) { y[0] = warp_sum(x[0]); }\n'
        'torch::Tensor topk_fwd(torch::Tensor x) { topk_kernel<256><<<1, 256>>>(x.data_ptr<float>(), nullptr); return x; }\n'
        '"""\n'
        'mod = load_inline(name="m", cpp_sources="torch::Tensor topk_fwd(torch::Tensor x);", cuda_sources=CUDA,\n'
        '                  functions=["topk_fwd"])\n'
        'NOTE = "exported_too"\n'
    )
    out = TRANSFORMS["cpp_names"](src)
    assert "topk_kernel" not in out and "warp_sum" not in out
    assert "__global__ void __launch_bounds__(256) kfn0(" in out and "kfn0<256><<<1, 256>>>" in out
    assert "__device__ __forceinline__ float kfn1(float v)" in out and "y[0] = kfn1(x[0]);" in out
    # named elsewhere in the file (another string): kept; the host entry point is not a device function
    assert out.count("exported_too") == 2 and out.count("topk_fwd") == 3
    with pytest.raises(ValueError):
        TRANSFORMS["cpp_names"]("import torch\nx = 1\n")


MODULE = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _axpb(x_ptr, out_ptr, n, A: tl.constexpr, B: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * A + B, mask=mask)


def _scale(t, factor=1.0, shift=0.0):
    return t * factor + shift


class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.arange(n, dtype=torch.float32))
        self.register_buffer("scale", torch.full((1,), 2.0))
        self._cache = {}
        self._calls = 0

    def _prep(self, x):
        return _scale(x, shift=1.0, factor=self.scale)

    def forward(self, x, *rest, k=1, **kw):
        self._calls += 1
        key = (x.data_ptr(), tuple(x.shape))
        if not hasattr(self, "_cache") or key not in self._cache:
            self._cache[key] = self._prep(x) * self.weight
        flag = getattr(self, "_calls") > 1
        out = torch.empty_like(x)
        _axpb[(triton.cdiv(x.numel(), 16),)](x, out, x.numel(), B=0.5, A=3.0, BLOCK=16)
        return self._cache[key] + out + k + len(rest) + len(kw) + int(flag)
'''


def _load(source: str, path: Path) -> types.ModuleType:
    # written to a file and imported: @triton.jit reads its kernel's source from the file
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("transform", SEMANTIC)
def test_the_rewrites_keep_what_the_code_does(transform: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the kernel runs in Triton's CPU interpreter
    rewritten = TRANSFORMS[transform](MODULE)
    assert rewritten != MODULE
    before, after = _load(MODULE, tmp_path / "before_case.py"), _load(rewritten, tmp_path / "after_case.py")
    m0, m1 = before.Model(40), after.Model(40)
    assert list(m0.state_dict()) == list(m1.state_dict()) == ["weight", "scale"]  # state names are kept
    x = torch.linspace(-1, 1, 40)
    for args, kw in (((x,), {}), ((x, 1, 2), {"k": 3, "z": 0}), ((x,), {})):
        with torch.no_grad():
            assert torch.equal(m0(*args, **kw), m1(*args, **kw))


def test_attrs_renames_the_solutions_own_attributes_only() -> None:
    out = rename_attrs(MODULE + "\ntorch.backends.cudnn.benchmark = True\n")
    assert "self._cache" not in out and "self._calls" not in out and 'getattr(self, "_calls")' not in out
    assert "self.weight" in out and '"scale"' in out and "x.data_ptr()" in out and "x.shape" in out
    assert "torch.backends.cudnn.benchmark = True" in out  # a library's attribute, not the solution's


def test_outline_leaves_a_forward_that_needs_its_class_in_place() -> None:
    src = textwrap.dedent('''
        import torch

        class Base(torch.nn.Module):
            def forward(self, x):
                return x

        class Model(Base):
            def forward(self, x):
                return super().forward(x) + 1
        ''')
    out = outline(src)
    assert "_outlined_Base_forward" in out and "_outlined_Model_forward" not in out
    mod = types.ModuleType("outline_case")
    exec(compile(out, "<outline>", "exec"), mod.__dict__)
    assert torch.equal(mod.Model()(torch.ones(2)), torch.full((2,), 2.0))


def test_rewrites_leave_appended_sidecars_and_their_banners_alone() -> None:
    from bench.metamorphic import split_head

    rule = "# " + "=" * 66
    text = ("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):  # own code\n        return x\n"
            f"{rule}\n# ===== sidecar: kern.cu (21 bytes, loaded by solution.py) =====\n{rule}\n"
            "__global__ void k() {}\n")
    head, tail = split_head(text)
    assert head.endswith("return x\n") and tail.startswith(rule) and "__global__ void k() {}" in tail
    out = TRANSFORMS["combined"](head) + "\n" + tail  # as bench/metamorphic.py and bench/mutants.py write it
    assert "===== sidecar: kern.cu (21 bytes, loaded by solution.py) =====" in out and "_outlined_Model_forward" in out
    assert split_head("import torch\n") == ("import torch\n", "")
