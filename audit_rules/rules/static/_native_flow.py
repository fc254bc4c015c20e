"""Value tracing through C++/CUDA sources and back into the Python that calls them.

Used to decide whether a native code path is live: the `if` arms guarding a position are found
(a small statement parser over comment-free code), the names in their conditions are traced to
the values the program can give them, and the conditions are evaluated over every combination.

Tracing follows, in order: a function's template parameters (explicit template arguments at
each call or launch site, `k<1, D><<<g, b>>>(...)`), its runtime parameters (argument at each
call site; `(int)x` / `static_cast<int>(x)` casts are transparent), locals assigned once, file-
level `constexpr` / `#define` constants, and macro bodies (a call inside `#define M(a, b) ...` is
evaluated at every expansion of M with a/b substituted). A host function exported to Python
(`load_inline(functions=[...])`, `m.def("name", &fn)`) takes its parameter from every Python
call of `<module>.name` (directly, or through a name or `self` attribute bound to it), and the
Python argument is traced in turn: constants, ternaries, names (locals, module globals, globals
written by functions), `self` attributes, `int()/float()/bool()/str()` conversions and
environment reads: `os.environ.get(K, d)` / `os.getenv(K, d)` give `d` (the grading environment
does not set the solution's own knobs) unless the solution itself writes K.

Every step is conservative: anything not understood makes the value unknown, and an unknown
value keeps the path live. A path is dead only when every combination of traced values makes
one of its guards false.
"""

from __future__ import annotations

import ast
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from audit_rules.source_model import FunctionInfo, NativeSource, PyModule, Submission, self_attr_class

_UNKNOWN: Any = object()
_MAX_DEPTH = 12
_MAX_COMBOS = 512
_CONTROL = frozenset({"if", "for", "while", "switch", "catch", "return", "sizeof", "else", "do", "defined", "alignof", "decltype"})
_TYPE_WORDS = frozenset({
    "int", "unsigned", "signed", "long", "short", "char", "bool", "float", "double", "size_t", "int64_t", "int32_t",
    "uint32_t", "uint64_t", "uint8_t", "int8_t", "int16_t", "uint16_t", "const", "auto",
})  # fmt: skip
_IDENT = re.compile(r"[A-Za-z_]\w*")
_INT = re.compile(r"(0[xX][0-9a-fA-F]+|\d+)[uUlL]*")


@dataclass
class CFunc:
    name: str
    params: list[str]
    tparams: list[str]
    header_start: int
    body_start: int  # offset of '{'
    body_end: int  # offset of the matching '}'


@dataclass
class Macro:
    name: str
    params: list[str] | None
    start: int
    end: int  # the definition spans [start, end)
    body: str


@dataclass
class CUnit:
    src: NativeSource
    code: str  # comment-free text
    masked: str  # string/char literal contents blanked (same offsets)
    struct: str  # masked, with preprocessor lines blanked too
    funcs: list[CFunc]
    macros: list[Macro]

    def func_at(self, pos: int) -> CFunc | None:
        for f in self.funcs:
            if f.body_start < pos < f.body_end:
                return f
        return None

    def macro_at(self, pos: int) -> Macro | None:
        for m in self.macros:
            if m.start <= pos < m.end:
                return m
        return None


@dataclass
class Guard:
    cond: str
    positive: bool  # the position runs when the condition is true (then arm) / false (else arm)


