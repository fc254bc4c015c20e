"""The parsed submission model: aliases, constant folding, native line mapping, sidecars, reach."""

from __future__ import annotations

import ast
import textwrap

from audit_rules.source_model import Submission, build_submission, strip_cpp_comments


def _sub(solution: str, extra: dict[str, str] | None = None) -> Submission:
    sources = {"solution.py": textwrap.dedent(solution)}
    sources.update({k: textwrap.dedent(v) for k, v in (extra or {}).items()})
    return build_submission(sources)


def _calls(sub: Submission, func: str, path: str = "solution.py") -> set[str | None]:
    mod = sub.modules[path]
    f = mod.functions[func]
    scope = mod.scope(f)
    return {sub.qualname(n.func, scope) for n in ast.walk(f.node) if isinstance(n, ast.Call)}


def test_alias_resolution_imports_assignments_getattr_importlib() -> None:
    sub = _sub(
        """
        import importlib
        import torch as t
        from torch import cuda as c
        import torch.nn.functional
        F = torch.nn.functional
        mm = getattr(t, "_scaled" + "_mm")
        aten = importlib.import_module("torch.ops.aten")

        def f(x):
            sync = c.synchronize
            a = F.linear(x, x)
            b = mm(x, x)
            c.synchronize()
            sync()
            d = aten.topk(x, 3)
            e = t.__dict__["sort"](x)
            return getattr(t.cuda, "Event")()
        """
    )
    got = _calls(sub, "f")
    assert {
        "torch.nn.functional.linear",
        "torch._scaled_mm",
        "torch.cuda.synchronize",
        "torch.ops.aten.topk",
        "torch.sort",
        "torch.cuda.Event",
    } <= got
    mod = sub.modules["solution.py"]
    mm_assign = mod.scope(None).latest("mm")
    assert mm_assign is not None and sub.is_obfuscated(mm_assign)
    assert not sub.is_obfuscated(ast.parse("torch.matmul").body[0].value)  # type: ignore[attr-defined]


def test_constant_folding_concat_join_fstring_percent_format() -> None:
    sub = _sub(
        """
        A = "KBH_" + "NUMERIC"
        B = "_".join([A, "STRESS"])
        C = f"{B}_OFF"
        D = "%s=%d" % (C, 0)
        E = "{}/{name}".format("x", name="y")
        G = ("impl" "icit")
        """
    )
    mod = sub.modules["solution.py"]
    scope = mod.scope(None)
    vals = {n: sub.fold_str(scope.latest(n)) for n in "ABCDEG"}  # type: ignore[arg-type]
    assert vals == {
        "A": "KBH_NUMERIC",
        "B": "KBH_NUMERIC_STRESS",
        "C": "KBH_NUMERIC_STRESS_OFF",
        "D": "KBH_NUMERIC_STRESS_OFF=0",
        "E": "x/y",
        "G": "implicit",
    }


def test_load_inline_strings_map_back_to_solution_lines() -> None:
    solution = (
        "import torch\n"  # 1
        "from torch.utils.cpp_extension import load_inline\n"  # 2
        "HDR = '#include <cuda_runtime.h>\\n'\n"  # 3
        'BODY = """\n'  # 4
        "__global__ void k(float* x) {\n"  # 5
        "    x[0] = 1.f;  // evict_last in a comment\n"  # 6
        '    asm volatile("ld.global.L2::evict_last.f32 %0, [%1];");\n'  # 7
        "}\n"  # 8
        '"""\n'  # 9
        "SRC = HDR + BODY\n"  # 10
        "ext = load_inline('e', cpp_sources=['void f();'], cuda_sources=[SRC], functions=['f'])\n"  # 11
    )
    sub = build_submission({"solution.py": solution})
    cuda = [n for n in sub.native if n.via == "load_inline" and n.kind == "cuda"]
    assert len(cuda) == 1
    src = cuda[0]
    assert src.origin == "solution.py"
    hits = [(origin, m.group(0)) for _, origin, m in src.find(r"evict_last")]
    assert hits == [(7, "evict_last")]  # the comment on line 6 is not code
    glob = [origin for _, origin, _ in src.find(r"__global__")]
    assert glob == [5]
    cpp = [n for n in sub.native if n.via == "load_inline" and n.kind == "cpp"]
    assert cpp and cpp[0].origin_line(1) == 11


