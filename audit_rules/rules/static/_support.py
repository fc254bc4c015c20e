"""Shared plumbing of the static rules: findings from AST nodes and native lines, and the
small data-flow questions several rules ask (is this persistent state? is this an identity key?
which parameters does a value derive from?)."""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Iterator
from typing import Any

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleMeta, Severity
from audit_rules.memo import IdentityMemo
from audit_rules.source_model import FunctionInfo, NativeSource, PyModule, Scope, Submission, walk_body

WEIGHT_NAMES = {
    "w",
    "weight",
    "weights",
    "w_q",
    "wq",
    "scales",
    "scale",
    "zeros",
    "bias",
    "b",
    "w_gate",
    "w_up",
    "w_down",
    "weight_scale",
    "w_scale",
    "params",
}

ALLOC_FUNCS = {
    "empty",
    "empty_like",
    "zeros",
    "zeros_like",
    "ones",
    "ones_like",
    "full",
    "full_like",
    "new_empty",
    "new_zeros",
    "new_full",
    "empty_strided",
}


def submission(ctx: AuditContext) -> Submission | None:
    sub = ctx.submission
    return sub if isinstance(sub, Submission) else None


def py_finding(
    meta: RuleMeta,
    module: PyModule,
    node: ast.AST,
    explanation: str,
    *,
    effect: Effect | None = None,
    severity: Severity | None = None,
    probe: Probe | None = None,
    data: dict[str, Any] | None = None,
    line: int | None = None,
) -> Finding:
    start = line if line is not None else getattr(node, "lineno", 1)
    end = getattr(node, "end_lineno", None) or start
    if line is not None:
        end = max(start, min(end, start + 6))
    return Finding.of(
        meta,
        file=module.path,
        line_start=start,
        line_end=end,
        quote=module.quote(start, end),
        explanation=explanation,
        effect=effect,
        severity=severity,
        probe=probe,
        data=data,
    )


def native_finding(
    meta: RuleMeta,
    src: NativeSource,
    text_line: int,
    explanation: str,
    *,
    effect: Effect | None = None,
    severity: Severity | None = None,
    probe: Probe | None = None,
    data: dict[str, Any] | None = None,
) -> Finding:
    origin = src.origin_line(text_line)
    quote = src.origin_text(text_line).strip()
    d = {"native_via": src.via, "native_kind": src.kind}
    d.update(data or {})
    return Finding.of(
        meta,
        file=src.origin,
        line_start=origin,
        line_end=origin,
        quote=quote[:400],
        explanation=explanation,
        effect=effect,
        severity=severity,
        probe=probe,
        data=d,
    )


def dedupe(findings: list[Finding]) -> list[Finding]:
    """One finding per (file, line); the first (most specific) wins."""
    seen: set[tuple[str | None, int | None]] = set()
    out: list[Finding] = []
    for f in findings:
        key = (f.file, f.line_start)
        if key in seen:
            continue
        seen.add(key)
        out.append(f)
    return out


# ---- persistent state --------------------------------------------------------------------


MODULE_CACHE_SIZE = 128  # parsed modules whose per-module facts stay memoized (a few per archive)
_GLOBALS_CACHE: IdentityMemo[set[str]] = IdentityMemo(MODULE_CACHE_SIZE)


def module_globals(module: PyModule) -> set[str]:
    """Module-level names bound to mutable containers or None (caches live there)."""
    hit = _GLOBALS_CACHE.get(module)
    if hit is not None:
        return hit
    out = _GLOBALS_CACHE.put(module, _module_globals(module))
    return out


def _module_globals(module: PyModule) -> set[str]:
    out: set[str] = set()
    for name, vals in module.scope(None).assigns.items():
        for v in vals:
            if isinstance(v, ast.Dict | ast.List | ast.Set) or (
                isinstance(v, ast.Constant) and v.value is None
            ):
                out.add(name)
            elif isinstance(v, ast.Call) and isinstance(v.func, ast.Name | ast.Attribute):
                fn = v.func.id if isinstance(v.func, ast.Name) else v.func.attr
                if fn in ("dict", "OrderedDict", "defaultdict", "WeakValueDictionary", "list", "set"):
                    out.add(name)
    return out


def declared_globals(func: FunctionInfo) -> set[str]:
    return {n for node in walk_body(func.node) if isinstance(node, ast.Global) for n in node.names}


def persistent_root(expr: ast.expr, module: PyModule, func: FunctionInfo | None) -> str | None:
    """'self.X' / global name when the expression reads or names persistent state."""
    node = expr
    while isinstance(node, ast.Subscript | ast.Call | ast.Attribute):
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "setdefault", "pop"):
                node = node.func.value
            else:
                return None
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                return f"self.{node.attr}"
            node = node.value
    if isinstance(node, ast.Name):
        if node.id in module_globals(module) or (func is not None and node.id in declared_globals(func)):
            return node.id
    return None