@dataclass
class Flow:
    """One analysis over a submission (caches the parsed native units)."""

    sub: Submission
    units: list[CUnit] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)
    _exports: dict[str, list[str]] | None = None
    _env: Any = _UNKNOWN  # _env_writes(sub), computed once
    _aug: dict[str, set[str]] = field(default_factory=dict)  # module path -> names written with `x op= ...`
    _globals: dict[int, set[str]] = field(default_factory=dict)  # id(function node) -> `global` names

    @classmethod
    def of(cls, sub: Submission) -> Flow:
        cached = getattr(sub, "_native_flow", None)
        if isinstance(cached, Flow):
            cached.trace = []
            return cached
        flow = cls(sub, [_unit(s) for s in sub.native if s.loaded and s.kind in ("cuda", "cpp")])
        try:
            sub._native_flow = flow  # type: ignore[attr-defined]
        except AttributeError:
            pass
        return flow

    def unit_of(self, src: NativeSource) -> CUnit | None:
        return next((u for u in self.units if u.src is src), None)

    def note(self, text: str) -> None:
        if text not in self.trace and len(self.trace) < 12:
            self.trace.insert(0, text)

    # -- liveness ---------------------------------------------------------------------------

    def dead_reason(self, src: NativeSource, pos: int) -> str | None:
        """Why the code at `pos` (offset in the comment-free text) never runs, or None when it may."""
        unit = self.unit_of(src)
        if unit is None or unit.macro_at(pos) is not None:
            return None
        func = unit.func_at(pos)
        if func is None:
            return None
        for guard in reversed(guards(unit, func, pos)):  # innermost (the selecting test) first
            self.trace = []
            names = sorted({t for t in _IDENT.findall(guard.cond) if t not in _TYPE_WORDS and t not in ("true", "false")})
            env: dict[str, set[Any]] = {}
            for n in names:
                vals = self.ident_values(unit, func, n, 0)
                if vals is None:
                    break
                env[n] = vals
            else:
                results = _evaluate_all(guard.cond, env)
                if results is not None and results and all(bool(r) != guard.positive for r in results):
                    shown = ", ".join(f"{n} in {{{', '.join(sorted(map(repr, env[n])))}}}" for n in names)
                    arm = "true" if guard.positive else "false"
                    return f"{func.name} runs it only when `{guard.cond.strip()}` is {arm}, but {shown} on every path"
        return None

    # -- C++ side ---------------------------------------------------------------------------

    def ident_values(self, unit: CUnit, func: CFunc | None, name: str, depth: int) -> set[Any] | None:
        if depth > _MAX_DEPTH:
            return None
        if name in ("true", "false"):
            return {name == "true"}
        if func is not None and name in func.tparams:
            return self._param_values(func, name, func.tparams.index(name), True, depth)
        if func is not None and name in func.params:
            if _single_assignment(unit.struct, func.body_start, func.body_end, name) is not None:
                return None  # the parameter is written in the body: its value is not the caller's
            return self._param_values(func, name, func.params.index(name), False, depth)
        if func is not None:
            local = _single_assignment(unit.struct, func.body_start, func.body_end, name)
            if isinstance(local, str):
                return None
            if local is not None:
                return self.expr_values(unit, local[0], local[1], depth + 1)
        return self._file_constant(unit, name, depth)

    def _file_constant(self, unit: CUnit, name: str, depth: int) -> set[Any] | None:
        for m in unit.macros:
            if m.name == name and m.params is None:
                return self.expr_values(unit, m.body, m.start, depth + 1)
        rx = re.compile(r"(?:^|[;}\s])(?:static\s+|inline\s+)*(?:constexpr|const)\s+[\w:<>\s]*?\b" + re.escape(name) + r"\s*=\s*([^;{}]+);")
        for mt in rx.finditer(unit.struct):
            if unit.func_at(mt.start()) is None:
                return self.expr_values(unit, unit.code[mt.start(1) : mt.end(1)], mt.start(1), depth + 1)
        return None

    def _param_values(self, func: CFunc, name: str, idx: int, template: bool, depth: int) -> set[Any] | None:
        out: set[Any] = set()
        sites = 0
        for unit, pos, targs, args in self.call_sites(func):
            sites += 1
            lst = targs if template else args
            if lst is None or idx >= len(lst):
                return None  # deduced template argument or a defaulted parameter: not followed
            vals = self.expr_values(unit, lst[idx], pos, depth + 1)
            if vals is None:
                return None
            out |= vals
        if not template:
            py = self.python_values(func, name, idx, depth)
            if py is _UNKNOWN:
                return None
            if py is not None:
                sites += 1
                out |= py
        if sites == 0:
            return None
        self.note(f"{func.name}({name})")
        return out

    def call_sites(self, func: CFunc) -> list[tuple[CUnit, int, list[str] | None, list[str]]]:
        """(unit, offset, template args or None, call args) for every call / launch of `func`."""
        out: list[tuple[CUnit, int, list[str] | None, list[str]]] = []
        rx = re.compile(r"\b" + re.escape(func.name) + r"\b")
        for unit in self.units:
            text = unit.masked
            for m in rx.finditer(text):
                pos = m.start()
                if unit.func_at(pos) is None and unit.macro_at(pos) is None:
                    continue  # a declaration or the definition itself
                if text[max(0, pos - 40) : pos].rstrip().endswith(("&", "::", ".", "->")):
                    continue  # address taken / a member of something else
                i = _skip_ws(text, m.end())
                targs: list[str] | None = None
                if text.startswith("<", i) and not text.startswith("<<<", i):
                    j = _match(text, i, "<", ">")
                    if j < 0:
                        continue
                    targs = _split_args(unit.code[i + 1 : j])
                    i = _skip_ws(text, j + 1)
                if text.startswith("<<<", i):
                    j = text.find(">>>", i)
                    if j < 0:
                        continue
                    i = _skip_ws(text, j + 3)
                if not text.startswith("(", i):
                    continue
                j = _match(text, i, "(", ")")
                if j < 0:
                    continue
                out.append((unit, pos, targs, _split_args(unit.code[i + 1 : j])))
        return out

    def expr_values(self, unit: CUnit, expr: str, pos: int, depth: int) -> set[Any] | None:
        """Values of a C++ expression written at `pos` (inside a function or a macro body)."""
        if depth > _MAX_DEPTH:
            return None
        macro = unit.macro_at(pos)
        if macro is not None:
            out: set[Any] = set()
            expansions = self.expansions(macro)
            if not expansions:
                return None
            for eunit, epos, eargs in expansions:
                text = expr
                if macro.params:
                    if len(eargs) != len(macro.params):
                        return None
                    text = _substitute(expr, dict(zip(macro.params, eargs, strict=True)))
                vals = self.expr_values(eunit, text, epos, depth + 1)
                if vals is None:
                    return None
                out |= vals
            return out
        func = unit.func_at(pos)
        names = sorted({t for t in _IDENT.findall(_strip_strings(expr)) if t not in _TYPE_WORDS})
        env: dict[str, set[Any]] = {}
        for n in names:
            if n in ("static_cast", "reinterpret_cast"):
                continue
            vals = self.ident_values(unit, func, n, depth + 1)
            if vals is None:
                return None
            env[n] = vals
        results = _evaluate_all(expr, env)
        return set(results) if results is not None else None

    def expansions(self, macro: Macro) -> list[tuple[CUnit, int, list[str]]]:
        """(unit, offset, arguments) for every use of a macro outside #define/#undef/#ifdef lines."""
        out: list[tuple[CUnit, int, list[str]]] = []
        rx = re.compile(r"\b" + re.escape(macro.name) + r"\b")
        for unit in self.units:
            text = unit.masked
            for m in rx.finditer(text):
                head = text[max(0, m.start() - 200) : m.start()]
                if re.search(r"#\s*(define|undef|ifdef|ifndef)\s*$", head) or re.search(r"#\s*(if|elif)\b[^\n]*$", head):
                    continue
                if macro.params is None:
                    out.append((unit, m.start(), []))
                    continue
                i = _skip_ws(text, m.end())
                if not text.startswith("(", i):
                    continue
                j = _match(text, i, "(", ")")
                if j < 0:
                    continue
                out.append((unit, m.start(), _split_args(unit.code[i + 1 : j])))
        return out

    # -- Python side ------------------------------------------------------------------------

    def exported_names(self, cname: str) -> list[str]:
        """Python names under which a C++ function is exported (load_inline functions=, m.def)."""
        if self._exports is None:
            table: dict[str, list[str]] = {}
            for module, func, call, qual in self.sub.iter_calls():
                if (qual or "").rsplit(".", 1)[-1] != "load_inline":
                    continue
                fns = next((k.value for k in call.keywords if k.arg == "functions"), call.args[3] if len(call.args) > 3 else None)
                for item in (self.sub.fold_list(fns, module.scope(func)) or []) if fns is not None else []:
                    table.setdefault(item.text, []).append(item.text)
            rx = re.compile(r"\.def\s*\(\s*\"(\w+)\"\s*,\s*&?\s*(?:\w+::)*(\w+)\b")
            for unit in self.units:
                for m in rx.finditer(unit.code):
                    table.setdefault(m.group(2), []).append(m.group(1))
            self._exports = table
        return sorted(set(self._exports.get(cname, [])))

    def env_writes(self) -> Any:
        if self._env is _UNKNOWN:
            self._env = _env_writes(self.sub)
        return self._env

    def aug_assigned(self, module: PyModule, name: str) -> bool:
        names = self._aug.get(module.path)
        if names is None:
            names = {n.target.id for n in ast.walk(module.tree) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
            self._aug[module.path] = names
        return name in names

    def declares_global(self, func: FunctionInfo, name: str) -> bool:
        names = self._globals.get(id(func.node))
        if names is None:
            names = {g for n in ast.walk(func.node) if isinstance(n, ast.Global) for g in n.names}
            self._globals[id(func.node)] = names
        return name in names

    def python_values(self, func: CFunc, name: str, idx: int, depth: int) -> set[Any] | None | Any:
        """Values the Python calls pass for parameter `idx`; None when the function is not exported,
        _UNKNOWN when some call cannot be followed."""
        pynames = self.exported_names(func.name)
        if not pynames:
            return None
        sites = _py_sites(self.sub, set(pynames))
        if sites is None or not sites:
            return _UNKNOWN
        out: set[Any] = set()
        for module, caller, call in sites:
            arg = next((k.value for k in call.keywords if k.arg == name), None)
            if arg is None:
                if any(isinstance(a, ast.Starred) for a in call.args[: idx + 1]) or idx >= len(call.args):
                    return _UNKNOWN
                arg = call.args[idx]
            vals = py_values(self, module, caller, arg, depth + 1)
            if vals is None:
                return _UNKNOWN
            self.note(f"Python {module.path}:{call.lineno} passes {module.segment(arg)}")
            out |= vals
        return out


# -- Python value tracing ----------------------------------------------------------------------


def py_values(flow: Flow, module: PyModule, func: FunctionInfo | None, expr: ast.expr, depth: int) -> set[Any] | None:
    sub = flow.sub
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.Constant):
        return {expr.value}
    if isinstance(expr, ast.IfExp):
        a = py_values(flow, module, func, expr.body, depth + 1)
        b = py_values(flow, module, func, expr.orelse, depth + 1)
        return None if a is None or b is None else a | b
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub | ast.Not):
        v = py_values(flow, module, func, expr.operand, depth + 1)
        if v is None:
            return None
        try:
            return {(-x if isinstance(expr.op, ast.USub) else (not x)) for x in v}
        except TypeError:
            return None
    if isinstance(expr, ast.Call):
        env = _env_read(sub, module, func, expr)
        if env is not None:
            key, default = env
            written = flow.env_writes()
            if written is None:
                return None
            vals: set[Any] = set()
            if default is None:
                vals.add(None)
            else:
                d = py_values(flow, module, func, default, depth + 1)
                if d is None:
                    return None
                vals |= d
            for mod, fn, w in written.get(key, []):
                wv = py_values(flow, mod, fn, w, depth + 1)
                if wv is None:
                    return None
                vals |= wv
            flow.note(f"environment {key} unset -> default" if key not in written else f"environment {key}")
            return vals
        if isinstance(expr.func, ast.Name) and expr.func.id in ("int", "float", "bool", "str") and len(expr.args) == 1 and not expr.keywords:
            inner = py_values(flow, module, func, expr.args[0], depth + 1)
            if inner is None:
                return None
            conv = {"int": int, "float": float, "bool": bool, "str": str}[expr.func.id]
            try:
                return {conv(x) for x in inner}
            except (TypeError, ValueError):
                return None
        return None
    if isinstance(expr, ast.Name):
        return _py_name_values(flow, module, func, expr.id, depth)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and (cls_name := self_attr_class(func, expr.value.id)):
        assigns: list[tuple[FunctionInfo | None, ast.expr]] = list(module.self_assigns(cls_name).get(expr.attr, []))
        return _union_values(flow, module, assigns, depth)
    return None


