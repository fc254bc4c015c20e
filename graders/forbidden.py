"""Forbidden-op detection: a static scan of every source the solution loads, and a runtime recorder.

A substring grep of solution.py is what agents route around: `import torch as t; t._scaled_mm`,
`from torch import _scaled_mm as f`, `getattr(torch, "_scaled" + "_mm")`, a helper in a sidecar,
`x.topk(...)`, `at::_scaled_mm` in a load_inline string. The static scan walks Python ASTs with
aliases, assignments and string folding resolved (comments and docstrings never count: only names
the code can reach do), and scans C/C++/CUDA sources with comments stripped. The runtime pass
(`record_ops`) records every torch function and aten op the solution dispatched on one small case,
plus the modules it imported, so a forbidden op reached indirectly (a library helper, a name built
from bytes at run time) is caught even when no static route is visible.

Forbidden entries come from problem.yaml, read in the one grammar of `graders.runformat.parse_forbidden`
(slash lists, `F.`/`aten.`/`Tensor.` prefixes, `import X`/`from X` module entries); they match as:
- torch-rooted dotted names (`torch._scaled_mm`, `torch.ops.aten.topk`, `F.linear`,
  `torch.Tensor.sort`): every torch route to the same op name counts (function, `torch.ops.aten`,
  Tensor method, C++ `at::`/`torch::`), and at run time the aten op or torch function of that name;
- other dotted names (`fla.ops.kda`, `flashinfer.decode`): that module/attribute or below;
- bare names (`chunk_kda`, `sonic_moe`, `scaled_dot_product_attention`): any imported name or
  attribute with that component, any module of that name, a torch op of that name at run time.
"""

from __future__ import annotations

import ast
import contextlib
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from graders.pyfold import fold_str, string_bindings
from graders.runformat import NATIVE_SUFFIXES, ForbiddenEntry, parse_forbidden

# Extra aten names an op reaches at dispatch level (composite ops decompose before dispatch).
_ATEN_ALIASES: dict[str, tuple[str, ...]] = {
    "argsort": ("sort",),
    "matmul": ("matmul",),
    "scaled_dot_product_attention": (
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_attention_math",
        "_scaled_dot_product_fused_attention_overrideable",
    ),
}
# Torch function names that are the same op in operator form.
_FUNCTION_ALIASES: dict[str, tuple[str, ...]] = {"matmul": ("__matmul__", "__rmatmul__")}
_OVERLOADS = frozenset({"default", "out", "Tensor", "Scalar", "stable", "values", "dim", "int", "self"})
# Python builtin containers have methods whose names collide with tensor ops (`list.sort()`).
_LIST_METHODS = frozenset({"sort", "copy", "index", "count", "reverse"})