def local_defs(scope: Scope, name: str) -> list[ast.expr]:
    return scope.values_of(name) if scope.func is not None else []


def binding(scope: Scope, name: ast.Name) -> ast.expr | None:
    """What `name` is bound to where it is read: the function's latest assignment up to that
    line, else the module-level one."""
    val = scope.latest(name.id, name.lineno) if scope.func is not None else None
    return val if val is not None else scope.module.scope(None).latest(name.id)


def is_persistent_value(expr: ast.expr, module: PyModule, func: FunctionInfo | None, depth: int = 0) -> str | None:
    """Does this value (following local names) come from persistent state?"""
    if depth > 4:
        return None
    root = persistent_root(expr, module, func)
    if root is not None and not _is_method_call(expr):
        return root
    if isinstance(expr, ast.Subscript):  # hit[0] where hit = C.get(key)
        return is_persistent_value(expr.value, module, func, depth + 1)
    if isinstance(expr, ast.Name) and func is not None and expr.id not in func.params:
        for v in local_defs(module.scope(func), expr.id):
            r = is_persistent_value(v, module, func, depth + 1)
            if r is not None:
                return r
    return None


def _is_method_call(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Call) and not (
        isinstance(expr.func, ast.Attribute) and expr.func.attr in ("get", "setdefault", "pop")
    )


# ---- identity keys ------------------------------------------------------------------------

IDENTITY_ATTRS = {
    "data_ptr": "data_ptr",
    "shape": "shape",
    "stride": "stride",
    "size": "shape",
    "_version": "version",
    "device": "device",
    "dtype": "dtype",
    "numel": "shape",
    "storage_offset": "data_ptr",
    "untyped_storage": "data_ptr",
}


def identity_kinds(expr: ast.AST, scope: Scope, depth: int = 0) -> set[str]:
    """What an expression keys on: data_ptr, id, is, shape, stride, version, ..."""
    if depth > 4:
        return set()
    # a pure function of (expr, scope, depth): kept per scope, since a local named N times in an
    # expression would otherwise expand its definitions N times at every depth (KA101, _caches)
    key = ("identity_kinds", id(expr), depth)
    hit = scope.memo.get(key)
    if hit is not None:
        return set(hit)
    kinds = _identity_kinds(expr, scope, depth)
    scope.memo[key] = frozenset(kinds)
    return kinds


def _identity_kinds(expr: ast.AST, scope: Scope, depth: int) -> set[str]:
    kinds: set[str] = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and node.attr in IDENTITY_ATTRS:
            kinds.add(IDENTITY_ATTRS[node.attr])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "id":
            kinds.add("id")
        elif isinstance(node, ast.Compare) and any(isinstance(o, ast.Is | ast.IsNot) for o in node.ops):
            sides = [node.left, *node.comparators]
            if not any(isinstance(s, ast.Constant) and s.value is None for s in sides):
                kinds.add("is")
        elif isinstance(node, ast.Name) and scope.func is not None and node.id not in scope.func.params:
            for v in local_defs(scope, node.id):
                if v is not expr:
                    kinds |= identity_kinds(v, scope, depth + 1)
    return kinds


# ---- derivation ---------------------------------------------------------------------------


def param_roots(expr: ast.AST, scope: Scope, depth: int = 0) -> tuple[set[str], set[str]]:
    """(function parameters, self attributes) a value is computed from, following locals."""
    params: set[str] = set()
    attrs: set[str] = set()
    if depth > 5 or scope.func is None:
        return params, attrs
    fparams = set(scope.func.params) - {"self", "cls"}
    for node in ast.walk(expr):
        if isinstance(node, ast.Name):
            if node.id in fparams:
                params.add(node.id)
            elif node.id != "self":
                for v in local_defs(scope, node.id):
                    if v is not expr:
                        p, a = param_roots(v, scope, depth + 1)
                        params |= p
                        attrs |= a
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            attrs.add(node.attr)
    return params, attrs


def call_sites(sub: Submission, target: FunctionInfo) -> Iterator[tuple[PyModule, FunctionInfo | None, ast.Call]]:
    yield from sub.callers(target)


def param_is_weight(sub: Submission, func: FunctionInfo, param: str, depth: int = 0) -> bool:
    """A helper parameter is weight-like when every call site passes model state (self.X)."""
    key = f"param_is_weight:{id(func.node)}:{param}"
    hit = sub._memo.get(key)
    if isinstance(hit, bool):
        return hit
    sub._memo[key] = False  # recursion guard: a cycle of helpers is not weight evidence
    res = _param_is_weight(sub, func, param, depth)
    sub._memo[key] = res
    return res


