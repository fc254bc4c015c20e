"""The parsed model of a submission that every static rule reads.

`build_submission(sources)` takes the text sources of a run (``solution.py`` and every sidecar,
keyed by archive path) and builds:

* a `PyModule` per Python file that matters: ``solution.py`` and every sidecar it loads
  (``import kern``, ``from .kern import f``, ``from scratch.kern import f``; which files and where
  each import resolves is `graders.sources.source_closure`, shared with the graders), with its import alias
  table (``import torch as t``, ``from torch import cuda as c``), module-level assignments
  (``F = torch.nn.functional``), functions (methods as ``Class.method``), classes and a parent map;
* the call/reference graph and which functions the entry points reach (``Model.forward`` /
  ``__call__``; the public functions when there is no Model), split into the live path and the
  fallback path (references made only from ``except`` handlers);
* every C++/CUDA/PTX text: ``load_inline`` strings (lists, joins, concatenations, names resolved
  to module constants), ``cpp_extension.load(sources=[...])`` files, NVRTC / cupy ``RawKernel``
  strings and the ``.cu/.cuh/.cpp/.h`` sidecars -- each as `NativeSource` whose lines map back to
  the file and line that hold them (a CUDA string inside solution.py reports solution.py lines);
* every Triton kernel (``@triton.jit`` / ``@triton.autotune`` bodies): its ``tl.load`` calls
  with their eviction policy and its ``tl.dot`` calls with the casts applied to each operand.

Helpers the rules use: `Submission.qualname(expr, scope)` resolves a dotted name through aliases,
assignments, ``getattr`` with a constant-folded name and ``importlib.import_module``;
`Submission.fold_str(expr, scope)` folds constant strings (concatenation, ``join``, f-strings of
constants, ``%``-format, ``.format``); `Scope` gives per-function data flow (the assignments of a
name, what is returned, what a dict/attribute stores).

Nothing here executes submitted code: everything is read with `ast` and a small C++ lexer.
"""

from __future__ import annotations

import ast
import posixpath
import re
import textwrap
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from audit_rules.memo import IdentityMemo
from graders.runformat import NATIVE_SUFFIXES, PY_SUFFIXES  # the run-format facts, re-exported
from graders.sources import SourceClosure, source_closure

_MAX_DEPTH = 12  # bound on alias / constant-folding recursion (self-referencing assignments)


# --------------------------------------------------------------------------------------------
# Mapped text: a string whose every line remembers the file line it came from
# --------------------------------------------------------------------------------------------


@dataclass
class MappedText:
    """A folded string with, for each of its lines, the 1-based line of the file that holds it."""

    text: str
    origins: list[int]  # len == number of lines of `text` (text.split("\n"))

    @classmethod
    def single(cls, text: str, line: int) -> MappedText:
        return cls(text, [line] * (text.count("\n") + 1))

    def __add__(self, other: MappedText) -> MappedText:
        # The last line of self and the first line of other merge into one line.
        return MappedText(self.text + other.text, self.origins + other.origins[1:])

    def dedent(self) -> MappedText:
        return MappedText(textwrap.dedent(self.text), list(self.origins))


def _literal_mapped(node: ast.Constant, module: PyModule) -> MappedText | None:
    """Map the lines of a string literal to file lines.

    A triple-quoted literal holds its newlines verbatim, so line i of the value sits on
    ``lineno + i``. A literal with escaped ``\\n`` (or a backslash-newline continuation) cannot
    be mapped line by line; every line then maps to the literal's first line. In a raw literal a
    backslash-newline is two characters of the value (a C macro continuation), not a continuation.
    """
    value = node.value
    if not isinstance(value, str):
        return None
    n_value = value.count("\n")
    lineno = node.lineno
    end = getattr(node, "end_lineno", None) or lineno
    seg = module.segment(node)
    raw = "r" in seg[: len(seg) - len(seg.lstrip("rRbBuUfF"))].lower()  # r"..." keeps backslash-newline verbatim
    if n_value == end - lineno and (raw or "\\\n" not in seg):
        return MappedText(value, [lineno + i for i in range(n_value + 1)])
    return MappedText(value, [lineno] * (n_value + 1))


# --------------------------------------------------------------------------------------------
# Python modules, functions, scopes
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class FunctionInfo:
    module: PyModule
    name: str  # "f", "Model.forward", "outer.inner"
    node: ast.FunctionDef | ast.AsyncFunctionDef
    cls: str | None  # enclosing class name, if a method
    decorators: list[str] = field(default_factory=list)  # resolved qualnames
    # a module-level function whose first parameter receives an instance of this class at its call
    # sites (`helper(self, x)` from a method): its first parameter is that method's `self`
    bound: str | None = None

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]

    @property
    def params(self) -> list[str]:
        a = self.node.args
        names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
        if a.vararg:
            names.append(a.vararg.arg)
        if a.kwarg:
            names.append(a.kwarg.arg)
        return names

    @property
    def self_cls(self) -> str | None:
        """The class whose instance `self` (a method's) or the bound first parameter holds."""
        return self.cls or self.bound

    def is_receiver(self, name: str) -> bool:
        """`name` is this function's instance: `self`/`cls` in a method, the first parameter of a
        bound module-level function."""
        if self.cls:
            return name in ("self", "cls")
        positional = self.node.args.posonlyargs + self.node.args.args
        return self.bound is not None and bool(positional) and name == positional[0].arg

    @property
    def is_triton(self) -> bool:
        return any(d.startswith("triton.") and d.split(".")[-1] in _TRITON_DECOS for d in self.decorators)

    def __repr__(self) -> str:
        return f"<FunctionInfo {self.module.path}:{self.name}>"


_TRITON_DECOS = {"jit", "autotune", "heuristics"}


@dataclass(eq=False)
class ClassInfo:
    module: PyModule
    name: str
    node: ast.ClassDef
    bases: list[str]  # resolved qualnames of bases


class Scope:
    """Data flow of one function (or of a module's top level when `func` is None).

    Flow-insensitive with a 'latest before this line' choice: enough for the simple local
    aliasing that hides a call (``f = getattr(torch, name); f(x)``).
    """

    def __init__(self, module: PyModule, func: FunctionInfo | None) -> None:
        self.module = module
        self.func = func
        self.assigns: dict[str, list[ast.expr]] = {}
        self.memo: dict[tuple[str, int, int], Any] = {}  # per-scope answers of pure helpers (rules' _support)
        body: Iterable[ast.AST] = func.node.body if func is not None else module.tree.body
        for stmt in body:
            for node in _walk_no_nested(stmt) if func is not None else _walk_toplevel(stmt):
                if isinstance(node, ast.Assign):
                    for tgt in node.targets:
                        self._bind(tgt, node.value)
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    self._bind(node.target, node.value)
                elif isinstance(node, ast.NamedExpr):
                    self._bind(node.target, node.value)
                elif isinstance(node, ast.With | ast.AsyncWith):
                    for item in node.items:
                        if item.optional_vars is not None:
                            self._bind(item.optional_vars, item.context_expr)
                elif isinstance(node, ast.For | ast.comprehension):
                    self._bind_loop(node.target, node.iter)

    def _bind_loop(self, target: ast.expr, it: ast.expr) -> None:
        """Loop targets derive from the iterable: `for name in ("a", "b")` binds each element (for
        folding); `for d, s in zip(xs, ys)` binds d to xs and s to ys; otherwise the iterable."""
        if isinstance(target, ast.Name):
            if isinstance(it, ast.Tuple | ast.List) and it.elts:
                for elt in it.elts:
                    self.assigns.setdefault(target.id, []).append(elt)
            else:
                self.assigns.setdefault(target.id, []).append(it)
        elif isinstance(target, ast.Tuple):
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "zip":
                for t, a in zip(target.elts, it.args, strict=False):
                    self._bind_loop(t, a)
            elif isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "enumerate" and it.args:
                if len(target.elts) == 2:
                    self._bind_loop(target.elts[1], it.args[0])
            else:
                for t in target.elts:
                    if isinstance(t, ast.Name):
                        self.assigns.setdefault(t.id, []).append(it)

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, ast.Name):
            self.assigns.setdefault(target.id, []).append(value)
        elif isinstance(target, ast.Tuple | ast.List):
            if isinstance(value, ast.Tuple | ast.List) and len(target.elts) == len(value.elts):
                for t, v in zip(target.elts, value.elts, strict=True):
                    self._bind(t, v)
            else:  # `g, out = self._graphs[key]`: each name derives from the whole value
                for t in target.elts:
                    self._bind(t, value)

    def values_of(self, name: str, before_line: int | None = None) -> list[ast.expr]:
        vals = self.assigns.get(name, [])
        if before_line is None:
            return vals
        earlier = [v for v in vals if v.lineno <= before_line]
        return earlier or vals

    def latest(self, name: str, before_line: int | None = None) -> ast.expr | None:
        vals = self.values_of(name, before_line)
        if not vals:
            return None
        if before_line is None:
            return vals[-1]
        earlier = [v for v in vals if v.lineno <= before_line]
        return (earlier or vals)[-1]


