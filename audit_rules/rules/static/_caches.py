"""Find the persistent caches a submission keeps and classify what each one holds.

A cache is a store into persistent state (``self.X = v``, ``self.C[key] = v``, ``_G[key] = v``,
``C.setdefault(key, v)``) made in a function that also *guards* on persistent state (an ``if``
reading ``self.X``, ``key in C``, ``C.get(key)``...). For each store we classify

* ``cached_kind``: ``output`` (the value the function returns), ``input_copy`` (derived from an
  activation argument), ``weight_copy`` (derived from model state only), ``launch_artifact``
  (graph, compiled handle, descriptor, config constants), ``buffer`` (a fresh allocation that
  later calls write into);
* ``key_kinds``: data_ptr / id / is / shape / stride / version / first_call / content;
* ``version_guarded``: the key or the guard reads ``_version``, or the module invalidates on
  ``load_state_dict`` through a registered hook;

and for guards we record the *hit paths*: ``return`` statements inside a guard's branch that hand
back persistent state without launching any work first (the output-memo signature).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from audit_rules.rules.static import _support as S
from audit_rules.source_model import FunctionInfo, PyModule, Submission, walk_body

LAUNCH_ARTIFACT_CALLS = {
    "CUDAGraph",
    "graph",
    "make_graphed_callables",
    "load_inline",
    "load",
    "compile",
    "TensorDescriptor",
    "make_tensor_descriptor",
    "from_tensor",
    "create_1d_tma_descriptor",
    "create_2d_tma_descriptor",
    "fill_2d_tma_descriptor",
    "partial",
    "RawKernel",
    "RawModule",
    "get_function",
    "Stream",
    "Event",
    "cdiv",
    "next_power_of_2",
    "_get_config",
    "get_device_properties",
}


@dataclass
class CacheStore:
    module: PyModule
    func: FunctionInfo
    node: ast.stmt | ast.Call  # the store statement (or setdefault call)
    container: str  # "self._cache", "_PAD" ...
    value: ast.expr
    key: ast.expr | None
    key_kinds: set[str]
    cached_kind: str
    version_guarded: bool
    derived_from: list[str] = field(default_factory=list)  # activation params or self attrs


@dataclass
class HitReturn:
    module: PyModule
    func: FunctionInfo
    node: ast.Return
    guard: ast.If
    container: str
    key_kinds: set[str]
    recomputes: bool  # a call that launches work precedes the return inside the hit branch


@dataclass
class CacheReport:
    stores: list[CacheStore]
    hits: list[HitReturn]


def _guards(module: PyModule, func: FunctionInfo) -> list[tuple[ast.If, str]]:
    out: list[tuple[ast.If, str]] = []
    for node in walk_body(func.node):
        if isinstance(node, ast.If):
            for root in _test_roots(node.test, module, func):
                out.append((node, root))
    return out


def _test_roots(test: ast.expr, module: PyModule, func: FunctionInfo) -> list[str]:
    roots: list[str] = []
    for sub in ast.walk(test):
        if isinstance(sub, ast.Compare) and any(isinstance(o, ast.In | ast.NotIn) for o in sub.ops):
            for c in sub.comparators:
                r = S.persistent_root(c, module, func)
                if r is not None and r not in roots:
                    roots.append(r)
        if isinstance(sub, ast.expr):
            r = S.is_persistent_value(sub, module, func)
            if r is not None and r not in roots:
                roots.append(r)
    return roots


def _store_targets(node: ast.AST) -> list[tuple[ast.expr, ast.expr, ast.expr | None]]:
    """(target, value, key) for persistent-looking stores in one statement."""
    out: list[tuple[ast.expr, ast.expr, ast.expr | None]] = []
    if isinstance(node, ast.Assign):
        for t in node.targets:
            targets = t.elts if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) else [t]
            values = node.value.elts if isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) else [node.value]
            for tt, vv in zip(targets, values, strict=False):
                key = tt.slice if isinstance(tt, ast.Subscript) else None
                out.append((tt, vv, key))
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        key = node.target.slice if isinstance(node.target, ast.Subscript) else None
        out.append((node.target, node.value, key))
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setdefault":
        if len(node.args) >= 2:
            out.append((node.func.value, node.args[1], node.args[0]))
    return out


def returners(sub: Submission) -> set[FunctionInfo]:
    """Entry points and the functions whose result they return directly (``return self._run(x)``)."""
    out: set[FunctionInfo] = set()
    stack = list(sub.reach().entries)
    while stack:
        f = stack.pop()
        if f in out:
            continue
        out.add(f)
        scope = f.module.scope(f)
        for node in walk_body(f.node):
            if isinstance(node, ast.Return) and node.value is not None:
                vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                for v in vals:
                    if isinstance(v, ast.Name) and v.id not in f.params:
                        vals2 = S.local_defs(scope, v.id)
                    else:
                        vals2 = [v]
                    for v2 in vals2:
                        if isinstance(v2, ast.Call):
                            stack.extend(t for t in sub.resolve_functions(v2.func, scope) if t not in out)
    return out


def _classify_value(
    sub: Submission, module: PyModule, func: FunctionInfo, value: ast.expr, returned: set[str]
) -> tuple[str, list[str]]:
    scope = module.scope(func)
    if isinstance(value, ast.Name) and value.id not in func.params and value.id not in returned:
        defs = S.local_defs(scope, value.id)
        if len(defs) == 1 and S.identity_kinds(defs[0], scope) and _is_key_expr(defs[0]):
            return "key", []
    if isinstance(value, ast.Name) and value.id in returned:
        return "output", []
    if isinstance(value, ast.Tuple) and value.elts and all(isinstance(e, ast.Name) and e.id in returned for e in value.elts):
        return "output", []
    if isinstance(value, ast.Dict) and value.values and value.values[0] is not None:
        return _classify_value(sub, module, func, value.values[0], returned)  # `C = {key: out}`
    if isinstance(value, ast.Name) and value.id in func.params:
        return "key", []  # the input object itself, kept to compare identity
    if S.identity_kinds(value, scope) and _is_key_expr(value):
        return "key", []
    exprs: list[ast.expr] = [value]
    if isinstance(value, ast.Name) and value.id not in func.params:
        exprs = S.local_defs(scope, value.id) or [value]
    exprs = [e for e in exprs if S.persistent_root(e, module, func) is None] or exprs
    kinds: set[str] = set()
    for e in exprs:
        if not any(isinstance(n, ast.Call | ast.Subscript) for n in ast.walk(e)):
            kinds.add("launch_artifact")  # constants / arithmetic on sizes: a launch config
            continue
        if isinstance(e, ast.Constant | ast.Lambda) or (
            isinstance(e, ast.Tuple | ast.List | ast.Dict)
            and all(isinstance(x, ast.Constant) for x in ast.walk(e) if isinstance(x, ast.expr) and x is not e)
        ):
            kinds.add("launch_artifact")
            continue
        if isinstance(e, ast.Call):
            q = sub.qualname(e.func, scope) or ""
            last = q.rsplit(".", 1)[-1] if q else S.call_name(e)
            if last in LAUNCH_ARTIFACT_CALLS or "descriptor" in last.lower() or "graph" in last.lower():
                kinds.add("launch_artifact")
                continue
            if last in S.ALLOC_FUNCS:
                kinds.add("buffer")
                continue
            if isinstance(e.func, ast.Subscript):  # kernel[grid](...) returns a handle
                kinds.add("launch_artifact")
                continue
            targets = sub.resolve_functions(e.func, scope)
            if targets and not any(_returns_argument_data(sub, t) for t in targets):
                # a helper of the submission fed the tensor but returning something not made from
                # it (a stream it configured, an event, a handle): nothing of the tensor is kept
                kinds.add("launch_artifact")
                continue
        kinds.add("derived")
    if kinds == {"launch_artifact"}:
        return "launch_artifact", []
    if kinds <= {"buffer", "launch_artifact"}:
        return "buffer", []
    params, attrs = S.param_roots(value, scope)
    activations = [p for p in params if not S.param_is_weight(sub, func, p) and not S.param_is_scalar(sub, func, p)]
    if activations:
        return "input_copy", sorted(activations)
    if params or attrs:
        weights = [p for p in params if not S.param_is_scalar(sub, func, p)]
        return "weight_copy", sorted(weights) + sorted(f"self.{a}" for a in attrs)
    return "launch_artifact", []


_SIMPLE_STMTS = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)


def _returns_argument_data(sub: Submission, func: FunctionInfo) -> bool:
    """Can what `func` returns carry data from its arguments? True when a returned value is
    computed from a parameter, or a returned local is written in a statement that also reads a
    parameter (`out[:, :K] = w`, `out.copy_(w)`, `kernel[grid](w, out)`). Conservative: a body it
    cannot follow counts as True."""
    module = sub.module_of(func)
    scope = module.scope(func)
    params = set(func.params) - {"self", "cls"}
    if not params:
        return False
    returned: set[str] = set()
    for node in walk_body(func.node):
        if isinstance(node, ast.Return) and node.value is not None:
            if S.param_roots(node.value, scope)[0]:
                return True
            returned |= {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
        if isinstance(node, ast.Yield | ast.YieldFrom | ast.Global | ast.Nonlocal):
            return True
    if not returned:
        return False
    for node in walk_body(func.node):
        if isinstance(node, _SIMPLE_STMTS):
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if names & returned and names & params:
                return True
    return False


def _returns_root(module: PyModule, func: FunctionInfo, root: str) -> bool:
    for node in walk_body(func.node):
        if isinstance(node, ast.Return) and node.value is not None:
            vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            if any(S.is_persistent_value(v, module, func) == root for v in vals):
                return True
    return False


def _filled_from_activation(sub: Submission, module: PyModule, func: FunctionInfo, root: str) -> list[str]:
    """A persistent buffer written by a launch that also reads an activation argument."""
    scope = module.scope(func)
    for node in walk_body(func.node):  # buf.copy_(src) / buf[...].copy_(src) says what fills it
        if isinstance(node, ast.Call) and S.call_name(node) == "copy_" and isinstance(node.func, ast.Attribute):
            if S.is_persistent_value(node.func.value, module, func) == root and node.args:
                params, _ = S.param_roots(node.args[0], scope)
                copied = [p for p in params if not S.param_is_weight(sub, func, p)]
                if copied:
                    return sorted(set(copied))
    for node in walk_body(func.node):
        if not isinstance(node, ast.Call):
            continue
        args = [*node.args, *[k.value for k in node.keywords]]
        if not any(S.is_persistent_value(a, module, func) == root for a in args):
            continue
        acts: list[str] = []
        for a in args:
            params, _ = S.param_roots(a, scope)
            acts.extend(p for p in params if not S.param_is_weight(sub, func, p))
        if acts:
            return sorted(set(acts))
    return []


def _only_compared(module: PyModule, root: str) -> bool:
    """State read only inside comparisons (a snapshot/signature, not data that is used)."""
    attr = root.split(".", 1)[1] if root.startswith("self.") else root
    seen = False
    for node in ast.walk(module.tree):
        hit = (
            isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name) and node.value.id == "self"
            if root.startswith("self.")
            else isinstance(node, ast.Name) and node.id == attr
        )
        if not hit or not isinstance(getattr(node, "ctx", None), ast.Load):
            continue
        seen = True
        parent = module.parents.get(node)
        if isinstance(parent, ast.Compare):
            continue
        if isinstance(parent, ast.Call) and S.call_name(parent) in ("equal", "allclose", "eq", "isclose", "array_equal"):
            continue
        return False
    return seen


def _is_scalar_signature(value: ast.expr, module: PyModule, func: FunctionInfo) -> bool:
    exprs = [value]
    if isinstance(value, ast.Name):
        exprs = S.local_defs(module.scope(func), value.id) or [value]
    for e in exprs:
        if isinstance(e, ast.Call):
            name = S.call_name(e)
            if name in ("float", "int", "hash", "item", "sum", "tolist") and not e.keywords:
                continue
        return False
    return True


def _is_key_expr(value: ast.expr) -> bool:
    if not isinstance(value, ast.Attribute | ast.Call | ast.Tuple):
        return False
    return not any(
        isinstance(n, ast.Call)
        and S.call_name(n) not in ("data_ptr", "stride", "size", "numel", "id", "tuple", "storage_offset", "int", "str")
        for n in ast.walk(value)
    )


def _returned_names(func: FunctionInfo) -> set[str]:
    names: set[str] = set()
    for node in walk_body(func.node):
        if isinstance(node, ast.Return) and node.value is not None:
            vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            for v in vals:
                if isinstance(v, ast.Name):
                    names.add(v.id)
    return names


def _has_state_hook(module: PyModule) -> bool:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Attribute) and "load_state_dict" in node.attr and "hook" in node.attr:
            return True
    return False


_NOT_WORK = {
    "get", "setdefault", "pop", "items", "keys", "values", "append", "clone", "detach", "data_ptr", "size",
    "stride", "dim", "numel", "len", "isinstance", "hasattr", "getattr", "tuple", "int", "bool", "id", "range",
    "current_stream", "current_device", "get_device_properties", "is_contiguous", "view", "reshape",
    "contiguous", "zip", "enumerate", "print", "min", "max", "sorted", "list", "dict", "set", "str",
}


def _launches_work(sub: Submission, module: PyModule, func: FunctionInfo, stmts: list[ast.stmt]) -> bool:
    """Does this code compute anything (replay, kernel launch, torch op, submission function)?"""
    scope = module.scope(func)
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                return True
            if not isinstance(node, ast.Call):
                continue
            name = S.call_name(node)
            if isinstance(node.func, ast.Subscript) or name in ("replay", "launch", "run"):
                return True
            if name in _NOT_WORK or name in S.ALLOC_FUNCS:
                continue
            if sub.resolve_functions(node.func, scope):
                return True
            q = sub.qualname(node.func, scope) or ""
            if q.split(".")[0] in ("builtins", "math", "os", "sys", "time", "logging", "warnings"):
                continue
            return True
    return False


def _fallthrough_hits(
    sub: Submission, module: PyModule, func: FunctionInfo, g: ast.If, root: str, ks: set[str]
) -> list[HitReturn]:
    """`v = C.get(k); if v is None: v = compute(); C[k] = v; return v`: the hit skips the if."""
    if g.orelse or not _is_none_test(g.test) and not any(
        isinstance(n, ast.Compare) and any(isinstance(o, ast.NotIn) for o in n.ops) for n in ast.walk(g.test)
    ):
        return []
    parent = module.parents.get(g)
    block = None
    for attr in ("body", "orelse", "finalbody"):
        seq = getattr(parent, attr, None)
        if isinstance(seq, list) and g in seq:
            block = seq
    if block is None:
        return []
    after = block[block.index(g) + 1 :]
    out: list[HitReturn] = []
    for i, stmt in enumerate(after):
        if isinstance(stmt, ast.Return) and stmt.value is not None:
            vals = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
            if any(S.is_persistent_value(v, module, func) == root for v in vals):
                out.append(
                    HitReturn(
                        module=module, func=func, node=stmt, guard=g, container=root, key_kinds=ks,
                        recomputes=_launches_work(sub, module, func, after[:i]),
                    )
                )
            break
    return out


def analyze(sub: Submission) -> CacheReport:
    stores: list[CacheStore] = []
    hits: list[HitReturn] = []
    rets = returners(sub)
    hooks: dict[str, bool] = {}
    for func in list(sub.functions()):
        if func.short == "__init__" or func.is_triton:
            continue
        module = func.module
        guards = _guards(module, func)
        if not guards:
            continue
        scope = module.scope(func)
        guard_kinds: dict[str, set[str]] = {}
        for g, root in guards:
            ks = S.identity_kinds(g.test, scope)
            if not ks:
                ks = {"first_call"} if _is_none_test(g.test) else set()
            if any(isinstance(n, ast.Compare) and any(isinstance(o, ast.In | ast.NotIn) for o in n.ops) for n in ast.walk(g.test)):
                for n in ast.walk(g.test):
                    if isinstance(n, ast.Compare):
                        ks |= S.identity_kinds(n.left, scope)
            guard_kinds.setdefault(root, set()).update(ks)
            for stmt in g.body:  # state handed back on the hit is keyed by the same guard
                if isinstance(stmt, ast.Return) and stmt.value is not None:
                    for v in stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]:
                        r2 = S.is_persistent_value(v, module, func)
                        if r2 is not None:
                            guard_kinds.setdefault(r2, set()).update(ks)
        returned = _returned_names(func) if func in rets else set()
        hook = hooks.get(module.path)
        if hook is None:
            hook = hooks[module.path] = _has_state_hook(module)
        # stores
        for node in walk_body(func.node):
            for target, value, key in _store_targets(node):
                found = S.persistent_root(target, module, func)
                if found is None:
                    continue
                root = found
                kinds = set(guard_kinds.get(root, set()))
                for g, groot in guards:
                    if any(n is node for n in ast.walk(g)) and g.test is not node:
                        kinds |= guard_kinds.get(groot, set())
                if key is not None:
                    kinds |= S.identity_kinds(key, scope)
                    if not kinds:
                        kinds.add("shape")  # keyed on plain ints (sizes) of the call
                if not kinds and not any(root == r for _, r in guards) and root not in guard_kinds:
                    continue
                kinds.discard("first_call") if len(kinds) > 1 else None
                if not kinds:
                    kinds = {"first_call"}
                cached_kind, derived = _classify_value(sub, module, func, value, returned)
                if cached_kind != "output" and func in rets and _returns_root(module, func, root):
                    cached_kind, derived = "output", []
                elif cached_kind == "buffer" and func not in rets:
                    filled_from = _filled_from_activation(sub, module, func, root)
                    if filled_from:
                        cached_kind, derived = "input_copy", filled_from
                elif cached_kind in ("input_copy", "weight_copy") and _only_compared(module, root):
                    cached_kind = "key"
                elif cached_kind == "input_copy" and _is_scalar_signature(value, module, func):
                    cached_kind = "key"
                version = "version" in kinds or hook
                if not isinstance(node, ast.stmt | ast.Call):
                    continue
                store_node: ast.stmt | ast.Call = node
                stores.append(
                    CacheStore(
                        module=module,
                        func=func,
                        node=store_node,
                        container=root,
                        value=value,
                        key=key,
                        key_kinds=kinds,
                        cached_kind=cached_kind,
                        version_guarded=version,
                        derived_from=derived,
                    )
                )
        # hit returns: a guard branch returning persistent state
        for g, root in guards:
            hits.extend(_fallthrough_hits(sub, module, func, g, root, set(guard_kinds.get(root, set()))))
            for branch in (g.body, g.orelse):
                for i, stmt in enumerate(branch):
                    if not isinstance(stmt, ast.Return) or stmt.value is None:
                        continue
                    vals = stmt.value.elts if isinstance(stmt.value, ast.Tuple) else [stmt.value]
                    if not any(S.is_persistent_value(v, module, func) for v in vals):
                        continue
                    ks = set(guard_kinds.get(root, set()))
                    hits.append(
                        HitReturn(
                            module=module,
                            func=func,
                            node=stmt,
                            guard=g,
                            container=root,
                            key_kinds=ks,
                            recomputes=_launches_work(sub, module, func, branch[:i]),
                        )
                    )
    return CacheReport(stores=stores, hits=hits)


def _is_none_test(test: ast.expr) -> bool:
    for n in ast.walk(test):
        if isinstance(n, ast.Compare) and any(isinstance(c, ast.Constant) and c.value is None for c in n.comparators):
            return True
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return True
    return False


_CACHE: dict[int, CacheReport] = {}


def report(sub: Submission) -> CacheReport:
    """Memoized per submission object (several rules read the same analysis)."""
    key = id(sub)
    rep = _CACHE.get(key)
    if rep is None or getattr(rep, "_sub", None) is not sub:
        rep = analyze(sub)
        rep._sub = sub  # type: ignore[attr-defined]
        _CACHE.clear()
        _CACHE[key] = rep
    return rep
