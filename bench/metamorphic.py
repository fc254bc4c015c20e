"""Metamorphic check of the static audit: rewrite every solution without changing what it does, re-audit, compare.

kaudit is judged on runs it has not seen. A rule that understands the code (data flow, what is
cached and returned, live and dead paths) gives the same verdict when the solution's own names
change (`_cache` -> `v17`, `use_fast` -> `v3`); a rule that reads names does not. This script writes
a copy of a corpus folder (labels.json + archives) in which each archive's solution.py has every
name it binds (functions, classes other than `Model`, parameters, variables, Triton constexpr
parameters and the keyword arguments that feed them) replaced by `v<n>`, comments and strings
untouched, then runs bench/fidelity.py on both corpora and lists every run whose verdict moved.

    PYTHONPATH=. python bench/metamorphic.py ../shared/kbh-dev --out /tmp/kbh-renamed [--jobs 2]
    PYTHONPATH=. python bench/metamorphic.py ../shared/kbh-dev --out /tmp/kbh-stripped --transform strip

`--transform strip` removes comments and docstrings instead (the code re-printed by ast.unparse):
a verdict that moves then rested on what the author wrote about the code, which may be legitimate
evidence of intent (a docstring claiming a kernel that does not exist) but never the only kind.

Renaming can break what the solution does at run time (a renamed keyword argument of a torch call);
the static audit never runs it. The corpus copy is written under --out and never committed.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import re
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KEEP = {"self", "cls", "Model", "forward", "get_inputs", "get_init_inputs", "super"}


def bound_names(tree: ast.Module) -> set[str]:
    """Names the module binds itself, minus what is reached as an attribute (methods, class-body
    names: `self.m()` keeps its name), imports, builtins, dunders and the grader's interface."""
    names: set[str] = set()
    skip: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    skip.add(item.name)
                for sub in ast.walk(item) if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) else ():
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                        skip.add(sub.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            skip.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            skip.update(node.names)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            # a keyword-only parameter is reached by its name alone: part of the interface
            skip.update(a.arg for a in node.args.kwonlyargs)
    return {n for n in names - skip - KEEP - set(dir(builtins)) if not n.startswith("__")}


def _callee(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Subscript):  # kernel[grid](...)
        f = f.value
    return f.id if isinstance(f, ast.Name) else None


def rename(source: str) -> str:
    """Every bound name -> v<n>, edited in place at its AST positions (comments and strings kept);
    a keyword argument is renamed only where it feeds a function of the file's own (a Triton
    kernel's constexpr), never a torch call's (`dtype=`, `dim=`)."""
    tree = ast.parse(source)
    mapping = {n: f"v{i}" for i, n in enumerate(sorted(bound_names(tree)))}
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (line, col, old name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in mapping:
            edits.append((node.lineno, node.col_offset, node.id))
        elif isinstance(node, ast.arg) and node.arg in mapping:
            edits.append((node.lineno, node.col_offset, node.arg))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in mapping:
            text = lines[node.lineno - 1]
            kw = "class" if isinstance(node, ast.ClassDef) else "def"
            at = text.find(f"{kw} {node.name}", node.col_offset)
            if at >= 0:
                edits.append((node.lineno, at + len(kw) + 1, node.name))
        elif isinstance(node, ast.Call) and _callee(node) in own:
            for k in node.keywords:
                if k.arg in mapping:
                    edits.append((k.lineno, k.col_offset, k.arg))
    return _apply_edits(lines, [(line, col, old, mapping[old]) for line, col, old in edits])


def _apply_edits(lines: list[str], edits: list[tuple[int, int, str, str]]) -> str:
    """(line, byte column, old text, new text) replaced from the end of the file backwards; an edit
    whose old text is not at its position is left out (a position this simple editor cannot place)."""
    for line, col, old, new in sorted(set(edits), reverse=True):
        b = lines[line - 1].encode()
        if b[col:col + len(old.encode())].decode(errors="replace") != old:
            continue
        lines[line - 1] = (b[:col] + new.encode() + b[col + len(old.encode()):]).decode()
    text = "".join(lines)
    ast.parse(text)  # still Python
    return text


def strip(source: str) -> str:
    """Comments and docstrings gone, the code re-printed (ast.unparse): what the code does, alone."""
    from audit_rules.rules.static._support import strip_docstrings

    tree = ast.parse(source)
    strip_docstrings(tree)
    return ast.unparse(tree) + "\n"


def reorder(source: str) -> str:
    """`strip`, and the module's top-level function definitions in reverse order (each keeps the
    slot of another definition; imports, classes and statements stay where they were)."""
    tree = ast.parse(strip(source))
    slots = [i for i, n in enumerate(tree.body) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    defs = [tree.body[i] for i in slots]
    for i, node in zip(slots, reversed(defs), strict=True):
        tree.body[i] = node
    return ast.unparse(tree) + "\n"


# Attribute names a rename must not touch: the interface of torch objects (`x.shape`, `m.training`,
# `p.data`), of Python objects, and every name that is state (a Parameter or buffer: its name is a
# state_dict key the grader loads by, so renaming it changes what the code does).
_STATE_CALLS = {"register_buffer", "register_parameter"}
_ATTR_FUNCS = {"getattr", "setattr", "hasattr", "delattr"}


def _interface_attrs() -> set[str]:
    names = set(dir(object))
    try:
        import torch

        names |= set(dir(torch.Tensor)) | set(dir(torch.nn.Module)) | set(dir(torch.nn.Parameter))
    except ImportError:  # the static audit needs no torch; without it only Python's own are kept
        pass
    return names


def own_attrs(tree: ast.Module) -> set[str]:
    """Attribute names this module stores itself (`self._cache = ...`, `obj.key = ...`), minus
    state (assigned an `nn.Parameter(...)`, registered by name) and the torch/Python interface."""
    stored: set[str] = set()
    state: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            stored.add(node.attr)
        elif isinstance(node, ast.Assign):
            v = node.value
            if isinstance(v, ast.Call) and isinstance(v.func, (ast.Attribute, ast.Name)) and \
                    (v.func.attr if isinstance(v.func, ast.Attribute) else v.func.id) == "Parameter":
                state.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _STATE_CALLS:
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                state.add(node.args[0].value)
    # an attribute also reached on an imported module (`torch.backends.cudnn.benchmark = True`) is
    # the library's: renaming it there would change what the code does
    imported = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names}
    external: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root: ast.expr = node.value
            while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                root = root.func if isinstance(root, ast.Call) else root.value
            if isinstance(root, ast.Name) and root.id in imported:
                external.add(node.attr)
    return {a for a in stored - state - external - _interface_attrs() if not a.startswith("__")}


def rename_attrs(source: str) -> str:
    """Every attribute name the module stores itself -> a<n> at every use (loads included), and the
    same name where it is the string argument of getattr/setattr/hasattr/delattr; state names
    (Parameters, buffers: state_dict keys) and the torch/Python interface kept. What the code does
    is unchanged; what its author called the cache, the staging buffer or the flag is gone."""
    tree = ast.parse(source)
    mapping = {n: f"a{i}" for i, n in enumerate(sorted(own_attrs(tree)))}
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str, str]] = []  # (line, col, old text, new text)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in mapping and node.end_lineno is not None:
            # the attribute name ends the node's source span: `<value>.<attr>`
            line, end = node.end_lineno, node.end_col_offset or 0
            b = lines[line - 1].encode()
            start = end - len(node.attr.encode())
            if start >= 0 and b[start:end].decode(errors="replace") == node.attr:
                edits.append((line, start, node.attr, mapping[node.attr]))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ATTR_FUNCS \
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in mapping:
            c = node.args[1]
            old = lines[c.lineno - 1].encode()[c.col_offset:c.end_col_offset or 0].decode(errors="replace")
            if len(old) >= 2 and old[0] == old[-1] and old[0] in "'\"" and old[1:-1] == c.value:
                edits.append((c.lineno, c.col_offset, old, old[0] + mapping[c.value] + old[0]))
    return _apply_edits(lines, edits)