def _walk_no_nested(node: ast.AST) -> Iterator[ast.AST]:
    """ast.walk that does not descend into nested function or class definitions."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        for child in ast.iter_child_nodes(n):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                continue
            stack.append(child)


def _walk_toplevel(node: ast.AST) -> Iterator[ast.AST]:
    """Walk a module-level statement, skipping function and class bodies."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return
    yield from _walk_no_nested(node)


# Per-body node lists, hot in every rule; bounded (long-lived processes audit archive after archive).
BODY_CACHE_SIZE = 4096  # function bodies (an archive has hundreds at most)
_BODY_CACHE: IdentityMemo[list[ast.AST]] = IdentityMemo(BODY_CACHE_SIZE)


def walk_body(func_or_module: ast.AST) -> Iterator[ast.AST]:
    """Every node of a function body including lambdas, excluding nested defs/classes (cached)."""
    hit = _BODY_CACHE.get(func_or_module)
    if hit is not None:
        return iter(hit)
    nodes: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(func_or_module))
    while stack:
        n = stack.pop()
        nodes.append(n)
        for child in ast.iter_child_nodes(n):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            stack.append(child)
    _BODY_CACHE.put(func_or_module, nodes)
    return iter(nodes)


@dataclass(eq=False)
class PyModule:
    path: str  # archive path, e.g. "solution.py", "scratch/kern.py"
    name: str  # import name, e.g. "solution", "kern"
    source: str
    tree: ast.Module
    lines: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> dotted external name
    sidecar_alias: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # name -> (path, attr)
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)
    _scope_cache: dict[int, Scope] = field(default_factory=dict)
    _blines: list[bytes] | None = None
    _self_assigns: dict[str, dict[str, list[tuple[FunctionInfo, ast.expr]]]] = field(default_factory=dict)
    _main_guards: set[ast.AST] | None = None  # the `if __name__ == "__main__":` nodes (in_main_guard)
    _in_guard: dict[ast.AST, bool] = field(default_factory=dict)  # node -> in_main_guard(node)

    def self_assigns(self, cls: str) -> dict[str, list[tuple[FunctionInfo, ast.expr]]]:
        """attr -> [(method, value)] for every `self.attr = value` in the methods of a class."""
        table = self._self_assigns.get(cls)
        if table is None:
            table = {}
            for f in self.functions.values():
                if f.self_cls != cls:
                    continue
                for node in walk_body(f.node):
                    if isinstance(node, ast.Assign):
                        for tgt in node.targets:
                            if isinstance(tgt, ast.Attribute) and isinstance(tgt.value, ast.Name) \
                                    and self_attr_class(f, tgt.value.id) == cls:
                                table.setdefault(tgt.attr, []).append((f, node.value))
            self._self_assigns[cls] = table
        return table

    def segment(self, node: ast.AST) -> str:
        """Source text of a node (ast.get_source_segment re-splits the file on every call)."""
        if self._blines is None:
            self._blines = [ln.encode("utf-8") for ln in self.source.splitlines(keepends=True)]
        try:
            l0, l1 = node.lineno - 1, node.end_lineno - 1  # type: ignore[attr-defined]
            c0, c1 = node.col_offset, node.end_col_offset  # type: ignore[attr-defined]
        except AttributeError:
            return ""
        if l1 is None or c1 is None or l0 < 0 or l1 >= len(self._blines):
            return ""
        if l0 == l1:
            return self._blines[l0][c0:c1].decode("utf-8", "replace")
        parts = [self._blines[l0][c0:], *self._blines[l0 + 1 : l1], self._blines[l1][:c1]]
        return b"".join(parts).decode("utf-8", "replace")

    def line(self, n: int) -> str:
        return self.lines[n - 1] if 0 < n <= len(self.lines) else ""

    def quote(self, start: int, end: int | None = None, limit: int = 8) -> str:
        end = end if end is not None else start
        end = min(end, start + limit - 1)
        return "\n".join(self.line(i).rstrip() for i in range(start, end + 1))

    def scope(self, func: FunctionInfo | None) -> Scope:
        key = id(func.node) if func is not None else 0
        sc = self._scope_cache.get(key)
        if sc is None:
            sc = Scope(self, func)
            self._scope_cache[key] = sc
        return sc

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        cur = self.parents.get(node)
        while cur is not None:
            yield cur
            cur = self.parents.get(cur)

    def enclosing_function(self, node: ast.AST) -> FunctionInfo | None:
        for anc in self.ancestors(node):
            if isinstance(anc, ast.FunctionDef | ast.AsyncFunctionDef):
                for f in self.functions.values():
                    if f.node is anc:
                        return f
        return None

    def in_except(self, node: ast.AST, stop: ast.AST | None = None) -> bool:
        """Inside an except handler, or in a branch the GPU grader never takes (see `_off_gpu_branch`)."""
        child: ast.AST = node
        for anc in self.ancestors(node):
            if anc is stop:
                return False
            if isinstance(anc, ast.ExceptHandler):
                return True
            if isinstance(anc, ast.If) and _off_gpu_branch(anc, child):
                return True
            child = anc
        return False

    def in_main_guard(self, node: ast.AST) -> bool:
        """Inside ``if __name__ == "__main__":`` (a self-test the harness never runs).

        Several rules ask this of every node, so the guards are found once per module and each
        answer is kept for the node and the ancestors walked to reach it (the same answer as
        walking the ancestors every time, without the quadratic walk)."""
        guards = self._main_guards
        if guards is None:
            guards = {n for n in ast.walk(self.tree) if isinstance(n, ast.If) and _is_main_guard(n.test)}
            self._main_guards = guards
        if not guards:
            return False
        memo = self._in_guard
        walked: list[ast.AST] = []
        cur: ast.AST | None = node
        result = False
        while cur is not None:
            known = memo.get(cur)
            if known is not None:
                result = known
                break
            walked.append(cur)
            cur = self.parents.get(cur)
            if cur is not None and cur in guards:
                result = True
                break
        for n in walked:
            memo[n] = result
        return result


def _gpu_test(expr: ast.expr) -> bool | None:
    """True for a test that holds on the GPU grader (`x.is_cuda`, `torch.cuda.is_available()`,
    `x.device.type == "cuda"`), False for its negation (`x.device.type == "cpu"`), else None."""
    if isinstance(expr, ast.Attribute) and expr.attr == "is_cuda":
        return True
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "is_available":
        f = expr.func.value
        if isinstance(f, ast.Attribute) and f.attr == "cuda":
            return True
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1 and isinstance(expr.left, ast.Attribute) and expr.left.attr == "type":
        other = expr.comparators[0]
        if isinstance(other, ast.Constant) and other.value in ("cuda", "cpu"):
            on_gpu = other.value == "cuda"
            if isinstance(expr.ops[0], ast.Eq):
                return on_gpu
            if isinstance(expr.ops[0], ast.NotEq):
                return not on_gpu
    return None


def _off_gpu_branch(node: ast.If, child: ast.AST) -> bool:
    """`child` sits in the arm of `node` that runs only off the GPU (or on an unsupported config):
    the body of `if not x.is_cuda:` / `if not (x.is_cuda and ...):` / `if x.device.type == "cpu":`,
    or the else of `if x.is_cuda:`. The grader runs every graded call on CUDA inputs."""
    test = node.test
    negated = False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, negated = test.operand, True
    holds: bool | None = _gpu_test(test)
    if holds is None and isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        # `x.is_cuda and <supported>`: its negation is the unsupported-config fallback
        holds = True if any(_gpu_test(v) is True for v in test.values) else None
        if holds and not negated:
            return child in node.orelse  # else of "on GPU and supported": an unsupported fallback
    if holds is None:
        return False
    on_gpu_when_true = holds != negated
    return child in (node.orelse if on_gpu_when_true else node.body)