@dataclass(frozen=True)
class ForbiddenHit:
    op: str  # the forbidden entry as listed in problem.yaml
    path: str  # file relative to the solution folder, or "<runtime>"
    line: int  # 1-based; 0 for runtime hits
    evidence: str  # the source line, or what was dispatched
    how: str  # static:name | static:getattr | static:import | static:method | static:eval | static:cpp | runtime:*

    def describe(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{self.op} ({self.how} at {where}: {self.evidence.strip()[:160]})"


@dataclass(frozen=True)
class _Entry(ForbiddenEntry):
    """A parsed forbidden entry (graders.runformat's grammar) and how a dotted name matches it."""

    def matches_dotted(self, name: str) -> bool:
        if name == self.dotted or name.startswith(self.dotted + "."):
            return True
        parts = name.split(".")
        if self.bare:
            return self.dotted in parts
        if self.torch_leaf is not None and parts[0] == "torch" and len(parts) > 1:
            # Any torch route to the same op name: torch.X, torch.ops.aten.X[.overload],
            # torch.Tensor.X, torch.nn.functional.X, torch._C._VariableFunctions.X ...
            # The op must be the last component (or precede an overload name): a module such as
            # `torch.backends.cuda.matmul.allow_tf32` is not a use of `torch.matmul`.
            if parts[-1] == self.torch_leaf:
                return parts[1] != "backends"
            return len(parts) > 2 and parts[-2] == self.torch_leaf and parts[-1] in _OVERLOADS
        return False


def normalize_entries(forbidden: list[str]) -> list[_Entry]:
    """problem.yaml's forbidden list in the shared grammar (graders.runformat.parse_forbidden)."""
    return [_Entry(e.raw, e.dotted, e.torch_leaf, e.bare, e.form) for e in parse_forbidden(forbidden).entries]


# ---------------------------------------------------------------------------------------------
# Python static scan


class _PyScanner:
    def __init__(self, path: str, text: str, entries: list[_Entry], line_offset: int = 0) -> None:
        self.path = path
        self.lines = text.splitlines()
        self.entries = entries
        self.offset = line_offset
        self.hits: list[ForbiddenHit] = []
        self.tree = ast.parse(text)
        self.consts = string_bindings(self.tree)
        self.aliases: dict[str, str] = {}
        self.local_defs: set[str] = set()
        self.list_names: set[str] = set()
        self.modules: set[str] = set()  # alias names bound to imported modules/objects

    # -- resolution ---------------------------------------------------------------------------
    def resolve(self, node: ast.AST, depth: int = 0) -> str | None:
        if depth > 30:
            return None
        d = depth + 1
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            if node.id in self.local_defs:
                return None
            return node.id
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value, d)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            fname = self.resolve(node.func, d)
            if fname in ("getattr", "builtins.getattr") and len(node.args) >= 2:
                base = self.resolve(node.args[0], d)
                attr = fold_str(node.args[1], self.consts)
                if base and attr:
                    return f"{base}.{attr}"
                return None
            if fname in ("importlib.import_module", "__import__", "builtins.__import__") and node.args:
                return fold_str(node.args[0], self.consts)
            if fname in ("operator.attrgetter",) and node.args:
                return None
            return None
        if isinstance(node, ast.Subscript):
            # vars(torch)["_scaled_mm"], torch.__dict__["_scaled_mm"], torch.ops.aten["topk"]
            key = fold_str(node.slice, self.consts)
            if key is None:
                return None
            v = node.value
            if isinstance(v, ast.Call) and self.resolve(v.func, d) == "vars" and v.args:
                base = self.resolve(v.args[0], d)
            elif isinstance(v, ast.Attribute) and v.attr == "__dict__":
                base = self.resolve(v.value, d)
            else:
                base = None
            return f"{base}.{key}" if base else None
        return None

    def _bind_imports_and_assignments(self) -> None:
        events: list[tuple[int, int, ast.AST]] = []
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)):
                events.append((node.lineno, node.col_offset, node))
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.local_defs.add(node.name)
        events.sort(key=lambda e: (e[0], e[1]))
        for _ in range(2):  # second round resolves uses before (textual) definitions
            for _l, _c, node in events:
                if isinstance(node, ast.Import):
                    for a in node.names:
                        if a.asname:
                            self.aliases[a.asname] = a.name
                            self.modules.add(a.asname)
                        else:
                            root = a.name.split(".")[0]
                            self.aliases.setdefault(root, root)
                            self.modules.add(root)
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    for a in node.names:
                        if a.name == "*":
                            continue
                        full = f"{base}.{a.name}" if base else a.name
                        self.aliases[a.asname or a.name] = full
                        self.modules.add(a.asname or a.name)
                else:
                    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]  # type: ignore[attr-defined]
                    if value is None:
                        continue
                    for tgt in targets:
                        if not isinstance(tgt, ast.Name):
                            continue
                        if isinstance(value, (ast.List, ast.ListComp)) or (
                            isinstance(value, ast.Call)
                            and isinstance(value.func, ast.Name)
                            and value.func.id in ("list", "sorted")
                        ):
                            self.list_names.add(tgt.id)
                        r = self.resolve(value)
                        if r is not None and r != tgt.id and _is_reference(value):
                            self.aliases[tgt.id] = r

    # -- reporting ----------------------------------------------------------------------------
    def _line(self, lineno: int) -> str:
        i = lineno - 1
        return self.lines[i] if 0 <= i < len(self.lines) else ""

    def _hit(self, entry: _Entry, node: ast.AST, how: str) -> None:
        lineno = getattr(node, "lineno", 0)
        self.hits.append(ForbiddenHit(entry.raw, self.path, lineno + self.offset, self._line(lineno), how))

    def _check_name(self, name: str | None, node: ast.AST, how: str) -> None:
        if not name:
            return
        for e in self.entries:
            if e.matches_dotted(name):
                self._hit(e, node, how)

    # -- walk ---------------------------------------------------------------------------------
    def scan(self) -> list[ForbiddenHit]:
        self._bind_imports_and_assignments()
        # Only the outermost attribute of a chain names something: `torch.backends.cuda.matmul`
        # inside `torch.backends.cuda.matmul.allow_tf32` is not itself a use.
        inner = {id(n.value) for n in ast.walk(self.tree) if isinstance(n, ast.Attribute)}
        triton_lines = self._triton_kernel_lines()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                if node.lineno not in triton_lines:
                    for e in self.entries:
                        if e.torch_leaf == "matmul" and e.dotted.startswith("torch."):
                            self._hit(e, node, "static:operator")
                continue
            if id(node) in inner and isinstance(node, (ast.Attribute, ast.Name)):
                continue

            if isinstance(node, ast.Import):
                for a in node.names:
                    self._check_name(a.name, node, "static:import")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                for a in node.names:
                    self._check_name(f"{base}.{a.name}" if base else a.name, node, "static:import")
            elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
                self._check_name(self.resolve(node), node, "static:name")
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if node.id in self.aliases:
                    self._check_name(self.aliases[node.id], node, "static:name")
            elif isinstance(node, ast.Subscript):
                self._check_name(self.resolve(node), node, "static:getattr")
            elif isinstance(node, ast.Call):
                self._scan_call(node)
        self._scan_embedded_native()
        return self.hits

    def _triton_kernel_lines(self) -> set[int]:
        """Lines inside @triton.jit / @triton.autotune functions (`a @ b` there is tl.dot)."""
        lines: set[int] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for dec in node.decorator_list:
                    target = dec.func if isinstance(dec, ast.Call) else dec
                    name = self.resolve(target) or ""
                    if name.startswith("triton") or name.endswith(".jit") or name == "jit":
                        lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
                        break
        return lines

    def _scan_call(self, node: ast.Call) -> None:
        fname = self.resolve(node.func)
        if fname in ("getattr", "builtins.getattr", "importlib.import_module", "__import__"):
            self._check_name(self.resolve(node), node, "static:getattr")
        if fname in ("eval", "exec", "compile", "builtins.eval", "builtins.exec") and node.args:
            code = fold_str(node.args[0], self.consts)
            if code:
                try:
                    sub = _PyScanner(self.path, code, self.entries, self.offset + node.lineno - 1)
                    for h in sub.scan():
                        self.hits.append(ForbiddenHit(h.op, h.path, node.lineno + self.offset,
                                                      self._line(node.lineno), "static:eval"))
                except SyntaxError:
                    pass
        func = node.func
        if isinstance(func, ast.Attribute):
            recv = func.value
            recv_name = self.resolve(recv)
            leftmost: ast.AST = recv
            while isinstance(leftmost, ast.Attribute):
                leftmost = leftmost.value
            # Method form (`x.topk(...)`): the receiver is a value, not an imported module
            # (`tl.sort`, `np.sort` are other libraries' functions, not Tensor methods).
            is_module = (
                isinstance(leftmost, ast.Name)
                and leftmost.id in self.modules
                and not (recv_name or "").startswith("torch")
            )
            is_list = isinstance(recv, (ast.List, ast.ListComp)) or (
                isinstance(recv, ast.Name) and recv.id in self.list_names and func.attr in _LIST_METHODS
            )
            if not is_module and not is_list and not (recv_name or "").startswith("torch"):
                for e in self.entries:
                    if e.torch_leaf == func.attr and (e.dotted.startswith("torch.") or e.bare):
                        self._hit(e, node, "static:method")

    def _scan_embedded_native(self) -> None:
        """C++/CUDA held in Python strings (load_inline cpp_sources/cuda_sources)."""
        for node in ast.walk(self.tree):
            if not isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp)):
                continue
            s = fold_str(node, self.consts)
            if not s or len(s) < 16 or ("::" not in s and "(" not in s) or "\n" not in s:
                continue
            if isinstance(node, ast.Constant) and _is_docstring(self.tree, node):
                continue
            for h in scan_native(self.path, s, self.entries):
                line = getattr(node, "lineno", 1) + h.line - 1 + self.offset
                self.hits.append(ForbiddenHit(h.op, self.path, line, h.evidence, "static:cpp"))