class _UsesClassScope(ast.NodeVisitor):
    """True when a method body needs its class's scope (`super()` without arguments, `__class__`,
    a private `__name` that Python would mangle): such a body cannot move out of the class."""

    def __init__(self) -> None:
        self.found = False

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args:
            self.found = True
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "__class__" or (node.id.startswith("__") and not node.id.endswith("__")):
            self.found = True

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr.startswith("__") and not node.attr.endswith("__"):
            self.found = True
        self.generic_visit(node)


def outline(source: str) -> str:
    """The body of each class's `forward` moved into a module-level function the method calls with
    the same arguments (`return _outlined_<Class>_forward(self, x, w)`): the graded entry point is a
    one-line delegation, the work one call further. The code is re-printed (ast.unparse: comments
    go, docstrings stay). Methods whose body needs the class scope (zero-argument super(), name
    mangling) stay as they are."""
    tree = ast.parse(source)
    new_body: list[ast.stmt] = []
    for node in tree.body:
        new_body.append(node)
        if not isinstance(node, ast.ClassDef):
            continue
        for i, item in enumerate(node.body):
            if not (isinstance(item, ast.FunctionDef) and item.name == "forward") or item.decorator_list:
                continue
            scope = _UsesClassScope()
            scope.visit(item)
            if scope.found:
                continue
            name = f"_outlined_{node.name}_forward"
            moved = ast.FunctionDef(name=name, args=item.args, body=item.body, decorator_list=[],
                                    returns=item.returns, type_params=[])
            a = item.args
            call_args: list[ast.expr] = [ast.Name(x.arg, ast.Load()) for x in a.posonlyargs + a.args]
            if a.vararg is not None:
                call_args.append(ast.Starred(ast.Name(a.vararg.arg, ast.Load()), ast.Load()))
            kws = [ast.keyword(x.arg, ast.Name(x.arg, ast.Load())) for x in a.kwonlyargs]
            if a.kwarg is not None:
                kws.append(ast.keyword(None, ast.Name(a.kwarg.arg, ast.Load())))
            call = ast.Call(ast.Name(name, ast.Load()), call_args, kws)
            node.body[i] = ast.FunctionDef(name="forward", args=item.args, body=[ast.Return(call)],
                                           decorator_list=[], returns=item.returns, type_params=[])
            new_body.insert(len(new_body) - 1, moved)  # defined before the class, as a helper would be
    tree.body = new_body
    text = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    ast.parse(text)
    return text