def _is_main_guard(test: ast.expr) -> bool:
    if isinstance(test, ast.Compare) and len(test.comparators) == 1:
        sides = [test.left, test.comparators[0]]
        names = {s.id for s in sides if isinstance(s, ast.Name)}
        consts = {s.value for s in sides if isinstance(s, ast.Constant)}
        return "__name__" in names and "__main__" in consts
    return False


# --------------------------------------------------------------------------------------------
# Native (C++/CUDA/PTX) sources
# --------------------------------------------------------------------------------------------


@dataclass(eq=False)
class NativeSource:
    """One C++/CUDA/PTX text and where its lines live."""

    origin: str  # archive path of the file holding the text
    kind: str  # "cuda" | "cpp" | "ptx"
    via: str  # "load_inline" | "load" | "file" | "nvrtc" | "rawkernel" | "string"
    text: str
    origins: list[int]  # per text line: 1-based line in `origin`
    loaded: bool = True  # referenced by the analyzed Python (or #included by a loaded source)
    _code: list[str] | None = None

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n")

    def origin_line(self, text_line: int) -> int:
        """1-based text line -> 1-based line in the origin file."""
        if 0 < text_line <= len(self.origins):
            return self.origins[text_line - 1]
        return self.origins[-1] if self.origins else 1

    @property
    def code(self) -> list[str]:
        """Lines with comments blanked out (string literals kept: inline PTX lives in them)."""
        if self._code is None:
            self._code = strip_cpp_comments(self.text).split("\n")
        return self._code

    def find(self, pattern: str | re.Pattern[str]) -> Iterator[tuple[int, int, re.Match[str]]]:
        """Yield (text_line, origin_line, match) for a regex over comment-free code lines."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        for i, line in enumerate(self.code, start=1):
            for m in rx.finditer(line):
                yield i, self.origin_line(i), m

    def has(self, pattern: str) -> bool:
        return next(self.find(pattern), None) is not None

    def origin_text(self, text_line: int) -> str:
        lines = self.lines
        return lines[text_line - 1] if 0 < text_line <= len(lines) else ""


def strip_cpp_comments(text: str) -> str:
    """Blank // and /* */ comments, keeping line structure and string/char literals."""
    out: list[str] = []
    i, n = 0, len(text)
    state = "code"
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if state == "code":
            if c == "/" and nxt == "/":
                state = "line"
                i += 2
                continue
            if c == "/" and nxt == "*":
                state = "block"
                i += 2
                continue
            if c == '"':
                state = "str"
            elif c == "'":
                state = "chr"
            out.append(c)
        elif state == "line":
            if c == "\n":
                state = "code"
                out.append(c)
        elif state == "block":
            if c == "*" and nxt == "/":
                state = "code"
                i += 2
                continue
            if c == "\n":
                out.append(c)
        elif state in ("str", "chr"):
            out.append(c)
            if c == "\\" and nxt:
                out.append(nxt)
                i += 2
                continue
            if (state == "str" and c == '"') or (state == "chr" and c == "'") or c == "\n":
                state = "code"
        i += 1
    return "".join(out)


# --------------------------------------------------------------------------------------------
# Triton kernels
# --------------------------------------------------------------------------------------------


@dataclass
class TritonLoad:
    node: ast.Call
    line: int
    eviction_policy: str | None
    cache_modifier: str | None
    target: str | None  # variable the load is assigned to, if any
    eviction_param: str | None = None  # kernel parameter carrying the policy (resolved at launch sites)


@dataclass
class TritonOperand:
    expr: ast.expr
    casts: list[tuple[str, int]]  # (dtype short name "bf16"/"fp16"/"fp32"/"fp8"..., line) on its def chain
    from_load: bool


@dataclass
class TritonDot:
    node: ast.Call
    line: int
    operands: list[TritonOperand]
    kwargs: dict[str, str]  # input_precision / allow_tf32 / out_dtype (as source text)


@dataclass(eq=False)
class TritonKernel:
    func: FunctionInfo
    loads: list[TritonLoad]
    dots: list[TritonDot]
    dtypes_used: set[str]  # every tl.<dtype> mentioned in the body


_TL_DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "float32": "fp32",
    "float64": "fp64",
    "float8e4nv": "fp8",
    "float8e5": "fp8",
    "float8e4b15": "fp8",
    "float8e4b8": "fp8",
    "float8e5b16": "fp8",
    "int8": "int8",
    "uint8": "uint8",
    "int32": "int32",
    "int16": "int16",
}


# --------------------------------------------------------------------------------------------
# The submission
# --------------------------------------------------------------------------------------------


@dataclass
class Reach:
    """Where a function sits relative to the entry points."""

    live: set[FunctionInfo]
    fallback: set[FunctionInfo]  # reached only through references made from except handlers
    entries: list[FunctionInfo]