def _param_is_weight(sub: Submission, func: FunctionInfo, param: str, depth: int = 0) -> bool:
    params = func.params
    if param not in params:
        return False
    idx = params.index(param)
    if func.cls and params and params[0] in ("self", "cls"):
        idx -= 1
    passed: list[bool] = []
    for module, caller, call in call_sites(sub, func):
        arg: ast.expr | None = None
        for k in call.keywords:
            if k.arg == param:
                arg = k.value
        if arg is None and 0 <= idx < len(call.args):
            arg = call.args[idx]
        if arg is None:
            continue
        scope = module.scope(caller)
        p, a = param_roots(arg, scope) if caller is not None else (set(), set())
        if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "self":
            passed.append(True)
        elif p and caller is not None and depth < 3:
            passed.append(all(param_is_weight(sub, caller, q, depth + 1) for q in p))
        elif a and not p:
            passed.append(True)
        else:
            passed.append(False)
    if passed:
        return all(passed)
    return param.lower() in WEIGHT_NAMES or param.lower().startswith(("w_", "weight"))


def param_is_scalar(sub: Submission, func: FunctionInfo, param: str) -> bool:
    """A parameter every caller fills with a size (derived from shapes/constants), not a tensor."""
    params = func.params
    if param not in params:
        return False
    idx = params.index(param) - (1 if func.cls and params and params[0] in ("self", "cls") else 0)
    seen = False
    for module, caller, call in call_sites(sub, func):
        arg = next((k.value for k in call.keywords if k.arg == param), None)
        if arg is None and 0 <= idx < len(call.args):
            arg = call.args[idx]
        if arg is None:
            continue
        seen = True
        if isinstance(arg, ast.Constant) and isinstance(arg.value, int | float):
            continue
        kinds = identity_kinds(arg, module.scope(caller)) if caller is not None else set()
        if not kinds or not kinds <= {"shape", "stride", "dtype", "device"}:
            return False
    return seen


def call_name(call: ast.Call) -> str:
    fn = call.func
    if isinstance(fn, ast.Attribute):
        return fn.attr
    if isinstance(fn, ast.Name):
        return fn.id
    return ""


def is_allocation(expr: ast.expr, sub: Submission, scope: Scope) -> bool:
    if isinstance(expr, ast.Call):
        q = sub.qualname(expr.func, scope) or ""
        last = q.rsplit(".", 1)[-1] if q else call_name(expr)
        return last in ALLOC_FUNCS
    return False


def enclosing_ifs(module: PyModule, node: ast.AST, stop: ast.AST) -> list[ast.If]:
    out: list[ast.If] = []
    for anc in module.ancestors(node):
        if anc is stop:
            break
        if isinstance(anc, ast.If):
            out.append(anc)
    return out


def _flag_key(expr: ast.expr) -> str | None:
    """`self.x` / a bare name, as a key; through `not`, `is None`/`== False`-style comparisons."""
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        return _flag_key(expr.operand)
    if isinstance(expr, ast.Compare) and len(expr.comparators) == 1:
        return _flag_key(expr.left)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
        return f"{expr.value.id}.{expr.attr}"
    if isinstance(expr, ast.Name):
        return expr.id
    return None


def _container_key(expr: ast.expr) -> str | None:
    """`container:<root>` for `root[...]` / `root.get(...)` / `root.setdefault(...)` where root is an
    attribute chain or a name: the lookup a fill-on-miss path fills."""
    if isinstance(expr, ast.Subscript):
        base: ast.expr | None = expr.value
    elif isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("get", "setdefault"):
        base = expr.func.value
    else:
        return None
    k = _flag_key(base) if isinstance(base, ast.Attribute | ast.Name) else None
    return f"container:{k}" if k else None


def _sets_flag(stmts: list[ast.stmt], keys: set[str]) -> bool:
    for stmt in stmts:
        for n in ast.walk(stmt):
            if isinstance(n, ast.Assign | ast.AugAssign | ast.AnnAssign):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
                for t in targets:
                    if _flag_key(t) in keys or (isinstance(t, ast.Subscript) and _container_key(t) in keys):
                        return True
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "setdefault" \
                    and _container_key(n) in keys:
                return True
    return False