def _is_reference(node: ast.AST) -> bool:
    """Assignments that bind a name to a module/function object (not to a call result)."""
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
        n = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        return n in ("getattr", "import_module", "__import__")
    return False


def _is_docstring(tree: ast.AST, const: ast.Constant) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and first.value is const:
                return True
    return False


# ---------------------------------------------------------------------------------------------
# C/C++/CUDA static scan

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)


def _strip_comments(text: str) -> str:
    return _COMMENTS.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def scan_native(path: str, text: str, entries: list[_Entry]) -> list[ForbiddenHit]:
    code = _strip_comments(text)
    raw_lines = text.splitlines()
    hits: list[ForbiddenHit] = []
    for e in entries:
        if e.torch_leaf is None:
            continue
        leaf = re.escape(e.torch_leaf)
        pats = [rf"\b(?:at|torch)::(?:_ops::|native::|cuda::|functional::)?{leaf}\b"]
        if not e.bare:
            pats.append(rf"(?:\.|->)\s*{leaf}\s*\(")
        else:
            pats.append(rf"\b{leaf}\b")
        rx = re.compile("|".join(pats))
        for i, ln in enumerate(code.splitlines(), 1):
            if rx.search(ln):
                hits.append(ForbiddenHit(e.raw, path, i, raw_lines[i - 1] if i <= len(raw_lines) else ln, "static:cpp"))
    return hits