@dataclass(eq=False)
class Submission:
    sources: dict[str, str]
    entry: str | None  # "solution.py" when present
    modules: dict[str, PyModule]  # analyzed modules (solution + imported sidecars), keyed by path
    unparsable: dict[str, str]  # path -> syntax error message
    native: list[NativeSource]
    triton: list[TritonKernel]
    closure: SourceClosure | None = None  # the files the submission is made of (graders.sources)
    _reach: Reach | None = None
    _edges: dict[FunctionInfo, list[tuple[FunctionInfo, bool]]] | None = None
    _resolved: dict[tuple[int, int], tuple[ast.expr, list[FunctionInfo]]] = field(default_factory=dict)
    _callers: dict[FunctionInfo, list[tuple[PyModule, FunctionInfo | None, ast.Call]]] | None = None
    _memo: dict[str, object] = field(default_factory=dict)

    # ---- navigation -------------------------------------------------------------------------

    def functions(self) -> Iterator[FunctionInfo]:
        for m in self.modules.values():
            yield from m.functions.values()

    def module_of(self, func: FunctionInfo) -> PyModule:
        return func.module

    def find_class(self, name: str) -> ClassInfo | None:
        if self.entry and self.entry in self.modules and name in self.modules[self.entry].classes:
            return self.modules[self.entry].classes[name]
        for m in self.modules.values():
            if name in m.classes:
                return m.classes[name]
        return None

    def triton_kernel(self, func: FunctionInfo) -> TritonKernel | None:
        for k in self.triton:
            if k.func is func:
                return k
        return None

    # ---- name resolution ----------------------------------------------------------------------

    def qualname(self, expr: ast.expr, scope: Scope | None = None, depth: int = 0) -> str | None:
        """Dotted name of an expression through aliases, assignments, getattr and importlib.

        ``t.cuda.synchronize`` -> ``torch.cuda.synchronize`` after ``import torch as t``;
        ``getattr(torch, "_scaled" + "_mm")`` -> ``torch._scaled_mm``; ``self.w`` -> ``self.w``;
        a function of the submission resolves to ``<module name>.<function name>``.
        """
        if depth > _MAX_DEPTH or scope is None and not self.modules:
            return None
        module = scope.module if scope is not None else self._entry_module()
        if module is None:
            return None
        if scope is None:
            scope = module.scope(None)
        if isinstance(expr, ast.Name):
            name = expr.id
            if scope.func is not None:
                val = scope.latest(name, expr.lineno)
                if val is not None and val is not expr:
                    if name in scope.func.params:
                        pass
                    else:
                        return self.qualname(val, scope, depth + 1)
                if name in scope.func.params:
                    return name
            if name in module.aliases:
                return module.aliases[name]
            if name in module.sidecar_alias:
                path, attr = module.sidecar_alias[name]
                side = self.modules.get(path)
                side_name = side.name if side else posixpath.splitext(posixpath.basename(path))[0]
                return f"{side_name}.{attr}" if attr else side_name
            mscope = module.scope(None)
            val = mscope.latest(name, expr.lineno if scope.func is None else None)
            if val is not None:
                return self.qualname(val, mscope, depth + 1)
            if name in module.functions or name in module.classes:
                return f"{module.name}.{name}"
            return name
        if isinstance(expr, ast.Attribute):
            base = self.qualname(expr.value, scope, depth + 1)
            return f"{base}.{expr.attr}" if base else None
        if isinstance(expr, ast.Call):
            fn = self.qualname(expr.func, scope, depth + 1)
            if fn == "getattr" and len(expr.args) >= 2:
                base = self.qualname(expr.args[0], scope, depth + 1)
                attr = self.fold_str(expr.args[1], scope, depth + 1)
                if base and attr:
                    return f"{base}.{attr}"
                return None
            if fn in ("importlib.import_module", "__import__", "builtins.__import__") and expr.args:
                return self.fold_str(expr.args[0], scope, depth + 1)
            return None
        if isinstance(expr, ast.Subscript):
            # torch.__dict__["_scaled_mm"], vars(torch)["..."], torch.ops.aten["x"]
            key = self.fold_str(expr.slice, scope, depth + 1)
            if key is None:
                return None
            val = expr.value
            if isinstance(val, ast.Attribute) and val.attr == "__dict__":
                base = self.qualname(val.value, scope, depth + 1)
                return f"{base}.{key}" if base else None
            if isinstance(val, ast.Call) and self.qualname(val.func, scope, depth + 1) == "vars" and val.args:
                base = self.qualname(val.args[0], scope, depth + 1)
                return f"{base}.{key}" if base else None
            base = self.qualname(val, scope, depth + 1)
            if base and (base == "sys.modules" or base.startswith("torch.ops")):
                return key if base == "sys.modules" else f"{base}.{key}"
        return None

    def is_obfuscated(self, expr: ast.expr, scope: Scope | None = None) -> bool:
        """True when the name was reached through getattr/importlib/__dict__ rather than spelled."""
        for node in ast.walk(expr):
            if isinstance(node, ast.Call):
                fn = node.func
                if isinstance(fn, ast.Name) and fn.id in ("getattr", "__import__", "vars", "eval", "exec"):
                    return True
                if isinstance(fn, ast.Attribute) and fn.attr == "import_module":
                    return True
            if isinstance(node, ast.Attribute) and node.attr == "__dict__":
                return True
        if isinstance(expr, ast.Name) and scope is not None:
            vals = scope.values_of(expr.id) if scope.func is not None else []
            vals = vals or scope.module.scope(None).values_of(expr.id)
            return any(self.is_obfuscated(v, None) for v in vals if v is not expr)
        if isinstance(expr, ast.Attribute):
            return self.is_obfuscated(expr.value, scope)
        return False

    def fold(self, expr: ast.expr, scope: Scope | None = None, depth: int = 0) -> MappedText | None:
        """Constant-fold a string expression, keeping each line's file origin."""
        if depth > _MAX_DEPTH:
            return None
        module = scope.module if scope is not None else self._entry_module()
        if module is None:
            return None
        if scope is None:
            scope = module.scope(None)
        if isinstance(expr, ast.Constant):
            if isinstance(expr.value, str):
                return _literal_mapped(expr, module)
            if isinstance(expr.value, int | float) and not isinstance(expr.value, bool):
                return MappedText.single(str(expr.value), expr.lineno)
            return None
        if isinstance(expr, ast.Name):
            if scope.func is not None and expr.id not in scope.func.params:
                val = scope.latest(expr.id, expr.lineno)
                if val is not None:
                    return self.fold(val, scope, depth + 1)
            mscope = module.scope(None)
            val = mscope.latest(expr.id)
            if val is not None:
                return self.fold(val, mscope, depth + 1)
            if expr.id in module.sidecar_alias:
                path, attr = module.sidecar_alias[expr.id]
                side = self.modules.get(path)
                if side is not None and attr:
                    sval = side.scope(None).latest(attr)
                    if sval is not None:
                        return self.fold(sval, side.scope(None), depth + 1)
            return None
        if isinstance(expr, ast.Attribute):
            # module constant of an imported sidecar: kern.CUDA_SRC
            if isinstance(expr.value, ast.Name) and expr.value.id in module.sidecar_alias:
                path, attr = module.sidecar_alias[expr.value.id]
                side = self.modules.get(path)
                if side is not None and attr is None:
                    sval = side.scope(None).latest(expr.attr)
                    if sval is not None:
                        return self.fold(sval, side.scope(None), depth + 1)
            return None
        if isinstance(expr, ast.BinOp):
            if isinstance(expr.op, ast.Add):
                left = self.fold(expr.left, scope, depth + 1)
                right = self.fold(expr.right, scope, depth + 1)
                if left is not None and right is not None:
                    return left + right
                return None
            if isinstance(expr.op, ast.Mod):
                left = self.fold(expr.left, scope, depth + 1)
                if left is None:
                    return None
                items = expr.right.elts if isinstance(expr.right, ast.Tuple) else [expr.right]
                values: list[object] = []
                for i in items:
                    if isinstance(i, ast.Constant) and isinstance(i.value, int | float):
                        values.append(i.value)
                        continue
                    folded = self.fold(i, scope, depth + 1)
                    if folded is None:
                        return None
                    values.append(folded.text)
                try:
                    text = left.text % tuple(values)
                except (TypeError, ValueError):
                    return None
                return _remap(text, left)
            return None
        if isinstance(expr, ast.JoinedStr):
            parts: list[MappedText] = []
            for v in expr.values:
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    parts.append(MappedText.single(v.value, expr.lineno))
                elif isinstance(v, ast.FormattedValue):
                    inner = self.fold(v.value, scope, depth + 1)
                    if inner is None:
                        return None
                    parts.append(MappedText.single(inner.text, expr.lineno))
                else:
                    return None
            if not parts:
                return MappedText.single("", expr.lineno)
            text = "".join(p.text for p in parts)
            n = text.count("\n")
            return MappedText(text, [expr.lineno + i if n and _is_triple(module, expr) else expr.lineno for i in range(n + 1)])
        if isinstance(expr, ast.Call):
            fn = expr.func
            if isinstance(fn, ast.Attribute):
                if fn.attr == "join" and len(expr.args) == 1:
                    sep = self.fold(fn.value, scope, depth + 1)
                    seq = self.fold_list(expr.args[0], scope, depth + 1)
                    if sep is None or seq is None:
                        return None
                    out: MappedText | None = None
                    for item in seq:
                        out = item if out is None else out + MappedText.single(sep.text, out.origins[-1]) + item
                    return out or MappedText.single("", expr.lineno)
                if fn.attr == "format":
                    base = self.fold(fn.value, scope, depth + 1)
                    args = [self.fold(a, scope, depth + 1) for a in expr.args]
                    kwargs = {k.arg: self.fold(k.value, scope, depth + 1) for k in expr.keywords if k.arg}
                    if base is None or any(a is None for a in args) or any(v is None for v in kwargs.values()):
                        return None
                    try:
                        text = base.text.format(
                            *[a.text for a in args if a is not None],
                            **{k: v.text for k, v in kwargs.items() if v is not None},
                        )
                    except (IndexError, KeyError, ValueError):
                        return None
                    return _remap(text, base)
                if fn.attr in ("replace", "strip", "lstrip", "rstrip", "upper", "lower"):
                    base = self.fold(fn.value, scope, depth + 1)
                    if base is None:
                        return None
                    args2 = [self.fold(a, scope, depth + 1) for a in expr.args]
                    if any(a is None for a in args2):
                        return None
                    try:
                        text = getattr(base.text, fn.attr)(*[a.text for a in args2 if a is not None])
                    except (TypeError, ValueError):
                        return None
                    return _remap(text, base)
                if fn.attr == "dedent":
                    if expr.args:
                        inner = self.fold(expr.args[0], scope, depth + 1)
                        return inner.dedent() if inner is not None else None
            name = self.qualname(fn, scope, depth + 1)
            if name in ("textwrap.dedent", "inspect.cleandoc") and expr.args:
                inner = self.fold(expr.args[0], scope, depth + 1)
                return inner.dedent() if inner is not None else None
            if name == "str" and expr.args:
                return self.fold(expr.args[0], scope, depth + 1)
            if name in ("bytes.decode",):
                return None
        return None

    def fold_str(self, expr: ast.expr, scope: Scope | None = None, depth: int = 0) -> str | None:
        m = self.fold(expr, scope, depth)
        return m.text if m is not None else None

    def fold_list(self, expr: ast.expr, scope: Scope | None = None, depth: int = 0) -> list[MappedText] | None:
        """Fold a list/tuple of strings (or a name bound to one, or a single string)."""
        if depth > _MAX_DEPTH:
            return None
        module = scope.module if scope is not None else self._entry_module()
        if module is None:
            return None
        if scope is None:
            scope = module.scope(None)
        if isinstance(expr, ast.List | ast.Tuple):
            out: list[MappedText] = []
            for elt in expr.elts:
                if isinstance(elt, ast.Starred):
                    sub = self.fold_list(elt.value, scope, depth + 1)
                    if sub is None:
                        return None
                    out.extend(sub)
                    continue
                v = self.fold(elt, scope, depth + 1)
                if v is None:
                    return None
                out.append(v)
            return out
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
            a = self.fold_list(expr.left, scope, depth + 1)
            b = self.fold_list(expr.right, scope, depth + 1)
            if a is not None and b is not None:
                return a + b
        if isinstance(expr, ast.Name):
            if scope.func is not None and expr.id not in scope.func.params:
                val = scope.latest(expr.id, expr.lineno)
                if val is not None and isinstance(val, ast.List | ast.Tuple | ast.BinOp | ast.Name):
                    return self.fold_list(val, scope, depth + 1)
            mval = module.scope(None).latest(expr.id)
            if mval is not None and isinstance(mval, ast.List | ast.Tuple | ast.BinOp | ast.Name):
                return self.fold_list(mval, module.scope(None), depth + 1)
        single = self.fold(expr, scope, depth + 1)
        return [single] if single is not None else None

    def _entry_module(self) -> PyModule | None:
        if self.entry and self.entry in self.modules:
            return self.modules[self.entry]
        return next(iter(self.modules.values()), None)

    # ---- call graph ---------------------------------------------------------------------------

    def resolve_functions(self, expr: ast.expr, scope: Scope, depth: int = 0) -> list[FunctionInfo]:
        """Functions of the submission an expression may refer to (callee or callback)."""
        if depth == 0:
            key = (id(expr), id(scope))
            hit = self._resolved.get(key)
            if hit is not None and hit[0] is expr:
                return hit[1]
            res = self._resolve_functions(expr, scope, 0)
            self._resolved[key] = (expr, res)
            return res
        return self._resolve_functions(expr, scope, depth)

    def callers(self, target: FunctionInfo) -> list[tuple[PyModule, FunctionInfo | None, ast.Call]]:
        """Every call site resolving to `target` (index built once)."""
        if self._callers is None:
            index: dict[FunctionInfo, list[tuple[PyModule, FunctionInfo | None, ast.Call]]] = {}
            for module, func, node in self.iter_nodes():
                if isinstance(node, ast.Call):
                    for t in self.resolve_functions(node.func, module.scope(func)):
                        index.setdefault(t, []).append((module, func, node))
            self._callers = index
        return self._callers.get(target, [])

    def launch_args(self, kernel: FunctionInfo, param: str) -> list[tuple[PyModule, FunctionInfo | None, ast.Call, ast.expr]]:
        """(module, caller, call, argument expression) for `param` at every launch of a kernel."""
        params = kernel.params
        out: list[tuple[PyModule, FunctionInfo | None, ast.Call, ast.expr]] = []
        if param not in params:
            return out
        idx = params.index(param)
        for module, caller, call in self.callers(kernel):
            arg = next((k.value for k in call.keywords if k.arg == param), None)
            if arg is None and idx < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: idx + 1]):
                arg = call.args[idx]
            if arg is not None:
                out.append((module, caller, call, arg))
        return out

    def possible_strings(self, expr: ast.expr, scope: Scope, depth: int = 0) -> set[str]:
        """Every string an expression may evaluate to: folds, and otherwise follows names, self
        attributes, dict literals / `.get(key, default)`, ternaries (`EVICT=self.evict` where
        `self.evict = _TABLE.get(shape, "evict_first")`)."""
        if depth > 8:
            return set()
        folded = self.fold_str(expr, scope)
        if folded is not None:
            return {folded}
        module = scope.module
        out: set[str] = set()
        if isinstance(expr, ast.IfExp):
            return self.possible_strings(expr.body, scope, depth + 1) | self.possible_strings(expr.orelse, scope, depth + 1)
        if isinstance(expr, ast.Dict):
            for v in expr.values:
                out |= self.possible_strings(v, scope, depth + 1)
            return out
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get":
            out |= self.possible_strings(expr.func.value, scope, depth + 1)
            for a in expr.args[1:]:
                out |= self.possible_strings(a, scope, depth + 1)
            return out
        if isinstance(expr, ast.Subscript):
            return self.possible_strings(expr.value, scope, depth + 1)
        if isinstance(expr, ast.Name):
            vals = scope.values_of(expr.id) if scope.func is not None and expr.id not in scope.func.params else []
            if scope.func is not None and expr.id in scope.func.params:
                return out
            mscope = module.scope(None)
            for v in vals or mscope.values_of(expr.id):
                out |= self.possible_strings(v, scope if vals else mscope, depth + 1)
            return out
        if (
            isinstance(expr, ast.Attribute)
            and isinstance(expr.value, ast.Name)
            and scope.func is not None
            and (cls_name := self_attr_class(scope.func, expr.value.id))
        ):
            for f, v in module.self_assigns(cls_name).get(expr.attr, []):
                out |= self.possible_strings(v, module.scope(f), depth + 1)
        return out

    def _resolve_functions(self, expr: ast.expr, scope: Scope, depth: int = 0) -> list[FunctionInfo]:
        if depth > 6:
            return []
        module = scope.module
        out: list[FunctionInfo] = []
        if isinstance(expr, ast.Subscript):  # kernel[grid](...)
            return self.resolve_functions(expr.value, scope, depth + 1)
        if isinstance(expr, ast.Call):  # functools.partial(f, ...)
            name = self.qualname(expr.func, scope)
            if name in ("functools.partial", "partial") and expr.args:
                return self.resolve_functions(expr.args[0], scope, depth + 1)
            return []
        if isinstance(expr, ast.Name):
            name = expr.id
            if scope.func is not None:
                # nested function defined inside the current function
                nested = module.functions.get(f"{scope.func.name}.{name}")
                if nested is not None:
                    return [nested]
                if name not in scope.func.params:
                    for val in scope.values_of(name):
                        if val is not expr and not isinstance(val, ast.Constant):
                            out.extend(self.resolve_functions(val, scope, depth + 1))
            if name in module.functions:
                out.append(module.functions[name])
            elif name in module.classes:
                out.extend(self._class_entry_methods(module.classes[name], init_only=True))
            elif name in module.sidecar_alias:
                path, attr = module.sidecar_alias[name]
                side = self.modules.get(path)
                if side is not None and attr:
                    if attr in side.functions:
                        out.append(side.functions[attr])
                    elif attr in side.classes:
                        out.extend(self._class_entry_methods(side.classes[attr], init_only=True))
            else:
                for val in module.scope(None).values_of(name):
                    if val is not expr:
                        out.extend(self.resolve_functions(val, module.scope(None), depth + 1))
            return out
        if isinstance(expr, ast.Attribute):
            attr = expr.attr
            base = expr.value
            # self.method / cls.method (a bound helper's first parameter too)
            if isinstance(base, ast.Name) and scope.func is not None and scope.func.self_cls \
                    and scope.func.is_receiver(base.id):
                cls = module.classes.get(scope.func.self_cls)
                if cls is not None:
                    meth = self._method(cls, attr)
                    if meth is not None:
                        return [meth]
                    # self.fn = <function or bound method> stored elsewhere in the class
                    for f, value in module.self_assigns(cls.name).get(attr, []):
                        out.extend(self._instance_or_callable(value, module.scope(f), depth + 1))
                    return out
            # sidecar module attribute: kern.launch
            if isinstance(base, ast.Name) and base.id in module.sidecar_alias:
                path, sattr = module.sidecar_alias[base.id]
                side = self.modules.get(path)
                if side is not None and sattr is None:
                    if attr in side.functions:
                        return [side.functions[attr]]
                    if attr in side.classes:
                        return self._class_entry_methods(side.classes[attr], init_only=True)
            # kernel.run(...), kernel.warmup(...), Fn.apply(...)
            if attr in ("run", "warmup", "apply", "__call__", "fn"):
                targets = self.resolve_functions(base, scope, depth + 1)
                res: list[FunctionInfo] = []
                for t in targets:
                    if t.short == "__init__" and t.cls:
                        cls = t.module.classes.get(t.cls)
                        if cls is not None and attr == "apply":
                            fwd = self._method(cls, "forward")
                            if fwd:
                                res.append(fwd)
                            continue
                    res.append(t)
                if res:
                    return res
            # obj.method where obj is an instance of a submission class
            for cls in self._instance_classes(base, scope, depth + 1):
                meth = self._method(cls, attr)
                if meth is not None:
                    out.append(meth)
            return out
        return out

    def _instance_or_callable(self, value: ast.expr, scope: Scope, depth: int) -> list[FunctionInfo]:
        if isinstance(value, ast.Call):
            classes = self._classes_of_call(value, scope)
            if classes:
                res: list[FunctionInfo] = []
                for c in classes:
                    res.extend(self._class_entry_methods(c))
                return res
        return self.resolve_functions(value, scope, depth)

    def _classes_of_call(self, call: ast.Call, scope: Scope) -> list[ClassInfo]:
        module = scope.module
        fn = call.func
        if isinstance(fn, ast.Name):
            if fn.id in module.classes:
                return [module.classes[fn.id]]
            if fn.id in module.sidecar_alias:
                path, attr = module.sidecar_alias[fn.id]
                side = self.modules.get(path)
                if side is not None and attr and attr in side.classes:
                    return [side.classes[attr]]
        if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id in module.sidecar_alias:
            path, attr = module.sidecar_alias[fn.value.id]
            side = self.modules.get(path)
            if side is not None and attr is None and fn.attr in side.classes:
                return [side.classes[fn.attr]]
        return []

    def _instance_classes(self, expr: ast.expr, scope: Scope, depth: int) -> list[ClassInfo]:
        if depth > 6:
            return []
        module = scope.module
        vals: list[ast.expr] = []
        if isinstance(expr, ast.Name):
            if scope.func is not None:
                vals.extend(scope.values_of(expr.id))
            vals.extend(module.scope(None).values_of(expr.id))
        elif (
            isinstance(expr, ast.Attribute)
            and isinstance(expr.value, ast.Name)
            and scope.func is not None
            and (cls_name := self_attr_class(scope.func, expr.value.id))
        ):
            vals.extend(v for _, v in module.self_assigns(cls_name).get(expr.attr, []))
        out: list[ClassInfo] = []
        for v in vals:
            if isinstance(v, ast.Call):
                out.extend(self._classes_of_call(v, scope))
        return out

    def _method(self, cls: ClassInfo, name: str, depth: int = 0) -> FunctionInfo | None:
        f = cls.module.functions.get(f"{cls.name}.{name}")
        if f is not None or depth > 4:
            return f
        for base in cls.bases:
            short = base.rsplit(".", 1)[-1]
            bcls = self.find_class(short)
            if bcls is not None and bcls is not cls:
                f = self._method(bcls, name, depth + 1)
                if f is not None:
                    return f
        return None

    def _class_entry_methods(self, cls: ClassInfo, init_only: bool = False) -> list[FunctionInfo]:
        names = ["__init__"] if init_only else ["__init__", "__call__", "forward"]
        return [m for n in names if (m := self._method(cls, n)) is not None]

    def edges(self) -> dict[FunctionInfo, list[tuple[FunctionInfo, bool]]]:
        """Reference graph: function -> [(referenced function, made from an except handler)]."""
        if self._edges is not None:
            return self._edges
        edges: dict[FunctionInfo, list[tuple[FunctionInfo, bool]]] = {}
        for func in self.functions():
            module = func.module
            scope = module.scope(func)
            seen: list[tuple[FunctionInfo, bool]] = []
            for node in walk_body(func.node):
                if isinstance(node, ast.Name | ast.Attribute | ast.Subscript) and isinstance(
                    getattr(node, "ctx", None), ast.Load
                ):
                    parent = module.parents.get(node)
                    if isinstance(parent, ast.Attribute | ast.Subscript) and parent.value is node and not (
                        isinstance(parent, ast.Attribute) and parent.attr in ("run", "warmup", "apply")
                    ):
                        # the outer node resolves it (self.m -> handled at `self.m`)
                        if not (isinstance(node, ast.Attribute | ast.Name)):
                            continue
                    targets = self.resolve_functions(node, scope)
                    if targets:
                        exc = module.in_except(node, stop=func.node)
                        for t in targets:
                            if t is not func:
                                seen.append((t, exc))
                elif isinstance(node, ast.Call):
                    for t in self.resolve_functions(node, scope):
                        seen.append((t, module.in_except(node, stop=func.node)))
            # nested functions are reached from their parent
            for other in module.functions.values():
                if other.name.startswith(func.name + ".") and "." not in other.name[len(func.name) + 1 :]:
                    seen.append((other, False))
            edges[func] = seen
        self._edges = edges
        return edges

    def entry_points(self) -> list[FunctionInfo]:
        """Model.forward/__call__ (any class named Model in solution.py), else public functions."""
        mod = self._entry_module()
        if mod is None:
            return []
        out: list[FunctionInfo] = []
        model = mod.classes.get("Model")
        if model is not None:
            for n in ("forward", "__call__"):
                f = self._method(model, n)
                if f is not None:
                    out.append(f)
            if not out:  # stateful decks: step/run/train/decode_steps are the graded calls
                out.extend(f for f in mod.functions.values() if f.cls == "Model" and not f.short.startswith("_"))
        if not out:
            out.extend(f for f in mod.functions.values() if f.cls is None and "." not in f.name and not f.short.startswith("_"))
            out.extend(f for f in mod.functions.values() if f.cls and f.short in ("forward", "__call__"))
        return out

    def reach(self) -> Reach:
        """Functions reached from the entry points: live path, and fallback-only path."""
        if self._reach is not None:
            return self._reach
        edges = self.edges()
        entries = self.entry_points()
        live: set[FunctionInfo] = set()
        stack = list(entries)
        while stack:
            f = stack.pop()
            if f in live:
                continue
            live.add(f)
            for t, exc in edges.get(f, []):
                if not exc and t not in live:
                    stack.append(t)
        fallback: set[FunctionInfo] = set()
        stack = [t for f in live for t, exc in edges.get(f, []) if exc and t not in live]
        while stack:
            f = stack.pop()
            if f in live or f in fallback:
                continue
            fallback.add(f)
            stack.extend(t for t, _ in edges.get(f, []))
        self._reach = Reach(live=live, fallback=fallback, entries=entries)
        return self._reach

    def where(self, func: FunctionInfo | None) -> str:
        """'import' (module level), 'live', 'fallback' or 'unreached'."""
        if func is None:
            return "import"
        r = self.reach()
        if func in r.live:
            return "live"
        if func in r.fallback:
            return "fallback"
        # methods of Model and __init__ are constructed by the harness
        if func.cls == "Model" and func.module.path == self.entry:
            return "live"
        return "unreached"

    def called_by_init(self, func: FunctionInfo) -> bool:
        """Reached from a Model.__init__ (construction time)."""
        mod = self._entry_module()
        if mod is None or "Model" not in mod.classes:
            return False
        init = self._method(mod.classes["Model"], "__init__")
        if init is None:
            return False
        edges = self.edges()
        seen: set[FunctionInfo] = set()
        stack = [init]
        while stack:
            f = stack.pop()
            if f in seen:
                continue
            seen.add(f)
            stack.extend(t for t, _ in edges.get(f, []))
        return func in seen

    # ---- iteration helpers for rules --------------------------------------------------------

    def iter_nodes(self) -> Iterator[tuple[PyModule, FunctionInfo | None, ast.AST]]:
        """Every node of every analyzed module with its enclosing function (None at top level)."""
        for module in self.modules.values():
            for stmt in module.tree.body:
                for node in _walk_toplevel(stmt):
                    yield module, None, node
            for func in module.functions.values():
                for node in walk_body(func.node):
                    yield module, func, node

    def iter_calls(self) -> Iterator[tuple[PyModule, FunctionInfo | None, ast.Call, str | None]]:
        for module, func, node in self.iter_nodes():
            if isinstance(node, ast.Call):
                yield module, func, node, self.qualname(node.func, module.scope(func))

    def loaded_native(self) -> list[NativeSource]:
        return [n for n in self.native if n.loaded]

    def has_custom_kernel(self) -> bool:
        return bool(self.triton) or any(n.loaded and n.kind in ("cuda", "ptx") for n in self.native) or any(
            n.loaded and _looks_like_kernel(n.text) for n in self.native
        )