def test_sidecar_files_loaded_by_load_and_includes() -> None:
    sub = _sub(
        """
        import os
        from torch.utils.cpp_extension import load
        _ext = load(name="k", sources=[os.path.join(os.path.dirname(__file__), "scratch", "kern.cu")])
        """,
        {
            "scratch/kern.cu": '#include "common.cuh"\n__global__ void k() {}\n',
            "scratch/common.cuh": "#pragma once\n__device__ int helper() { return 1; }\n",
            "scratch/unused.cu": "__global__ void old() {}\n",
        },
    )
    loaded = {n.origin: n.loaded for n in sub.native if n.via == "file"}
    assert loaded == {"scratch/kern.cu": True, "scratch/common.cuh": True, "scratch/unused.cu": False}
    kern = next(n for n in sub.native if n.origin == "scratch/kern.cu")
    assert [o for _, o, _ in kern.find(r"__global__")] == [2]


def test_nvrtc_and_rawkernel_strings() -> None:
    sub = _sub(
        '''
        import cupy
        CODE = r"""
        extern "C" __global__ void add(float* x) { x[threadIdx.x] += 1.f; }
        """
        k = cupy.RawKernel(CODE, "add")
        '''
    )
    raw = [n for n in sub.native if n.via == "rawkernel"]
    assert raw and [o for _, o, _ in raw[0].find(r"__global__")] == [4]


def test_sidecar_python_imports_and_cross_module_reach() -> None:
    sub = _sub(
        """
        import torch
        import kern
        from .helpers import prep as _prep

        class Model(torch.nn.Module):
            def forward(self, x):
                y = _prep(x)
                try:
                    return kern.launch(y)
                except RuntimeError:
                    return self._fallback(y)

            def _fallback(self, y):
                return y @ y

            def _unused(self, y):
                return y
        """,
        {
            "scratch/kern.py": """
        import triton
        import triton.language as tl

        @triton.jit
        def _k(x_ptr):
            v = tl.load(x_ptr, eviction_policy="evict_first")
            tl.store(x_ptr, v)

        def launch(y):
            _k[(1,)](y)
            return y
        """,
            "helpers.py": """
        def prep(x):
            return x.contiguous()
        """,
        },
    )
    assert set(sub.modules) == {"solution.py", "scratch/kern.py", "helpers.py"}
    assert {"kern.launch", "helpers.prep", "self._fallback"} <= _calls(sub, "Model.forward")
    reach = sub.reach()
    live = {(f.module.path, f.name) for f in reach.live}
    assert ("scratch/kern.py", "launch") in live and ("scratch/kern.py", "_k") in live
    assert ("helpers.py", "prep") in live
    assert {(f.module.path, f.name) for f in reach.fallback} == {("solution.py", "Model._fallback")}
    unused = sub.modules["solution.py"].functions["Model._unused"]
    assert unused not in reach.live and unused not in reach.fallback
    kern = sub.triton[0]
    assert kern.func.name == "_k" and [ld.eviction_policy for ld in kern.loads] == ["evict_first"]


def test_triton_dot_operand_casts_follow_definitions() -> None:
    sub = _sub(
        """
        import triton
        import triton.language as tl
        from triton import jit

        @jit
        def k(a_ptr, b_ptr, c_ptr):
            a = tl.load(a_ptr).to(tl.bfloat16)
            b = tl.load(b_ptr)
            b = b.to(tl.float16)
            c = tl.load(c_ptr)
            acc = tl.dot(a, b)
            acc2 = tl.dot(c, c)
        """
    )
    (kern,) = sub.triton
    d1, d2 = kern.dots
    assert [sorted(d for d, _ in op.casts) for op in d1.operands] == [["bf16"], ["fp16"]]
    assert all(op.from_load for op in d1.operands)
    assert [op.casts for op in d2.operands] == [[], []]