def _union_values(flow: Flow, module: PyModule, defs: list[tuple[FunctionInfo | None, ast.expr]],
                  depth: int) -> set[Any] | None:
    """Every value the definitions can give; None when there are none or one is not followable."""
    if not defs:
        return None
    out: set[Any] = set()
    for where, value in defs:
        vals = py_values(flow, module, where, value, depth + 1)
        if vals is None:
            return None
        out |= vals
    return out


def _py_name_values(flow: Flow, module: PyModule, func: FunctionInfo | None, name: str, depth: int) -> set[Any] | None:
    if func is not None and name in func.params:
        return None  # a parameter of a Python function: not followed here
    if flow.aug_assigned(module, name):
        return None  # `x += 1` somewhere: not a set of constants
    local = module.scope(func).values_of(name) if func is not None else []
    defs: list[tuple[FunctionInfo | None, ast.expr]]
    if func is not None and local and not flow.declares_global(func, name):
        defs = [(func, v) for v in local]
    else:
        defs = [(None, v) for v in module.scope(None).values_of(name)]
        for f in module.functions.values():  # `global X; X = ...` inside a function
            if flow.declares_global(f, name):
                defs += [(f, v) for v in module.scope(f).values_of(name)]
    return _union_values(flow, module, defs, depth)


def _is_environ(sub: Submission, module: PyModule, func: FunctionInfo | None, expr: ast.expr) -> bool:
    q = sub.qualname(expr, module.scope(func)) or ""
    return q == "os.environ" or q.endswith(".environ") or (isinstance(expr, ast.Attribute) and expr.attr == "environ")