def _remap(text: str, base: MappedText) -> MappedText:
    n = text.count("\n")
    if n == base.text.count("\n"):
        return MappedText(text, list(base.origins))
    first = base.origins[0] if base.origins else 1
    return MappedText(text, [first] * (n + 1))


def _is_triple(module: PyModule, node: ast.AST) -> bool:
    seg = module.segment(node)
    return '"""' in seg[:6] or "'''" in seg[:6]


def _looks_like_kernel(text: str) -> bool:
    return "__global__" in text or "asm volatile" in text or "asm(" in text or ".entry" in text


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------


def _module_name(path: str) -> str:
    return posixpath.splitext(posixpath.basename(path))[0]


def _literal_name(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
        return node.value
    return None


def _instance_dict_of(node: ast.expr) -> ast.expr | None:
    """X for `X.__dict__` and `vars(X)`."""
    if isinstance(node, ast.Attribute) and node.attr == "__dict__":
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars" and len(node.args) == 1 \
            and not node.keywords:
        return node.args[0]
    return None


class _AttributeAccess(ast.NodeTransformer):
    """Dynamic attribute access with a literal name written as the attribute it is, so every analysis
    sees one form: `getattr(X, "n"[, d])`, `X.__dict__.get("n"[, d])`, `X.__dict__.setdefault("n", d)`,
    `X.__dict__["n"]`, `vars(X)["n"]` -> `X.n`; `setattr(X, "n", v)` as a statement and
    `X.__dict__["n"] = v` -> `X.n = v`. (`setdefault` also stores `d` when `n` is missing: as a read
    of `X.n` that is what the cache analyses need, the container being `X.n`.) Source locations are
    kept, so findings quote the text as written."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Name) and f.id == "getattr" and len(node.args) in (2, 3) and not node.keywords:
            name = _literal_name(node.args[1])
            if name is not None:
                return ast.copy_location(ast.Attribute(value=node.args[0], attr=name, ctx=ast.Load()), node)
        if isinstance(f, ast.Attribute) and f.attr in ("get", "setdefault") and node.args and not node.keywords:
            owner = _instance_dict_of(f.value)
            name = _literal_name(node.args[0])
            if owner is not None and name is not None and len(node.args) <= 2:
                return ast.copy_location(ast.Attribute(value=owner, attr=name, ctx=ast.Load()), node)
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        owner = _instance_dict_of(node.value)
        name = _literal_name(node.slice)
        if owner is not None and name is not None:
            return ast.copy_location(ast.Attribute(value=owner, attr=name, ctx=node.ctx), node)
        return node

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        self.generic_visit(node)
        c = node.value
        if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == "setattr" and len(c.args) == 3 \
                and not c.keywords and (name := _literal_name(c.args[1])) is not None:
            target = ast.copy_location(ast.Attribute(value=c.args[0], attr=name, ctx=ast.Store()), c)
            return ast.copy_location(ast.Assign(targets=[target], value=c.args[2]), node)
        return node


def _desugar_attribute_access(tree: ast.Module) -> ast.Module:
    out = _AttributeAccess().visit(tree)
    ast.fix_missing_locations(out)
    return out


def _parse_module(path: str, source: str, closure: SourceClosure) -> PyModule:
    tree = _desugar_attribute_access(ast.parse(source, filename=path))
    mod = PyModule(path=path, name=_module_name(path), source=source, tree=tree, lines=source.splitlines())
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            mod.parents[child] = parent
    # imports (anywhere in the module: lazy imports inside functions count)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                side = closure.resolve(path, a.name, 0)
                if side is not None and side != path:
                    mod.sidecar_alias[a.asname or a.name.split(".")[0]] = (side, None)
                elif a.asname:
                    mod.aliases[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    mod.aliases.setdefault(top, top)
        elif isinstance(node, ast.ImportFrom):
            modname = node.module or ""
            side = closure.resolve(path, modname, node.level)
            for a in node.names:
                if a.name == "*":
                    continue
                local = a.asname or a.name
                if side is not None and side != path:
                    mod.sidecar_alias[local] = (side, a.name)
                    continue
                sub = closure.resolve(path, f"{modname}.{a.name}" if modname else a.name, node.level)
                if sub is not None and sub != path:
                    mod.sidecar_alias[local] = (sub, None)
                    continue
                if node.level == 0 and modname:
                    mod.aliases[local] = f"{modname}.{a.name}"
    # functions and classes, with dotted names for methods and nested functions
    def visit(body: list[ast.stmt], prefix: str, cls: str | None) -> None:
        for stmt in body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{stmt.name}"
                mod.functions[name] = FunctionInfo(module=mod, name=name, node=stmt, cls=cls)
                visit(stmt.body, name + ".", None)
            elif isinstance(stmt, ast.ClassDef):
                name = f"{prefix}{stmt.name}"
                mod.classes[name] = ClassInfo(module=mod, name=name, node=stmt, bases=[])
                visit(stmt.body, name + ".", name)
            elif isinstance(stmt, ast.If | ast.Try | ast.With | ast.For | ast.While):
                for sub in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(stmt, sub, None)
                    if inner:
                        if sub == "handlers":
                            for h in inner:
                                visit(h.body, prefix, cls)
                        else:
                            visit(inner, prefix, cls)

    visit(tree.body, "", None)
    return mod


def _resolve_decorators_and_bases(sub: Submission) -> None:
    for mod in sub.modules.values():
        top = mod.scope(None)
        for f in mod.functions.values():
            names: list[str] = []
            for d in f.node.decorator_list:
                target = d.func if isinstance(d, ast.Call) else d
                q = sub.qualname(target, top)
                if q:
                    names.append(_canonical_triton(q))
            f.decorators = names
        for c in mod.classes.values():
            c.bases = [q for b in c.node.bases if (q := sub.qualname(b, top))]


def self_attr_class(func: FunctionInfo | None, name: str) -> str | None:
    """The class whose attributes `name.<attr>` reads inside `func`: `self` in a method, the first
    parameter of a bound module-level function; None otherwise."""
    if func is None:
        return None
    if func.cls:
        return func.cls if name == "self" else None
    return func.bound if func.is_receiver(name) else None


def _bind_helpers(sub: Submission) -> None:
    """Module-level functions called with a method's `self` as their first argument
    (`return _impl(self, x)`) are bound to that class: inside them the parameter reads the
    instance's attributes and methods as `self` does in the method. Followed through chains of
    such helpers; a function whose call sites pass instances of different classes stays unbound.
    Direct calls by name only (no call resolution here: it reads the bindings)."""
    for _ in range(4):  # helper -> helper -> helper
        changed = False
        for mod in sub.modules.values():
            seen: dict[str, set[str]] = {}
            for caller in mod.functions.values():
                recv_cls = caller.self_cls
                if recv_cls is None:
                    continue
                for node in walk_body(caller.node):
                    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args):
                        continue
                    target = mod.functions.get(node.func.id)
                    first = node.args[0]
                    if target is None or target.cls is not None or "." in target.name or not isinstance(first, ast.Name):
                        continue
                    if self_attr_class(caller, first.id) is not None:
                        seen.setdefault(target.name, set()).add(recv_cls)
            for name, classes in seen.items():
                f = mod.functions[name]
                new = next(iter(classes)) if len(classes) == 1 else None
                if f.bound != new and (f.node.args.posonlyargs + f.node.args.args):
                    f.bound = new
                    changed = True
        if not changed:
            break
    for mod in sub.modules.values():
        mod._self_assigns.clear()


def _canonical_triton(q: str) -> str:
    # `from triton import jit` -> "triton.jit"; "triton.runtime.jit.jit" -> "triton.jit"
    if q.startswith("triton.") and q.split(".")[-1] in _TRITON_DECOS:
        return "triton." + q.split(".")[-1]
    return q


_LOAD_INLINE = ("load_inline",)
_NVRTC_NAMES = {"RawKernel", "RawModule", "nvrtcCreateProgram", "_create_jit_fn", "compile_cuda", "SourceModule"}


def _collect_native(sub: Submission) -> None:
    covered: set[tuple[str, int]] = set()

    def add(text: MappedText, origin: str, kind: str, via: str) -> None:
        if not text.text.strip():
            return
        key = (origin, text.origins[0])
        if key in covered and via == "string":
            return
        covered.add(key)
        sub.native.append(NativeSource(origin=origin, kind=kind, via=via, text=text.text, origins=list(text.origins)))

    native_paths = [p for p in sub.sources if p.lower().endswith(NATIVE_SUFFIXES)]

    for module, func, call, qual in sub.iter_calls():
        scope = module.scope(func)
        short = (qual or "").rsplit(".", 1)[-1]
        if short in _LOAD_INLINE:
            kw = {k.arg: k.value for k in call.keywords if k.arg}
            cpp = kw.get("cpp_sources", call.args[1] if len(call.args) > 1 else None)
            cuda = kw.get("cuda_sources", call.args[2] if len(call.args) > 2 else None)
            for expr, kind in ((cpp, "cpp"), (cuda, "cuda")):
                if expr is None:
                    continue
                items = sub.fold_list(expr, scope)
                for item in items or []:
                    if kind == "cpp" and _looks_like_kernel(item.text):
                        add(item, module.path, "cuda", "load_inline")
                    else:
                        add(item, module.path, kind, "load_inline")
                    covered.add((module.path, item.origins[0]))
        elif short in _NVRTC_NAMES:
            kw = {k.arg: k.value for k in call.keywords if k.arg}
            code = kw.get("code", kw.get("source", kw.get("src", call.args[0] if call.args else None)))
            if short == "nvrtcCreateProgram" and len(call.args) > 1:
                code = call.args[1] if not isinstance(call.args[0], ast.Constant) else call.args[0]
            if code is not None:
                m = sub.fold(code, scope)
                if m is not None:
                    add(m, module.path, "cuda", "rawkernel" if short in ("RawKernel", "RawModule") else "nvrtc")
    # any string that looks like a kernel and was not captured above is kept too (it reaches a
    # compiler somehow)
    for module in sub.modules.values():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                val = node.value
                if "\n" not in val and len(val) < 300 and val.lower().endswith(NATIVE_SUFFIXES):
                    continue
                if _looks_like_kernel(val) and (module.path, node.lineno) not in covered:
                    lit = _literal_mapped(node, module)
                    if lit is not None:
                        add(lit, module.path, "cuda", "string")
    # sidecar files: loaded when the closure holds them (handed to load(), named by a string,
    # #include'd from a loaded file or an inline source); the others are kept, not loaded
    part = set(sub.closure.files) if sub.closure is not None else set()
    for p in native_paths:
        text = sub.sources[p]
        kind = "ptx" if p.lower().endswith(".ptx") else ("cuda" if p.lower().endswith((".cu", ".cuh")) else "cpp")
        sub.native.append(
            NativeSource(
                origin=p, kind=kind, via="file", text=text, origins=list(range(1, text.count("\n") + 2)), loaded=p in part
            )
        )


def _dtype_short(sub: Submission, expr: ast.expr, scope: Scope) -> str | None:
    q = sub.qualname(expr, scope) or ""
    last = q.rsplit(".", 1)[-1]
    if q.startswith("triton.language.") or q.startswith("tl."):
        return _TL_DTYPES.get(last)
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32"}.get(expr.value)
    return _TL_DTYPES.get(last) if last in _TL_DTYPES else None


def _collect_triton(sub: Submission) -> None:
    for func in list(sub.functions()):
        if not func.is_triton:
            continue
        module = func.module
        scope = module.scope(func)
        loads: list[TritonLoad] = []
        dots: list[TritonDot] = []
        dtypes: set[str] = set()
        for node in walk_body(func.node):
            if isinstance(node, ast.Attribute):
                q = sub.qualname(node, scope) or ""
                if q.startswith("triton.language.") and q.rsplit(".", 1)[-1] in _TL_DTYPES:
                    dtypes.add(_TL_DTYPES[q.rsplit(".", 1)[-1]])
            if not isinstance(node, ast.Call):
                continue
            q = sub.qualname(node.func, scope) or ""
            short = q.rsplit(".", 1)[-1]
            is_tl = q.startswith("triton.language.") or q.startswith("tl.")
            if is_tl and short in ("load", "_experimental_descriptor_load", "async_copy_global_to_local") or (
                isinstance(node.func, ast.Attribute) and node.func.attr == "load" and not is_tl and "desc" in module.segment(node.func.value).lower()
            ):
                kw = {k.arg: k.value for k in node.keywords if k.arg}
                ev = sub.fold_str(kw["eviction_policy"], scope) if "eviction_policy" in kw else None
                ev_param = None
                evx = kw.get("eviction_policy")
                if ev is None and isinstance(evx, ast.Name) and evx.id in func.params:
                    ev_param = evx.id
                cm = sub.fold_str(kw["cache_modifier"], scope) if "cache_modifier" in kw else None
                parent = module.parents.get(node)
                target = None
                if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name):
                    target = parent.targets[0].id
                loads.append(
                    TritonLoad(
                        node=node, line=node.lineno, eviction_policy=ev, cache_modifier=cm, target=target, eviction_param=ev_param
                    )
                )
            elif is_tl and short in ("dot", "dot_scaled"):
                ops = []
                for a in node.args[:2]:
                    casts: list[tuple[str, int]] = []
                    from_load = _operand_chain(sub, a, scope, casts, set(), 0)
                    ops.append(TritonOperand(expr=a, casts=casts, from_load=from_load))
                kws = {k.arg: module.segment(k.value) for k in node.keywords if k.arg}
                dots.append(TritonDot(node=node, line=node.lineno, operands=ops, kwargs=kws))
        loads.sort(key=lambda ld: (ld.line, ld.node.col_offset))
        dots.sort(key=lambda d: (d.line, d.node.col_offset))
        sub.triton.append(TritonKernel(func=func, loads=loads, dots=dots, dtypes_used=dtypes))


def _operand_chain(
    sub: Submission, expr: ast.expr, scope: Scope, casts: list[tuple[str, int]], seen: set[str], depth: int
) -> bool:
    """Walk an operand's definition chain, collecting casts; True when it comes from a load."""
    if depth > 6:
        return False
    from_load = False
    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            fn = node.func
            q = sub.qualname(fn, scope) or ""
            short = q.rsplit(".", 1)[-1]
            if isinstance(fn, ast.Attribute) and fn.attr == "to" and node.args:
                d = _dtype_short(sub, node.args[0], scope)
                if d:
                    casts.append((d, node.lineno))
            elif short == "cast" and len(node.args) >= 2:
                d = _dtype_short(sub, node.args[1], scope)
                if d:
                    casts.append((d, node.lineno))
            elif short in ("load", "_experimental_descriptor_load") or (
                isinstance(fn, ast.Attribute) and fn.attr == "load"
            ):
                from_load = True
        elif isinstance(node, ast.Name) and node.id not in seen:
            seen.add(node.id)
            for val in scope.values_of(node.id):
                if _operand_chain(sub, val, scope, casts, seen, depth + 1):
                    from_load = True
            # augmented updates (a = a.to(...)) are plain assignments and already covered
    return from_load


def build_submission(sources: dict[str, str]) -> Submission:
    """Parse solution.py and the sidecars it loads; collect native sources and Triton kernels.

    Which files are part of the submission and where each import resolves is decided by
    `graders.sources.source_closure`, the definition the graders' forbidden-op scan uses too.
    `sources` stays the archive's whole text (a rule may look up a data file the solution reads).
    """
    entry = "solution.py" if "solution.py" in sources else None
    if entry is None:
        roots = sorted(p for p in sources if p.endswith("/solution.py"))
        entry = roots[0] if roots else None
    sub = Submission(sources=dict(sources), entry=entry, modules={}, unparsable={}, native=[], triton=[])
    if entry is not None:
        # scratch/ is on the path: the run had its files beside solution.py (ingest.run.stage_solution).
        scratch = posixpath.join(posixpath.dirname(entry), "scratch")
        sub.closure = source_closure(sources, entry, path_dirs=(scratch,))
        for path in sub.closure.files:
            if not path.endswith(PY_SUFFIXES):
                continue
            try:
                sub.modules[path] = _parse_module(path, sources[path], sub.closure)
            except (SyntaxError, ValueError) as exc:
                sub.unparsable[path] = str(exc)
    _resolve_decorators_and_bases(sub)
    _bind_helpers(sub)
    _collect_native(sub)
    _collect_triton(sub)
    return sub