def _test_keys(test: ast.expr, func: FunctionInfo | None) -> set[str]:
    """Persistent flags an `if` test reads (`self._ready`, `_CACHE`, a module constant), and the
    containers a local it tests was looked up in (`hit = self._memo.get(k); if hit is None:`)."""
    ops: list[ast.expr] = []
    for t in test.values if isinstance(test, ast.BoolOp) else [test]:
        t = t.operand if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) else t
        ops.extend([t.left, *t.comparators] if isinstance(t, ast.Compare) else [t])
    keys: set[str] = set()
    for t in ops:
        k = _flag_key(t)
        if k is None:
            continue
        if "." in k or k.isupper() or k.startswith("_"):
            keys.add(k)
        elif func is not None:
            for n in ast.walk(func.node):
                if isinstance(n, ast.Assign) and any(isinstance(x, ast.Name) and x.id == k for x in n.targets):
                    if (ck := _container_key(n.value)) is not None:
                        keys.add(ck)
    return keys


def first_call_guard(module: PyModule, node: ast.AST, stop: ast.AST, sub: Submission | None = None,
                     func: FunctionInfo | None = None) -> ast.If | None:
    """The `if` that makes `node` a one-time path: a test on a persistent flag that the same branch
    sets (`if not self._ready: ...; self._ready = True`), directly or in a method it calls
    (`if not self._ready: self._init()` where `_init` sets it; needs `sub` and `func`), so later
    calls never reach it; None when `node` runs on every call that reaches its function."""
    child: ast.AST = node
    for anc in module.ancestors(node):
        # the miss path after an early return: `if self._key == key: return hit` ... `self._key = key`
        block = next((b for f in ("body", "orelse", "finalbody") if isinstance(b := getattr(anc, f, None), list)
                      and child in b), None)
        if block is not None:
            at = block.index(child)
            for prev in block[:at]:
                if isinstance(prev, ast.If) and prev.body and isinstance(prev.body[-1], ast.Return):
                    keys = _test_keys(prev.test, func)
                    if keys and _sets_flag(block[at:], keys):
                        return prev
        if anc is stop:
            return None
        if isinstance(anc, ast.If) and child in anc.body:
            keys = _test_keys(anc.test, func)
            if keys and _sets_flag(anc.body, keys):
                return anc
            if keys and sub is not None and func is not None:
                scope = module.scope(func)
                for stmt in anc.body:
                    for n in ast.walk(stmt):
                        if isinstance(n, ast.Call):
                            for callee in sub.resolve_functions(n.func, scope):
                                if callee.self_cls == func.self_cls and _sets_flag(callee.node.body, keys):
                                    return anc
        child = anc
    return None


def once_only(sub: Submission, func: FunctionInfo, node: ast.AST, depth: int = 0) -> bool:
    """`node` (in `func`) runs only on one-time paths: behind a first-call guard (`first_call_guard`),
    or in a function every caller of which reaches it only on such a path or at import time.
    The graded entry points themselves are never one-time."""
    module = func.module
    if first_call_guard(module, node, func.node, sub, func) is not None:
        return True
    if depth > 3 or func in sub.entry_points():
        return False
    sites = sub.callers(func)
    if not sites:
        return False
    for _mod, caller, call in sites:
        if caller is None or caller is func:
            continue  # import time runs once; recursion adds no path
        if not once_only(sub, caller, call, depth + 1):
            return False
    return True


def where_label(sub: Submission, func: FunctionInfo | None) -> str:
    return sub.where(func)


# ---- value candidates ---------------------------------------------------------------------


def deep_qualname(sub: Submission, expr: ast.expr, scope: Scope) -> str | None:
    """`Submission.qualname`, then through module constants of the submission's own modules:
    ``from scratch.cfg import MATMUL as mm; mm.allow_tf32`` -> ``torch.backends.cuda.matmul.allow_tf32``
    when scratch/cfg.py binds ``MATMUL = torch.backends.cuda.matmul``."""
    q = sub.qualname(expr, scope)
    for _ in range(4):
        if not q or "." not in q:
            return q
        head, rest = q.split(".", 1)
        seg, _, tail = rest.partition(".")
        nxt = None
        for mod in sub.modules.values():
            if mod.name != head or seg in mod.functions or seg in mod.classes:
                continue
            val = mod.scope(None).latest(seg)
            if val is not None:
                nxt = sub.qualname(val, mod.scope(None))
                break
        if not nxt:
            return q
        q = f"{nxt}.{tail}" if tail else nxt
    return q