def _env_read(sub: Submission, module: PyModule, func: FunctionInfo | None, call: ast.Call) -> tuple[str, ast.expr | None] | None:
    """(key, default expression) for `os.environ.get(K, d)` / `os.getenv(K, d)` with a folded key."""
    f = call.func
    is_get = isinstance(f, ast.Attribute) and f.attr == "get" and _is_environ(sub, module, func, f.value)
    q = sub.qualname(f, module.scope(func)) or ""
    is_getenv = q in ("os.getenv",) or (isinstance(f, ast.Attribute) and f.attr == "getenv")
    if not (is_get or is_getenv) or not call.args:
        return None
    key = sub.fold_str(call.args[0], module.scope(func))
    if key is None:
        return None
    default = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "default"), None)
    return key, default


def _env_writes(sub: Submission) -> dict[str, list[tuple[PyModule, FunctionInfo | None, ast.expr]]] | None:
    """Keys the solution writes into its own environment, with the values; None when a write
    cannot be read (a computed key, `os.environ.update(...)`)."""
    out: dict[str, list[tuple[PyModule, FunctionInfo | None, ast.expr]]] = {}
    for module, func, node in sub.iter_nodes():
        scope = module.scope(func)
        if isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Subscript) and _is_environ(sub, module, func, t.value):
                    key = sub.fold_str(t.slice, scope)
                    if key is None:
                        return None
                    out.setdefault(key, []).append((module, func, node.value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr in ("setdefault", "update") and _is_environ(sub, module, func, node.func.value) or attr == "putenv":
                if attr == "update" or len(node.args) < 2:
                    return None
                key = sub.fold_str(node.args[0], scope)
                if key is None:
                    return None
                out.setdefault(key, []).append((module, func, node.args[1]))
    return out


def _py_sites(sub: Submission, pynames: set[str]) -> list[tuple[PyModule, FunctionInfo | None, ast.Call]] | None:
    """Every Python call of an exported native function, reached as `<x>.name(...)`, through a name
    bound to `<x>.name` (local, module global, or a global set by a function) or a `self`
    attribute bound to it. None when the function object escapes some other way."""
    aliases: set[str] = set()
    self_attrs: set[str] = set()
    for module in sub.modules.values():
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Attribute) and node.attr in pynames and isinstance(node.ctx, ast.Load)):
                continue
            parent = module.parents.get(node)
            if isinstance(parent, ast.Call) and parent.func is node:
                continue
            if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1:
                t = parent.targets[0]
                if isinstance(t, ast.Name):
                    aliases.add(t.id)
                    continue
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    self_attrs.add(t.attr)
                    continue
            return None  # stored in a container, passed along, wrapped: not followed
    out: list[tuple[PyModule, FunctionInfo | None, ast.Call]] = []
    for module, func, node in sub.iter_nodes():
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in pynames:
            out.append((module, func, node))
        elif isinstance(f, ast.Name) and f.id in aliases:
            out.append((module, func, node))
        elif isinstance(f, ast.Attribute) and f.attr in self_attrs and isinstance(f.value, ast.Name) and f.value.id == "self":
            out.append((module, func, node))
    return out