def scan(sources: Mapping[str, str], forbidden: list[str]) -> list[ForbiddenHit]:
    """Static scan of every file of the submission (Python and C/C++/CUDA), deduplicated."""
    entries = normalize_entries(forbidden)
    if not entries:
        return []
    hits: list[ForbiddenHit] = []
    for path, text in sources.items():
        if path.endswith(".py"):
            try:
                hits.extend(_PyScanner(path, text, entries).scan())
            except SyntaxError:
                continue  # the import will fail and say so
        elif path.endswith(NATIVE_SUFFIXES):
            hits.extend(scan_native(path, text, entries))
    # Several entries can name one op (torch.topk, Tensor.topk, torch.ops.aten.topk): one hit per
    # (file, line, op), reported under the first entry of the yaml that names it.
    leaf_of = {e.raw: (e.torch_leaf if e.torch_leaf and not e.bare else e.raw) for e in entries}
    order = {e.raw: i for i, e in enumerate(entries)}
    seen: set[tuple[str, str, int]] = set()
    out: list[ForbiddenHit] = []
    for h in sorted(hits, key=lambda h: (h.path != "solution.py", h.path, h.line, order.get(h.op, 0))):
        key = (leaf_of.get(h.op, h.op), h.path, h.line)
        if key not in seen:
            seen.add(key)
            out.append(h)
    return out


# ---------------------------------------------------------------------------------------------
# Runtime recorder


@dataclass
class RuntimeRecord:
    aten_ops: set[str] = field(default_factory=set)  # "aten.topk", "aten._scaled_mm", ...
    functions: set[str] = field(default_factory=set)  # torch-function names: "topk", "linear", ...
    modules: set[str] = field(default_factory=set)  # modules imported while recording/importing

    def dispatched(self) -> set[str]:
        return set(self.aten_ops) | {f"torch_function.{f}" for f in self.functions}


def _op_name(func: Any) -> str:
    try:
        return f"{func.namespace}.{func.overloadpacket.__name__}"
    except AttributeError:
        return str(func)


def _arg_dtypes(args: Any, kwargs: Any) -> str:
    """The distinct dtypes of an op's tensor arguments, in order: "bfloat16,float32"."""
    import torch

    seen: list[str] = []
    for a in [*args, *(kwargs or {}).values()]:
        for t in (a if isinstance(a, list | tuple) else [a]):
            if isinstance(t, torch.Tensor):
                d = str(t.dtype).removeprefix("torch.")
                if d not in seen:
                    seen.append(d)
    return ",".join(seen)


@contextlib.contextmanager
def record_ops(record: RuntimeRecord, *, dtypes: bool = False) -> Iterator[RuntimeRecord]:
    """Record every torch function and every op reaching the dispatcher inside the block.

    Both levels are needed: composite ops (`torch.matmul`, `F.linear`) decompose before the
    dispatcher, so only the function mode sees them; library and C++ callers reach only the
    dispatcher (a forbidden aten op called from a helper). Triton kernels dispatch nothing.
    With `dtypes`, a dispatched op is recorded with its tensor arguments' dtypes
    ("aten.mm(bfloat16)"): a switch to other-precision math is the same op on other dtypes.
    """
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Dispatch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            record.aten_ops.add(f"{_op_name(func)}({_arg_dtypes(args, kwargs)})" if dtypes else _op_name(func))
            return func(*args, **(kwargs or {}))

    class _Function(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            name = getattr(func, "__name__", None)
            if isinstance(name, str):
                record.functions.add(name)
            return func(*args, **(kwargs or {}))

    before = set(sys.modules)
    with _Function(), _Dispatch():
        try:
            yield record
        finally:
            record.modules |= set(sys.modules) - before


def runtime_hits(record: RuntimeRecord, forbidden: list[str]) -> list[ForbiddenHit]:
    hits: list[ForbiddenHit] = []
    for e in normalize_entries(forbidden):
        leaf = e.torch_leaf
        if leaf is not None:
            aten_names = {f"aten.{leaf}"} | {f"aten.{a}" for a in _ATEN_ALIASES.get(leaf, ())}
            found = sorted(aten_names & record.aten_ops)
            if found:
                hits.append(ForbiddenHit(e.raw, "<runtime>", 0, f"dispatched {found[0]}", "runtime:dispatch"))
                continue
            fnames = {leaf, *_FUNCTION_ALIASES.get(leaf, ())}
            if e.dotted.startswith("torch.") or e.bare:
                f = sorted(fnames & record.functions)
                if f:
                    hits.append(ForbiddenHit(e.raw, "<runtime>", 0, f"called torch function {f[0]}", "runtime:function"))
                    continue
        mods = sorted(m for m in record.modules if m == e.dotted or m.startswith(e.dotted + "."))
        if not mods and e.bare:
            mods = sorted(m for m in record.modules if e.dotted in m.split("."))
        if mods:
            hits.append(ForbiddenHit(e.raw, "<runtime>", 0, f"imported module {mods[0]}", "runtime:module"))
    return hits