def as_dict_items(sub: Submission, expr: ast.expr, scope: Scope, depth: int = 0) -> list[tuple[ast.expr | str, ast.expr]] | None:
    """(key, value) pairs of a dict literal, ``dict(k=v)`` or a name bound to one; None otherwise.
    A key is an expression, or the keyword's name for ``dict(k=v)``."""
    if depth > 4:
        return None
    if isinstance(expr, ast.Dict):
        out: list[tuple[ast.expr | str, ast.expr]] = []
        for k, v in zip(expr.keys, expr.values, strict=True):
            if k is None:  # {**other}
                inner = as_dict_items(sub, v, scope, depth + 1)
                if inner is None:
                    return None
                out.extend(inner)
            else:
                out.append((k, v))
        return out
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "dict":
        pairs: list[tuple[ast.expr | str, ast.expr]] = []
        for a in expr.args:
            inner = as_dict_items(sub, a, scope, depth + 1)
            if inner is None:
                return None
            pairs.extend(inner)
        pairs.extend((k.arg, k.value) for k in expr.keywords if k.arg)
        return pairs
    if isinstance(expr, ast.Name):
        vals: list[ast.expr] = []
        sc = scope
        if scope.func is not None and expr.id not in scope.func.params:
            vals = scope.values_of(expr.id)
        if not vals and (scope.func is None or expr.id not in scope.func.params):
            sc = scope.module.scope(None)
            vals = sc.values_of(expr.id)
        if len(vals) == 1 and vals[0] is not expr:
            return as_dict_items(sub, vals[0], sc, depth + 1)
    return None


def _iter_elements(sub: Submission, it: ast.expr, pos: int | None, scope: Scope) -> list[ast.expr] | None:
    """The expressions a loop over `it` binds to the target at tuple position `pos` (None: whole)."""
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in ("items", "keys", "values") and not it.args:
        items = as_dict_items(sub, it.func.value, scope)
        if items is None:
            return None
        which = it.func.attr
        if which == "items":
            if pos is None:
                return None
            which = "keys" if pos == 0 else "values"
        out: list[ast.expr] = []
        for k, v in items:
            if which == "values":
                out.append(v)
            elif isinstance(k, str):
                out.append(ast.copy_location(ast.Constant(value=k), v))
            else:
                out.append(k)
        return out
    items = as_dict_items(sub, it, scope)
    if items is not None and pos is None:  # `for k in {...}` iterates the keys
        return [k if not isinstance(k, str) else ast.copy_location(ast.Constant(value=k), v) for k, v in items]
    if isinstance(it, ast.List | ast.Tuple):
        if pos is None:
            return list(it.elts)
        picked = [e.elts[pos] for e in it.elts if isinstance(e, ast.Tuple | ast.List) and len(e.elts) > pos]
        return picked if len(picked) == len(it.elts) else None
    return None


def string_candidates(sub: Submission, expr: ast.expr, scope: Scope, depth: int = 0) -> set[str] | None:
    """Every string an expression may hold, or None when some value is not statically known.

    Folds constants, and follows names to each of their bindings, ternaries, and loop targets over
    a dict / ``.items()`` / ``.keys()`` / ``.values()`` / a literal sequence
    (``for k, v in {"KBH_X": "0"}.items(): os.environ[k] = v`` gives ``{"KBH_X"}`` for ``k``).
    Parameters are not followed (their values live at the call sites)."""
    if depth > 6:
        return None
    s = sub.fold_str(expr, scope)
    if s is not None:
        return {s}
    if isinstance(expr, ast.IfExp):
        a = string_candidates(sub, expr.body, scope, depth + 1)
        b = string_candidates(sub, expr.orelse, scope, depth + 1)
        return a | b if a is not None and b is not None else None
    if not isinstance(expr, ast.Name):
        return None
    if scope.func is not None and expr.id in scope.func.params:
        return None
    sc = scope
    vals = scope.values_of(expr.id) if scope.func is not None else []
    if not vals:
        sc = scope.module.scope(None)
        vals = sc.values_of(expr.id)
    if not vals:
        return None
    out: set[str] = set()
    for v in vals:
        if v is expr:
            return None
        parent = scope.module.parents.get(v)
        if isinstance(parent, ast.For | ast.comprehension) and parent.iter is v:
            pos: int | None = None
            if isinstance(parent.target, ast.Tuple):
                idx = [i for i, t in enumerate(parent.target.elts) if isinstance(t, ast.Name) and t.id == expr.id]
                if not idx:
                    return None
                pos = idx[0]
            elems = _iter_elements(sub, v, pos, sc)
            if elems is None:
                return None
            for e in elems:
                got = string_candidates(sub, e, sc, depth + 1)
                if got is None:
                    return None
                out |= got
        else:
            got = string_candidates(sub, v, sc, depth + 1)
            if got is None:
                return None
            out |= got
    return out


# ---- authorship -------------------------------------------------------------------------------

# Device code of the agent's own in a native source.
DEVICE_CODE = re.compile(
    r"__global__|__device__|\basm\s*(?:volatile\s*)?\(|\bcutlass::|\bcute::|\bwmma::|\bmma\.sync|\bwgmma|tcgen05"
    r"|extern\s+\"C\"\s+__global__|\.entry\s+\w+|cp\.async"
)