# -- C++ structure -----------------------------------------------------------------------------


def _unit(src: NativeSource) -> CUnit:
    code = "\n".join(src.code)
    masked = _strip_strings(code)
    macros: list[Macro] = []
    struct_chars = list(masked)
    for m in re.finditer(r"(?m)^[ \t]*#", masked):
        start = m.start()
        end = start
        while True:
            nl = masked.find("\n", end)
            if nl < 0:
                end = len(masked)
                break
            if masked[nl - 1 : nl] == "\\":
                end = nl + 1
                continue
            end = nl
            break
        for k in range(start, end):
            if struct_chars[k] != "\n":
                struct_chars[k] = " "
        d = re.match(r"[ \t]*#\s*define\s+(\w+)(\([^)]*\))?", masked[start:end])
        if d:
            params = [p.strip() for p in d.group(2)[1:-1].split(",") if p.strip()] if d.group(2) else None
            body = code[start + d.end() : end].replace("\\\n", " \n")
            macros.append(Macro(d.group(1), params, start, end, body))
    struct = "".join(struct_chars)
    # line continuations read as blanks from here on (offsets kept)
    code, masked, struct = (re.sub(r"\\(?=\n)", " ", t) for t in (code, masked, struct))
    for mac in macros:
        mac.body = mac.body.replace("\\\n", " \n")
    return CUnit(src, code, masked, struct, _functions(struct, code), macros)