def aliases(source: str) -> str:
    """Every imported name bound under a new alias: `import torch` -> `import torch as m0`,
    `import triton.language as tl` -> `... as m1`, `from torch.utils.cpp_extension import load_inline`
    -> `... import load_inline as m2`, every use of the old name renamed (`torch.mm` -> `m0.mm`).
    `import a.b` (which binds `a`) becomes `import a.b` kept for its side effect plus `import a as mK`.
    The code is re-printed (comments go, docstrings stay). A rule that matches the text `torch.` or
    `tl.` instead of resolving what a name refers to moves here."""
    tree = ast.parse(source)
    mapping: dict[str, str] = {}
    # annotations keep their names (and their imports stay too): Triton's CPU interpreter finds a
    # kernel's constexpr parameters by the annotation's text (`tl.constexpr`), not by its value
    in_annotations = {n.id for a in ast.walk(tree) if isinstance(a, ast.arg) and a.annotation is not None
                      for n in ast.walk(a.annotation) if isinstance(n, ast.Name)}

    def alias_for(name: str) -> str:
        if name not in mapping:
            mapping[name] = f"m{len(mapping)}"
        return mapping[name]

    class Imports(ast.NodeTransformer):
        def visit_Import(self, node: ast.Import) -> Any:
            out: list[ast.stmt] = []
            for a in node.names:
                if a.asname:
                    out.append(ast.Import(names=[ast.alias(a.name, alias_for(a.asname))]))
                elif "." in a.name:
                    root = a.name.split(".")[0]
                    out.append(ast.Import(names=[ast.alias(a.name, None)]))
                    out.append(ast.Import(names=[ast.alias(root, alias_for(root))]))
                else:
                    out.append(ast.Import(names=[ast.alias(a.name, alias_for(a.name))]))
            if any((a.asname or a.name.split(".")[0]) in in_annotations for a in node.names):
                out.insert(0, ast.Import(names=list(node.names)))
            return [ast.copy_location(n, node) for n in out]

        def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
            if node.module == "__future__":
                return node
            names = [a if a.name == "*" else ast.alias(a.name, alias_for(a.asname or a.name)) for a in node.names]
            new = ast.copy_location(ast.ImportFrom(module=node.module, names=names, level=node.level), node)
            if any((a.asname or a.name) in in_annotations for a in node.names):
                return [ast.copy_location(ast.ImportFrom(module=node.module, names=list(node.names), level=node.level), node), new]
            return new

    tree = Imports().visit(tree)

    class Uses(ast.NodeTransformer):
        def visit_arg(self, node: ast.arg) -> Any:
            return node  # its annotation keeps its names (above)

        def visit_Name(self, node: ast.Name) -> Any:
            if node.id in mapping:
                return ast.copy_location(ast.Name(mapping[node.id], node.ctx), node)
            return node

        def visit_Global(self, node: ast.Global) -> Any:
            node.names = [mapping.get(n, n) for n in node.names]
            return node

    tree = Uses().visit(tree)
    text = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    ast.parse(text)
    return text