def authored_kernels(sub: Submission | None) -> bool:
    """The submission holds a kernel the agent wrote: a Triton kernel, PTX, or native device code."""
    if sub is None:
        return True
    if sub.triton:
        return True
    return any(src.kind == "ptx" or DEVICE_CODE.search("\n".join(src.code)) for src in sub.native)


_WIDE_TORCH = {
    "torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.half": "fp16",
    "torch.float32": "fp32", "torch.float": "fp32",
}
_WIDE_METHODS = {"bfloat16": "bf16", "half": "fp16", "float": "fp32"}


_VIEW_LIKE = frozenset({"contiguous", "view", "reshape", "flatten", "detach", "squeeze", "unsqueeze", "t"})


def host_upcasts(sub: Submission) -> list[tuple[PyModule, FunctionInfo, ast.Call, str, str]]:
    """Live host-side conversions of a graded input to a wider dtype: (module, function, call, param, dtype).

    The receiver must be a parameter of a live function that derives from the graded call's inputs (not
    model state: weights are converted once by design in several decks), and the call must sit on the
    live path, not in an except handler or an off-GPU branch.
    """
    live = sub.reach().live
    out: list[tuple[PyModule, FunctionInfo, ast.Call, str, str]] = []
    attr_dtype = _attr_dtypes(sub)
    for module, func, call, _q in sub.iter_calls():
        if func is None or func not in live or func.is_triton or not isinstance(call.func, ast.Attribute):
            continue
        recv = call.func.value
        if call.func.attr == "copy_" and call.args and isinstance(call.args[0], ast.Name):
            # self.buf.copy_(x) into a buffer allocated wider: the same conversion, staged
            src = call.args[0].id
            target = recv.attr if isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name) and recv.value.id == "self" else None
            if (target in attr_dtype and src in func.params and src not in ("self", "cls") and src not in WEIGHT_NAMES
                    and not param_is_weight(sub, func, src) and not module.in_except(call)):
                out.append((module, func, call, src, attr_dtype[target]))
            continue
        # the graded argument itself, an element of the argument tuple (`args[0]`) or a whole view of
        # it (`x.contiguous()`); a slice (`x.view(-1)[:4096].float()`, a validation sample) or a
        # `narrow` (the same partial view, spelled as a call) is not the graded input
        while True:
            if isinstance(recv, ast.Subscript) and isinstance(recv.slice, ast.Constant) and isinstance(recv.slice.value, int):
                recv = recv.value
            elif isinstance(recv, ast.Call) and isinstance(recv.func, ast.Attribute) and recv.func.attr in _VIEW_LIKE:
                recv = recv.func.value
            else:
                break
        if not isinstance(recv, ast.Name) or recv.id not in func.params or recv.id in ("self", "cls"):
            continue
        if recv.id in WEIGHT_NAMES or param_is_weight(sub, func, recv.id):
            continue
        if module.in_except(call):
            continue
        wide = None
        if call.func.attr in _WIDE_METHODS and not call.args:
            wide = _WIDE_METHODS[call.func.attr]
        elif call.func.attr == "to":
            scope = module.scope(func)
            for a in [*call.args, *[k.value for k in call.keywords if k.arg == "dtype"]]:
                q = sub.qualname(a, scope)
                if q in _WIDE_TORCH:
                    wide = _WIDE_TORCH[q]
        if wide and not _only_summarized(module, func, call):
            out.append((module, func, call, recv.id, wide))
    return out


# Methods/functions that reduce a tensor to a statistic (what a range check, a log line or a
# cache key reads) and element-wise steps that may come before one (`x.float().abs().amax()`).
_STAT_REDUCTIONS = frozenset({"sum", "mean", "max", "amax", "min", "amin", "norm", "item", "all", "any", "std",
                              "var", "count_nonzero", "aminmax"})
_STAT_STEPS = frozenset({"abs", "neg", "square", "isfinite", "isnan", "isinf", "contiguous", "view", "reshape",
                         "flatten", "detach", "t", "mm", "matmul", "sub", "add", "mul", "div", "float", "double",
                         "half", "bfloat16", "to", "type_as"})