def _functions(struct: str, code: str) -> list[CFunc]:
    out: list[CFunc] = []
    i = 0
    n = len(struct)
    while i < n:
        c = struct[i]
        if c != "{":
            i += 1
            continue
        k = i - 1
        while k >= 0 and struct[k] not in ";{}":
            k -= 1
        header = struct[k + 1 : i]
        f = _parse_header(header, k + 1, code)
        end = _match(struct, i, "{", "}")
        if end < 0:
            break
        if f is not None:
            f.body_start, f.body_end = i, end
            out.append(f)
            i = end + 1
            continue
        i += 1  # namespace / extern "C" / struct body: look inside
    return out


def _parse_header(header: str, offset: int, code: str) -> CFunc | None:
    h = header.rstrip()
    h = re.sub(r"(\s*(const|noexcept|override|final|mutable))+$", "", h)
    if not h.endswith(")"):
        return None
    close = len(h) - 1
    depth = 0
    open_ = -1
    for j in range(close, -1, -1):
        if h[j] == ")":
            depth += 1
        elif h[j] == "(":
            depth -= 1
            if depth == 0:
                open_ = j
                break
    if open_ < 0:
        return None
    m = re.search(r"([A-Za-z_]\w*)\s*$", h[:open_])
    if m is None or m.group(1) in _CONTROL or m.group(1) == "__launch_bounds__":
        return None
    before = h[: m.start()]
    if "=" in before.split(")")[-1] or not before.strip():
        return None  # an initializer / a bare call expression, not a definition
    params = [p for p in (_decl_name(a) for a in _split_args(code[offset + open_ + 1 : offset + close])) if p]
    tparams: list[str] = []
    t = re.search(r"template\s*<", before)
    if t:
        j = _match(before, t.end() - 1, "<", ">")
        if j > 0:
            tparams = [p for p in (_decl_name(a) for a in _split_args(before[t.end() : j])) if p]
    return CFunc(m.group(1), params, tparams, offset, -1, -1)


def _decl_name(decl: str) -> str | None:
    d = decl.split("=")[0]
    d = re.sub(r"\[[^\]]*\]", "", d).strip()
    if not d or d == "void" or d == "...":
        return None
    m = re.search(r"([A-Za-z_]\w*)\s*$", d)
    return m.group(1) if m and m.group(1) not in _TYPE_WORDS else None


def guards(unit: CUnit, func: CFunc, pos: int) -> list[Guard]:
    """The if-conditions (with the arm taken) on the path from the function's top to `pos`."""
    out: list[Guard] = []
    text = unit.struct
    i = func.body_start + 1
    end = func.body_end
    while i < end:
        i = _skip_ws(text, i)
        if i >= end:
            break
        s = _statement(text, i, end)
        if s is None:
            return out
        kind, s_end, parts = s
        if not (i <= pos < s_end):
            i = s_end
            continue
        if kind == "block":
            i, end = i + 1, s_end - 1
            continue
        if kind == "if":
            cond_span, then_span, else_span = parts
            if cond_span[0] <= pos < cond_span[1]:
                return out
            if then_span[0] <= pos < then_span[1]:
                out.append(Guard(unit.code[cond_span[0] : cond_span[1]], True))
                i, end = then_span
                continue
            if else_span is not None and else_span[0] <= pos < else_span[1]:
                out.append(Guard(unit.code[cond_span[0] : cond_span[1]], False))
                i, end = else_span
                continue
            return out
        if kind == "loop":
            i, end = parts[0]
            continue
        return out
    return out


def _statement(text: str, i: int, end: int) -> tuple[str, int, Any] | None:
    """(kind, end offset, parts) of the statement starting at i."""
    if text[i] == "{":
        j = _match(text, i, "{", "}")
        return ("block", j + 1, None) if j >= 0 else None
    m = _IDENT.match(text, i)
    word = m.group(0) if m else ""
    if word == "if":
        k = _skip_ws(text, m.end()) if m else i
        c = re.match(r"constexpr\b", text[k:])
        if c:
            k = _skip_ws(text, k + c.end())
        if not text.startswith("(", k):
            return None
        close = _match(text, k, "(", ")")
        if close < 0:
            return None
        t0 = _skip_ws(text, close + 1)
        then = _statement(text, t0, end)
        if then is None:
            return None
        after = _skip_ws(text, then[1])
        e = re.match(r"else\b", text[after:])
        if e:
            e0 = _skip_ws(text, after + e.end())
            els = _statement(text, e0, end)
            if els is None:
                return None
            return ("if", els[1], ((k + 1, close), (t0, then[1]), (e0, els[1])))
        return ("if", then[1], ((k + 1, close), (t0, then[1]), None))
    if word in ("for", "while", "switch"):
        k = _skip_ws(text, m.end()) if m else i
        if not text.startswith("(", k):
            return None
        close = _match(text, k, "(", ")")
        if close < 0:
            return None
        b0 = _skip_ws(text, close + 1)
        body = _statement(text, b0, end)
        return ("loop", body[1], ((b0, body[1]),)) if body is not None else None
    if word == "do":
        b0 = _skip_ws(text, m.end()) if m else i
        body = _statement(text, b0, end)
        if body is None:
            return None
        semi = _scan_semicolon(text, body[1], end)
        return ("loop", semi, ((b0, body[1]),)) if semi >= 0 else None
    j = _scan_semicolon(text, i, end)
    return ("other", j, None) if j >= 0 else None