def test_unparsable_solution_is_recorded_not_raised() -> None:
    sub = build_submission({"solution.py": "def broken(:\n"})
    assert "solution.py" in sub.unparsable and not sub.modules
    assert sub.reach().live == set()


def test_strip_cpp_comments_keeps_strings_and_lines() -> None:
    text = 'a(); // x\n/* y\n z */ b("// not a comment");\n'
    out = strip_cpp_comments(text)
    assert out.count("\n") == text.count("\n")
    assert "x" not in out.split("\n")[0] and '"// not a comment"' in out


def test_sitecustomize_is_analyzed_as_import_time_code() -> None:
    sub = _sub(
        "import torch\n",
        {
            "sitecustomize.py": "import datetime\nif not hasattr(datetime, 'UTC'):\n    datetime.UTC = datetime.timezone.utc\n",
            "scratch/notes.py": "import torch\ntorch.allclose = None\n",  # never imported: not analyzed
        },
    )
    assert set(sub.modules) == {"solution.py", "sitecustomize.py"}


def test_in_main_guard_same_answer_in_any_query_order() -> None:
    src = """
    import torch
    def f(x):
        return x + 1
    if __name__ == "__main__":
        y = f(torch.ones(3))
        if y.sum() > 0:
            print(y)
    else:
        z = 1
    w = 2
    """
    mod = _sub(src).modules["solution.py"]
    nodes = list(ast.walk(mod.tree))
    expected = {id(n): any(isinstance(a, ast.If) and ast.unparse(a.test) == "__name__ == '__main__'"
                           for a in mod.ancestors(n)) for n in nodes}
    assert sum(expected.values()) > 10  # the guard's body, test and else
    for order in (nodes, nodes[::-1]):  # the memo is filled from the root down or from the leaves up
        fresh = _sub(src).modules["solution.py"]
        by_pos = {id(a): b for a, b in zip(nodes, ast.walk(fresh.tree), strict=True)}
        assert all(fresh.in_main_guard(by_pos[id(n)]) == expected[id(n)] for n in order)
    assert not mod.in_main_guard(mod.functions["f"].node.body[0])


def test_a_helper_called_with_self_reads_the_instance_as_a_method_does() -> None:
    # forward delegates to a module-level function (the body moved out of the class): inside it the
    # first parameter is the instance, so `me._prep(x)` reaches the method and `me._buf` the attribute
    sub = _sub(
        """
        import torch

        def _impl(me, x):
            y = me._prep(x)
            return _tail(me, y)

        def _tail(obj, y):
            return obj._buf.copy_(y)

        class Model(torch.nn.Module):
            def __init__(self, n):
                super().__init__()
                self._buf = torch.empty(n, dtype=torch.bfloat16)

            def _prep(self, x):
                return x.to(torch.bfloat16)

            def forward(self, x):
                return _impl(self, x)

        class Other:
            def run(self, x):
                return _both(self, x)

        def _both(o, x):
            return o

        def _free(x):
            return x

        def _unused(self, x):
            return x
        """
    )
    mod = sub.modules["solution.py"]
    assert mod.functions["_impl"].bound == "Model" and mod.functions["_tail"].bound == "Model"  # through a chain
    assert mod.functions["_both"].bound == "Other"
    assert mod.functions["_free"].bound is None and mod.functions["_unused"].bound is None  # never called with one
    live = sub.reach().live
    assert mod.functions["Model._prep"] in live  # me._prep resolves to the method
    assert "_buf" in mod.self_assigns("Model")
    impl = mod.functions["_impl"]
    assert impl.is_receiver("me") and not impl.is_receiver("x") and not impl.is_receiver("self")


def test_a_helper_called_with_instances_of_two_classes_stays_unbound() -> None:
    sub = _sub(
        """
        def _shared(obj):
            return obj.go()

        class A:
            def go(self):
                return 1
            def run(self):
                return _shared(self)

        class B:
            def go(self):
                return 2
            def run(self):
                return _shared(self)
        """
    )
    assert sub.modules["solution.py"].functions["_shared"].bound is None