def _only_summarized(module: PyModule, func: FunctionInfo, node: ast.expr, depth: int = 0) -> bool:
    """Is this converted value only reduced to statistics (`float(x.float().abs().amax())`, a sum in
    a cache key, `torch.isfinite(x.float()).all()`), never handed on as a tensor? Then the conversion
    widens no operand of the computation. Arithmetic on the way counts as a step (a debug self-check
    `ref = x.float() @ w.float().t() * s; err = (ref - y.float()).abs().max().item()` only compares);
    what the steps produce must itself end in a statistic. Followed through local names (`xs =
    x.float()`), a few deep; an unused local counts as summarized (it feeds nothing)."""
    if depth > 3:
        return False
    while True:
        parent = module.parents.get(node)
        if isinstance(parent, ast.BinOp | ast.UnaryOp):
            node = parent  # element-wise arithmetic or a product: its result must be summarized too
            continue
        if isinstance(parent, ast.Attribute) and parent.value is node:
            call = module.parents.get(parent)
            if not (isinstance(call, ast.Call) and call.func is parent):
                return False
            if parent.attr in _STAT_REDUCTIONS:
                return True
            if parent.attr in _STAT_STEPS:
                node = call
                continue
            return False
        if isinstance(parent, ast.Call) and node in parent.args:
            name = call_name(parent)
            if name in _STAT_REDUCTIONS:
                return True
            if name in _STAT_STEPS:
                node = parent
                continue
            return False
        if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1 \
                and isinstance(parent.targets[0], ast.Name):
            var = parent.targets[0].id
            uses = [n for n in walk_body(func.node)
                    if isinstance(n, ast.Name) and n.id == var and isinstance(n.ctx, ast.Load)]
            return all(_only_summarized(module, func, u, depth + 1) for u in uses)
        return False


def _attr_dtypes(sub: Submission) -> dict[str, str]:
    """self.<attr> buffers allocated with a wide dtype anywhere in the submission: attr -> bf16/fp16/fp32."""
    out: dict[str, str] = {}
    for module in sub.modules.values():
        top = module.scope(None)
        for node in ast.walk(module.tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "register_buffer"
                    and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                    and isinstance(node.args[1], ast.Call)):
                for kw in node.args[1].keywords:
                    if kw.arg == "dtype" and (q := sub.qualname(kw.value, top)) in _WIDE_TORCH:
                        out[node.args[0].value] = _WIDE_TORCH[q]
                continue
            if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Call):
                continue
            for tgt in node.targets:
                if isinstance(tgt, ast.Attribute) and isinstance(tgt.value, ast.Name) and tgt.value.id == "self":
                    for kw in node.value.keywords:
                        if kw.arg == "dtype":
                            q = sub.qualname(kw.value, top)
                            if q in _WIDE_TORCH:
                                out[tgt.attr] = _WIDE_TORCH[q]
    return out


# Names a transcription keeps whatever it renames: the grader's interface.
_INTERFACE_NAMES = frozenset({"self", "cls", "Model", "forward", "__init__", "get_inputs", "get_init_inputs"})


def _canonical_imports(tree: ast.AST) -> None:
    """Every use of an import alias written as the dotted name it stands for, and the aliases dropped
    from the import statements (names the module also binds itself are left alone)."""
    full: dict[str, str] = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.asname:
                    full[a.asname] = a.name
        elif isinstance(n, ast.ImportFrom) and n.module and not n.level and n.module != "__future__":
            for a in n.names:
                if a.name != "*":
                    full[a.asname or a.name] = f"{n.module}.{a.name}"
    own: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            own.add(n.id)
        elif isinstance(n, ast.arg):
            own.add(n.arg)
        elif isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(n.name)
    full = {k: v for k, v in full.items() if k not in own and k != v}
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in full:
            n.id = full[n.id]

    class _Imports(ast.NodeTransformer):
        # one form for every import: `import torch.nn as nn`, `from torch import nn as N` -> `import torch.nn`
        def visit_Import(self, node: ast.Import) -> ast.AST:
            return ast.copy_location(ast.Import(names=[ast.alias(a.name) for a in node.names]), node)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST:
            if not node.module or node.level or node.module == "__future__" or any(a.name == "*" for a in node.names):
                return node
            return ast.copy_location(ast.Import(names=[ast.alias(f"{node.module}.{a.name}") for a in node.names]), node)

    _Imports().visit(tree)