def _scan_semicolon(text: str, i: int, end: int) -> int:
    depth = 0
    while i < end:
        c = text[i]
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth < 0:
                return i
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return end


def _single_assignment(struct: str, start: int, end: int, name: str) -> tuple[str, int] | str | None:
    """(initializer, offset) when a local is declared with an initializer and never written again;
    "" when it is written in other ways (unknown); None when it is not a local at all."""
    body = struct[start:end]
    writes = [
        m for m in re.finditer(r"(?<![\w.>])" + re.escape(name) + r"\s*(=(?!=)|\+=|-=|\*=|/=|%=|\^=|\|=|&=|<<=|>>=|\+\+|--)", body)
    ]
    pre = list(re.finditer(r"(\+\+|--|(?<![&\w)\]])&)\s*" + re.escape(name) + r"\b", body))  # ++x, &x (escapes)
    decl = re.compile(r"(?:[\w:<>]+[\s*&]+)+$")
    if not writes:
        return None
    if len(writes) != 1 or pre:
        return ""
    w = writes[0]
    line_start = body.rfind("\n", 0, w.start()) + 1
    seg_start = max(body.rfind(";", 0, w.start()), body.rfind("{", 0, w.start()), body.rfind("}", 0, w.start()), line_start - 1) + 1
    if not decl.search(body[seg_start : w.start()].strip() + " ") or w.group(1) != "=":
        return ""
    semi = _scan_semicolon(body, w.end(), len(body))
    return (body[w.end() : semi - 1], start + w.end())


# -- expressions -------------------------------------------------------------------------------

_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+[uUlL]*|\d+\.\d*[fF]?|\d+[uUlL]*|[A-Za-z_]\w*(?:::\w+)*|&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%<>!~&|^()?:,])")


def _tokens(expr: str) -> list[str] | None:
    out: list[str] = []
    i = 0
    s = expr.strip()
    while i < len(s):
        m = _TOKEN.match(s, i)
        if m is None:
            if s[i:].strip() == "":
                break
            return None
        out.append(m.group(1))
        i = m.end()
    return out


_BINARY = {
    "||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, ">": 7, "<=": 7, ">=": 7,
    "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
}  # fmt: skip


class _Parser:
    def __init__(self, toks: list[str], env: dict[str, Any]) -> None:
        self.t = toks
        self.i = 0
        self.env = env

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self) -> str:
        tok = self.t[self.i]
        self.i += 1
        return tok

    def parse(self) -> Any:
        v = self.ternary()
        return v if self.peek() is None else _UNKNOWN

    def ternary(self) -> Any:
        c = self.binary(1)
        if self.peek() == "?":
            self.take()
            a = self.ternary()
            if self.peek() != ":":
                return _UNKNOWN
            self.take()
            b = self.ternary()
            if c is _UNKNOWN:
                return _UNKNOWN
            return a if c else b
        return c

    def binary(self, prec: int) -> Any:
        left = self.unary()
        while True:
            op = self.peek()
            p = _BINARY.get(op or "")
            if op is None or p is None or p < prec:
                return left
            self.take()
            right = self.binary(p + 1)
            left = _apply(op, left, right)

    def unary(self) -> Any:
        tok = self.peek()
        if tok is None:
            return _UNKNOWN
        if tok in ("!", "-", "~", "+"):
            self.take()
            v = self.unary()
            if v is _UNKNOWN:
                return _UNKNOWN
            return {"!": lambda x: not x, "-": lambda x: -x, "~": lambda x: ~int(x), "+": lambda x: x}[tok](v)
        if tok == "(":
            # a cast `(int)x` / `(const int64_t)x`
            j = self.i + 1
            while j < len(self.t) and self.t[j] in _TYPE_WORDS:
                j += 1
            if j > self.i + 1 and j < len(self.t) and self.t[j] == ")":
                self.i = j + 1
                return self.unary()
            self.take()
            v = self.ternary()
            if self.peek() != ")":
                return _UNKNOWN
            self.take()
            return v
        if tok in ("static_cast", "reinterpret_cast"):
            self.take()
            if self.peek() != "<":
                return _UNKNOWN
            while self.peek() not in (None, ">"):
                self.take()
            if self.peek() is None:
                return _UNKNOWN
            self.take()
            return self.unary()
        self.take()
        m = _INT.fullmatch(tok)
        if m:
            return int(m.group(1), 0)
        if re.fullmatch(r"\d+\.\d*[fF]?", tok):
            return float(tok.rstrip("fF"))
        if tok in ("true", "false"):
            return tok == "true"
        if _IDENT.fullmatch(tok):
            if self.peek() == "(":
                return _UNKNOWN  # a call
            return self.env.get(tok, _UNKNOWN)
        return _UNKNOWN