def _own_functions(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def positional(source: str) -> str:
    """Every keyword argument of a call to one of the module's own top-level functions (a Triton
    kernel's constexprs: `_k[grid](x, y, n, BLOCK=128, EVICT="evict_last")`) passed by position
    instead, where the parameters before it are all given by position (`*args` calls and
    keyword-only parameters left alone). Re-printed (comments go, docstrings stay)."""
    tree = ast.parse(source)
    own = _own_functions(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.keywords:
            continue
        f = node.func.value if isinstance(node.func, ast.Subscript) else node.func
        if not isinstance(f, ast.Name) or f.id not in own or any(isinstance(a, ast.Starred) for a in node.args):
            continue
        params = [a.arg for a in own[f.id].args.posonlyargs + own[f.id].args.args]
        by_name = {k.arg: k for k in node.keywords if k.arg is not None}
        args = list(node.args)
        while len(args) < len(params) and params[len(args)] in by_name:
            args.append(by_name.pop(params[len(args)]).value)
        node.args = args
        node.keywords = [k for k in node.keywords if k.arg is None or k.arg in by_name]
    text = ast.unparse(tree) + "\n"
    ast.parse(text)
    return text


def launchers(source: str) -> str:
    """Every `kernel[grid](...)` launch of the module's own functions made in two steps: the
    configured launcher bound to a name first (`_launch3 = kernel[grid]`), then called
    (`_launch3(...)`). Only launches that are a whole statement, an assignment's value or a return
    value are rewritten. Re-printed (comments go, docstrings stay)."""
    tree = ast.parse(source)
    own = _own_functions(tree)
    count = 0

    def launch(expr: ast.expr | None) -> ast.Call | None:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Subscript) and \
                isinstance(expr.func.value, ast.Name) and expr.func.value.id in own:
            return expr
        return None

    class Hoist(ast.NodeTransformer):
        def generic_visit(self, node: ast.AST) -> ast.AST:
            nonlocal count
            super().generic_visit(node)
            for field in ("body", "orelse", "finalbody"):
                stmts = getattr(node, field, None)
                if not isinstance(stmts, list) or not all(isinstance(x, ast.stmt) for x in stmts):
                    continue
                out: list[ast.stmt] = []
                for st in stmts:
                    call = launch(st.value) if isinstance(st, (ast.Expr, ast.Assign, ast.Return)) else None
                    if call is not None:
                        name = f"_launch{count}"
                        count += 1
                        out.append(ast.copy_location(ast.Assign(targets=[ast.Name(name, ast.Store())],
                                                                value=call.func), st))
                        call.func = ast.Name(name, ast.Load())
                    out.append(st)
                setattr(node, field, out)
            return node

    tree = Hoist().visit(tree)
    text = ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    ast.parse(text)
    return text


_CPP_KERNEL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?(\w+)\s*[(<]")
_CPP_DEVICE = re.compile(
    r"__device__\s+(?:(?:__forceinline__|__inline__|inline|static|const|constexpr)\s+)*"
    r"[\w:]+(?:\s*<[^<>;{}]*>)?[\s*&]+(\w+)\s*\(")
_CPP_KEEP = {"operator", "main", "if", "for", "while", "switch", "return", "sizeof", "void", "int", "float"}


def byte_span(source: str) -> Callable[[ast.AST], tuple[int, int] | None]:
    """`span(node)`: the node's (start, end) byte offsets in `source`'s UTF-8 encoding (ast gives a
    line and a UTF-8 byte column), None for a node without an end position."""
    offsets = [0]
    for ln in source.splitlines(keepends=True):
        offsets.append(offsets[-1] + len(ln.encode()))

    def span(node: ast.AST) -> tuple[int, int] | None:
        end_line, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if end_line is None or end_col is None:
            return None
        return offsets[node.lineno - 1] + node.col_offset, offsets[end_line - 1] + end_col  # type: ignore[attr-defined]

    return span


def _cpp_strings(tree: ast.Module) -> list[ast.Constant]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and ("__global__" in n.value or "__device__" in n.value)]


def cpp_names(source: str) -> str:
    """Every CUDA kernel (`__global__`) and device function (`__device__`) the solution's inline C++
    sources define renamed `kfn<n>`, in every C++ string of the file at once, whole words only. A
    name that also appears anywhere else in the file (Python code, a `functions=[...]` list, any
    other string) keeps its name: it may be reached from outside the C++. What the extension does is
    unchanged (these names never leave the compiled module). ValueError when there is nothing to rename."""
    tree = ast.parse(source)
    raw = source.encode()
    span = byte_span(source)
    spans: list[tuple[int, int]] = []
    names: list[str] = []
    for node in _cpp_strings(tree):
        if (where := span(node)) is None:
            continue
        spans.append(where)
        for m in (*_CPP_KERNEL.finditer(node.value), *_CPP_DEVICE.finditer(node.value)):
            if m.group(1) not in names and m.group(1) not in _CPP_KEEP and not m.group(1).startswith("__"):
                names.append(m.group(1))
    spans.sort()
    outside = b""
    at = 0
    for start, end in spans:
        outside += raw[at:start] + b" "
        at = max(at, end)
    outside += raw[at:]
    names = [n for n in names if not re.search(rb"\b%s\b" % n.encode(), outside)]
    if not names:
        raise ValueError("no C++ kernel or device function names to rename")
    new = {n: f"kfn{i}" for i, n in enumerate(names)}
    word = re.compile(rb"\b(" + b"|".join(re.escape(n.encode()) for n in names) + rb")\b")
    out = bytearray()
    at = 0
    for start, end in spans:
        if start < at:
            continue
        out += raw[at:start] + word.sub(lambda m: new[m.group(1).decode()].encode(), raw[start:end])
        at = end
    out += raw[at:]
    text = out.decode()
    ast.parse(text)
    return text


def combined(source: str) -> str:
    """cpp_names (where the file has inline C++), rename, attrs, positional, launchers, outline,
    aliases in turn: the solution's own names in Python and in its CUDA sources, its attribute
    names, how it passes arguments and launches kernels, the shape of its entry point and the names
    of its imports changed at once (comments dropped, docstrings kept)."""
    try:
        source = cpp_names(source)
    except ValueError:  # no inline C++ names to rename
        pass
    return aliases(outline(launchers(positional(rename_attrs(rename(source))))))


TRANSFORMS = {"rename": rename, "strip": strip, "reorder": reorder, "attrs": rename_attrs, "outline": outline,
              "combined": combined, "aliases": aliases, "positional": positional, "launchers": launchers,
              "cpp_names": cpp_names}


def split_head(text: str) -> tuple[str, str]:
    """(solution.py's own code, the sidecars a public archive appends after banners, verbatim):
    a rewrite touches the first only (a re-printed file would lose the banners that split them)."""
    from graders.runformat import _RULE_LINE, SIDECAR_BANNER

    lines = text.split("\n")
    for i, line in enumerate(lines):
        if SIDECAR_BANNER.match(line.rstrip()):
            cut = i - 1 if i > 0 and _RULE_LINE.match(lines[i - 1].rstrip()) else i
            return "\n".join(lines[:cut]) + "\n", "\n".join(lines[cut:])
    return text, ""


def rewrite_archive(src: Path, dest: Path, transform: str = "rename") -> bool:
    """Copy `src` to `dest` with its solution.py renamed; False when it has none (copied as is)."""
    changed = False
    with tempfile.TemporaryDirectory(prefix="metamorphic-") as tmp, tarfile.open(src) as tin:
        tin.extractall(tmp, filter="data")
        for sol in Path(tmp).rglob("solution.py"):
            if "template_files" in sol.parts or "repo" in sol.parts:
                continue
            try:
                head, tail = split_head(sol.read_text())
                out = TRANSFORMS[transform](head)
                sol.write_text(out + ("\n" + tail if tail else ""))
                changed = True
            except (SyntaxError, UnicodeDecodeError, ValueError):
                pass
        with tarfile.open(dest, "w:gz") as tout:
            for child in sorted(Path(tmp).iterdir()):
                tout.add(child, arcname=child.name)
    return changed


def _verdicts(corpus: Path, decks: list[str], jobs: int) -> dict[str, Any]:
    from bench import fidelity

    with tempfile.TemporaryDirectory(prefix="metamorphic-json-") as tmp:
        out = Path(tmp) / "f.json"
        fidelity.main([str(corpus), "--jobs", str(jobs), "--json", str(out), "--decks", *decks])
        data = json.loads(out.read_text())
    return {r["run_id"]: r for r in data["rows"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--transform", choices=sorted(TRANSFORMS), default="rename",
                    help="rename: every bound name -> v<n>; strip: comments and docstrings removed; "
                         "reorder: strip, and top-level functions in reverse order; attrs: every attribute "
                         "name the solution stores itself -> a<n> (state and torch names kept); outline: "
                         "each forward's body moved into a module-level function it calls (comments dropped); "
                         "aliases: every import bound under a new name; combined: all of these but strip/reorder "
                         "together; positional: keyword arguments of the module's own functions passed by "
                         "position; launchers: kernel[grid] bound to a name before the launch; cpp_names: the "
                         "inline C++ sources' kernel and device function names -> kfn<n>")
    ap.add_argument("--decks", nargs="*", default=None, help="deck folders (default: the corpus's ../kbh-upstream)")
    args = ap.parse_args(argv)
    if args.out.exists():
        shutil.rmtree(args.out)
    (args.out / "archives").mkdir(parents=True)
    shutil.copy(args.corpus / "labels.json", args.out / "labels.json")
    renamed = 0
    for archive in sorted((args.corpus / "archives").glob("*.tar.gz")):
        renamed += rewrite_archive(archive, args.out / "archives" / archive.name, args.transform)
    print(f"# {renamed} solutions rewritten ({args.transform})", flush=True)
    # the decks of the ORIGINAL corpus (bench/fidelity.py's default is relative to the corpus folder)
    upstream = args.corpus.resolve().parent / "kbh-upstream" / "hard"
    decks = args.decks or [str(p) for p in sorted(upstream.glob("problems-*")) if p.is_dir()]
    before, after = _verdicts(args.corpus, decks, args.jobs), _verdicts(args.out, decks, args.jobs)
    moved = [(rid, before[rid]["kaudit"], after.get(rid, {}).get("kaudit")) for rid in sorted(before)
             if before[rid]["kaudit"] != after.get(rid, {}).get("kaudit")]
    print(f"# verdict moved on {len(moved)} of {len(before)} runs")
    for rid, a, b in moved:
        print(f"  {rid}: {a} -> {b} (human {before[rid].get('human')})")
    return 1 if moved else 0


if __name__ == "__main__":
    raise SystemExit(main())