def _canonical_names(tree: ast.AST) -> None:
    """Rename, in place, every name a function binds (parameters, locals) to `a0, a1, ...` in order of
    first appearance in that function, and every other name the module binds (functions, classes,
    globals) to `g`: two copies of the same code that differ only in their own names unparse the
    same (alpha-equivalence); builtin names are kept, and an imported name is written as what it
    imports (`F.relu` with `import torch.nn.functional as F` -> `torch.nn.functional.relu`, `mm` with
    `from torch import mm` -> `torch.mm`), the import statements without their aliases."""
    _canonical_imports(tree)
    imported = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
                for a in n.names}
    keep = _INTERFACE_NAMES | imported

    def bound_in(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
        out: list[str] = []
        args = fn.args
        for a in [*args.posonlyargs, *args.args, *([args.vararg] if args.vararg else []), *args.kwonlyargs,
                  *([args.kwarg] if args.kwarg else [])]:
            out.append(a.arg)
        stack: list[ast.AST] = list(fn.body)
        while stack:
            node = stack.pop(0)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
                continue  # a nested scope names its own
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                out.append(node.id)
            stack.extend(ast.iter_child_nodes(node))
        return list(dict.fromkeys(n for n in out if n not in keep))

    module_names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            module_names.append(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            module_names.append(node.id)
    # one placeholder for every module-level name of its own: numbering them by appearance would tie
    # the comparison to the order of the module's definitions
    globals_map = {n: "g" for n in module_names if n not in keep}

    def rename(node: ast.AST, local: dict[str, str]) -> None:
        for child in ast.iter_child_nodes(node):
            scope = local
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                scope = {**local, **{n: f"a{i}" for i, n in enumerate(bound_in(child))}}
                if child.name in globals_map:
                    child.name = globals_map[child.name]
                for a in ast.walk(child.args):
                    if isinstance(a, ast.arg) and a.arg in scope:
                        a.arg = scope[a.arg]
            elif isinstance(child, ast.ClassDef) and child.name in globals_map:
                child.name = globals_map[child.name]
            elif isinstance(child, ast.Name):
                child.id = scope.get(child.id, globals_map.get(child.id, child.id))
            elif isinstance(child, ast.keyword) and child.arg is not None:
                child.arg = scope.get(child.arg, child.arg)  # a kernel's own parameter passed by name
            rename(child, scope)

    rename(tree, {})


def docstrings(tree: ast.AST) -> list[tuple[ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef,
                                               ast.Constant]]:
    """(owner, the docstring's constant) for the module and every class and function that has one."""
    out: list[tuple[ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef, ast.Constant]] = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.append((n, first.value))
    return out


def strip_docstrings(tree: ast.AST) -> None:
    """Remove, in place, the docstring of the module and of every class and function."""
    for owner, _ in docstrings(tree):
        owner.body = owner.body[1:] or [ast.Pass()]


def _normalized_lines(tree: ast.AST) -> list[str]:
    """The module's code without docstrings, its own names canonical, one statement per line, its
    top-level statements (a whole function or class each) in a canonical order: the comparison
    does not depend on the order the module defines things in."""
    import copy

    t = copy.deepcopy(tree)
    strip_docstrings(t)
    _canonical_names(t)
    body = t.body if isinstance(t, ast.Module) else [t]
    blocks = sorted(tuple(ln.strip() for ln in ast.unparse(stmt).splitlines() if ln.strip()) for stmt in body)
    return [ln for block in blocks for ln in block]


def reference_similarity(module: PyModule, reference_source: str | None) -> float | None:
    """How much of the solution's code is the deck's reference.py, statement for statement (0..1)."""
    if not reference_source:
        return None
    try:
        ref = ast.parse(reference_source)
    except SyntaxError:
        return None
    a, b = _normalized_lines(module.tree), _normalized_lines(ref)
    if not a or not b:
        return None
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def path_strings(sub: Submission, module: PyModule, func: FunctionInfo | None, expr: ast.expr,
                 depth: int = 0) -> list[str]:
    """Strings a path expression may be or contain: its folded value, its literal parts, and the
    same through the names it is built from (`p = os.path.join(os.path.dirname(__file__),
    "problem.yaml")`; `open(p, "w")`), a few assignments deep."""
    scope = module.scope(func)
    out: list[str] = []
    folded = sub.fold_str(expr, scope)
    if folded:
        out.append(folded)
    for n in ast.walk(expr):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            out.append(n.value)
        elif isinstance(n, ast.Name):
            v = sub.fold_str(n, scope)
            if v:
                out.append(v)
            elif depth < 3:
                values = scope.values_of(n.id) if func is not None else []
                for val in values or module.scope(None).values_of(n.id):
                    if val is not expr:
                        out.extend(path_strings(sub, module, func if values else None, val, depth + 1))
    return out


def kernel_bindings(fn: ast.FunctionDef | ast.AsyncFunctionDef, *, loops: bool) -> list[tuple[list[str], ast.expr]]:
    """(names bound, the expression they come from) for every assignment of a kernel body (a tuple
    target: each of its names from the whole value), and with `loops` every `for` target from its
    iterable: the edges a taint over a Triton kernel's locals follows to its fixed point."""
    binds: list[tuple[list[str], ast.expr]] = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign):
            binds.append(([t.id for tgt in n.targets for t in ast.walk(tgt) if isinstance(t, ast.Name)], n.value))
        elif isinstance(n, ast.AugAssign | ast.AnnAssign) and n.value is not None and isinstance(n.target, ast.Name):
            binds.append(([n.target.id], n.value))
        elif loops and isinstance(n, ast.For):
            binds.append(([t.id for t in ast.walk(n.target) if isinstance(t, ast.Name)], n.iter))
    return binds