def _apply(op: str, a: Any, b: Any) -> Any:
    if op == "&&" and a is not _UNKNOWN and not a:
        return False
    if op == "||" and a is not _UNKNOWN and a:
        return True
    if a is _UNKNOWN or b is _UNKNOWN:
        return _UNKNOWN
    try:
        if op == "&&":
            return bool(b)
        if op == "||":
            return bool(b)
        if op == "==":
            return a == b
        if op == "!=":
            return a != b
        if op == "<":
            return a < b
        if op == ">":
            return a > b
        if op == "<=":
            return a <= b
        if op == ">=":
            return a >= b
        if op in ("/", "%") and b == 0:
            return _UNKNOWN
        ia, ib = (int(a), int(b)) if op in ("|", "^", "&", "<<", ">>") else (a, b)
        return {
            "|": lambda: ia | ib, "^": lambda: ia ^ ib, "&": lambda: ia & ib, "<<": lambda: ia << ib, ">>": lambda: ia >> ib,
            "+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
            "/": lambda: (int(a / b) if isinstance(a, int) and isinstance(b, int) else a / b),
            "%": lambda: a % b,
        }[op]()  # fmt: skip
    except (TypeError, ValueError, OverflowError):
        return _UNKNOWN


def _evaluate_all(expr: str, env: dict[str, set[Any]]) -> list[Any] | None:
    """The expression's value under every combination of the names' values; None when some
    combination cannot be evaluated (or there are too many)."""
    toks = _tokens(_strip_strings(expr))
    if toks is None or not toks:
        return None
    names = sorted(env)
    combos = 1
    for n in names:
        combos *= max(1, len(env[n]))
    if combos > _MAX_COMBOS or any(not env[n] for n in names):
        return None
    out: list[Any] = []
    for values in itertools.product(*(sorted(env[n], key=repr) for n in names)):
        v = _Parser(toks, dict(zip(names, values, strict=True))).parse()
        if v is _UNKNOWN:
            return None
        out.append(v)
    return out


# -- text helpers ------------------------------------------------------------------------------


def _strip_strings(code: str) -> str:
    """Blank the inside of string and char literals (offsets kept)."""
    out = list(code)
    i, n = 0, len(code)
    while i < n:
        c = code[i]
        if c in "\"'":
            j = i + 1
            while j < n and code[j] != c and code[j] != "\n":
                if code[j] == "\\":
                    out[j] = " "
                    j += 1
                    if j < n and code[j] != "\n":
                        out[j] = " "
                    j += 1
                    continue
                out[j] = " "
                j += 1
            i = j + 1
            continue
        i += 1
    return "".join(out)


def _substitute(expr: str, table: dict[str, str]) -> str:
    """Macro parameters replaced by the (parenthesised) arguments of one expansion."""
    return _IDENT.sub(lambda mt: f"({table[mt.group(0)]})" if mt.group(0) in table else mt.group(0), expr)


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n\\":
        i += 1
    return i


def _match(text: str, i: int, open_: str, close: str) -> int:
    """Offset of the bracket closing the one at i (nesting of (), [], {} respected), or -1."""
    depth = 0
    j = i
    n = len(text)
    while j < n:
        c = text[j]
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j
        elif open_ == "<" and c in ";{}":
            return -1
        j += 1
    return -1


def _split_args(text: str) -> list[str]:
    """Split on commas outside (), [], {} and template angle brackets."""
    out: list[str] = []
    depth = 0
    angle = 0
    cur: list[str] = []
    for k, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "<" and depth == 0 and re.search(r"[A-Za-z_]\w*$", text[:k]) and not text.startswith("<<", k):
            angle += 1
        elif c == ">" and angle > 0 and depth == 0 and not text.startswith(">>", k):
            angle -= 1
        if c == "," and depth == 0 and angle == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(c)
    last = "".join(cur).strip()
    if last or out:
        out.append(last)
    return out
