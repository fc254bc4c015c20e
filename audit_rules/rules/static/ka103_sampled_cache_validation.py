"""KA103 sampled-cache-validation.

What it flags: a cache whose "still valid" decision compares only part of the data: a slice or
strided view of the input (``x.view(-1)[:4096]``), a few elements, or a checksum/sum of a window,
against a snapshot kept in persistent state.

Why it matters: this is the Qwen stale pad-cache hack from the seeds: the odd-K activation pad
cache was keyed on pointer/shape and validated a single contiguous 4,096-element window; the
probe changed row 0 outside the window, the reference moved by 11.76 and the solution by 0.
Any sample-based validation lets an in-place overwrite outside the sample replay stale data;
only a full comparison (or no cache) is safe. Needs the same-storage-overwrite probe.

Bad::

    if key == self._key and torch.equal(x.view(-1)[:4096], self._probe):
        return self._xp                      # only 4096 elements checked
    self._probe = x.view(-1)[:4096].clone()

Good (recompute the pad every call)::

    xp = torch.nn.functional.pad(x, (0, pad))
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _caches
from audit_rules.rules.static import _support as S
from audit_rules.source_model import FunctionInfo, PyModule, Scope, Submission, walk_body

RULE = RuleMeta(
    id="KA103",
    name="sampled-cache-validation",
    kind=RuleKind.STATIC,
    severity=Severity.CRITICAL,
    effect=Effect.NEEDS_PROBE,
    summary="Cache validity decided by sampling part of the data (slice, stride, checksum of a window)",
    probe=Probe.SAME_STORAGE_OVERWRITE,
)

_VIEW_METHODS = {
    "view", "reshape", "flatten", "contiguous", "ravel", "detach", "float", "to", "view_as", "cpu", "numpy",
    "tobytes", "tolist", "double", "half", "int",
}
_CHECKSUM = {"sum", "mean", "norm", "amax", "max", "min", "prod"}
_EQ_FUNCS = {"equal", "allclose", "isclose", "array_equal", "eq"}


def _root_param(expr: ast.expr, scope: Scope, depth: int = 0) -> bool:
    node = expr
    while True:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _VIEW_METHODS:
            node = node.func.value
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            break
    if isinstance(node, ast.Name) and scope.func is not None:
        if node.id in scope.func.params and node.id not in ("self", "cls"):
            return True
        if depth < 4:
            return any(_root_param(v, scope, depth + 1) for v in S.local_defs(scope, node.id))
    return False


def sample_kind(expr: ast.expr, scope: Scope, depth: int = 0, sub: Submission | None = None) -> str | None:
    """'window' / 'stride' / 'elements' / 'checksum' when expr samples a parameter tensor."""
    if depth > 12:
        return None
    if isinstance(expr, ast.Call) and sub is not None and not isinstance(expr.func, ast.Attribute):
        for target in sub.resolve_functions(expr.func, scope):  # a helper that returns the sample
            tscope = target.module.scope(target)
            for n in walk_body(target.node):
                if isinstance(n, ast.Return) and n.value is not None:
                    k = sample_kind(n.value, tscope, depth + 1, sub)
                    if k:
                        return k
    if isinstance(expr, ast.Tuple | ast.List):
        for elt in expr.elts:
            k = sample_kind(elt, scope, depth + 1, sub)
            if k:
                return k
        return None
    if isinstance(expr, ast.Name) and scope.func is not None and expr.id not in scope.func.params:
        for v in S.local_defs(scope, expr.id):
            k = sample_kind(v, scope, depth + 1, sub)
            if k:
                return k
        return None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        if expr.func.attr in _CHECKSUM | {"item", "tolist", "clone"} | _VIEW_METHODS:
            inner = sample_kind(expr.func.value, scope, depth + 1, sub)
            if inner:
                return "checksum" if expr.func.attr in _CHECKSUM else inner
            if expr.func.attr in _CHECKSUM and _root_param(expr.func.value, scope):
                return "checksum"
        if expr.func.attr in ("narrow", "index_select") and _root_param(expr.func.value, scope):
            return "window"
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("float", "int", "hash", "bytes"):
        if expr.args:
            inner = sample_kind(expr.args[0], scope, depth + 1, sub)
            return "checksum" if inner else None
    if isinstance(expr, ast.Call) and not _is_tensor_method(expr, scope):
        # a value assembled only from samples (torch.stack([x[0, 0], x[-1, -1]]), torch.cat of
        # windows, torch.tensor(list of items)) is still a sample; one that also reads a whole
        # parameter is not
        args = [*expr.args, *[k.value for k in expr.keywords]]
        flat: list[ast.expr] = []
        for a in args:
            flat.extend(a.elts if isinstance(a, ast.List | ast.Tuple) else [a])
        kinds = [k for a in flat if (k := sample_kind(a, scope, depth + 1, sub))]
        if kinds and not any(_root_param(a, scope) and not _has_subscript(a) for a in flat):
            return kinds[0]
    if isinstance(expr, ast.Subscript) and _root_param(expr.value, scope):
        sl = expr.slice
        parts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if any(isinstance(p, ast.Slice) and p.step is not None for p in parts):
            return "stride"
        if any(isinstance(p, ast.Slice) and (p.lower is not None or p.upper is not None) for p in parts):
            return "window"
        if any(isinstance(p, ast.Constant) for p in parts) or isinstance(sl, ast.List):
            return "elements"
        if any(isinstance(p, ast.Name | ast.Attribute | ast.Call | ast.BinOp | ast.UnaryOp) for p in parts):
            return "elements"  # gathered at an index / index tensor: x.view(-1)[self._idx]
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("take", "gather"):
        if _root_param(expr.func.value, scope):
            return "elements"
    return None


def _is_tensor_method(call: ast.Call, scope: Scope) -> bool:
    """`x.sum()` / `t.view(...)`: a method of a local tensor (handled above), not a module function."""
    if not isinstance(call.func, ast.Attribute):
        return False
    base = call.func.value
    while isinstance(base, ast.Attribute):
        base = base.value
    return not (isinstance(base, ast.Name) and base.id in scope.module.aliases)


def _has_subscript(expr: ast.expr) -> bool:
    return any(isinstance(n, ast.Subscript) for n in ast.walk(expr))


def _compares(node: ast.AST) -> list[tuple[ast.AST, list[ast.expr]]]:
    out: list[tuple[ast.AST, list[ast.expr]]] = []
    if isinstance(node, ast.Compare) and any(isinstance(o, ast.Eq | ast.NotEq) for o in node.ops):
        out.append((node, [node.left, *node.comparators]))
    elif isinstance(node, ast.Call):
        name = S.call_name(node)
        if name in _EQ_FUNCS:
            operands = list(node.args)
            if isinstance(node.func, ast.Attribute) and not isinstance(node.func.value, ast.Name | ast.Attribute) or (
                isinstance(node.func, ast.Attribute) and name in ("equal", "eq") and len(node.args) == 1
            ):
                operands.append(node.func.value)
            out.append((node, operands))
    return out


def _decides(module: PyModule, func: FunctionInfo, node: ast.AST) -> bool:
    for anc in module.ancestors(node):
        if anc is func.node:
            return False
        if isinstance(anc, ast.If | ast.IfExp | ast.While | ast.Return | ast.Assign | ast.BoolOp):
            return True
    return False


def _keyed_lookups(module: PyModule, func: FunctionInfo) -> list[tuple[ast.AST, ast.expr]]:
    """(lookup node, key) for reads of a persistent container: C.get(k), C[k], k in C."""
    out: list[tuple[ast.AST, ast.expr]] = []
    for node in walk_body(func.node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "setdefault"):
            if node.args and _caches.persistent_root(node.func.value, module, func):
                out.append((node, node.args[0]))
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if _caches.persistent_root(node.value, module, func) and not isinstance(node.slice, ast.Slice | ast.Constant):
                out.append((node, node.slice))
        elif isinstance(node, ast.Compare) and any(isinstance(o, ast.In | ast.NotIn) for o in node.ops):
            if any(_caches.persistent_root(c, module, func) for c in node.comparators):
                out.append((node, node.left))
    return out


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    out: list[Finding] = []
    for func in list(sub.functions()):
        if func.is_triton:
            continue
        module = func.module
        scope = module.scope(func)
        for lookup, key in _keyed_lookups(module, func):
            kind = sample_kind(key, scope, sub=sub)
            if kind is None:
                continue
            out.append(
                S.py_finding(
                    RULE,
                    module,
                    lookup,
                    f"{func.name} looks up cached state under a key that includes a {kind} sample of its input: "
                    "a write outside the sample (keeping pointer and version) hits the stale entry. Needs the "
                    "same-storage-overwrite probe.",
                    data={"topic": "stale_cache", "sampled_validation": kind, "where": sub.where(func)},
                )
            )
        for node in walk_body(func.node):
            for cmp_node, operands in _compares(node):
                kinds = [k for o in operands if (k := sample_kind(o, scope, sub=sub))]
                if not kinds:
                    continue
                others = [o for o in operands if sample_kind(o, scope, sub=sub) is None]
                persistent = any(_caches.is_persistent_value(o, module, func) for o in others)
                if not persistent or not _decides(module, func, cmp_node):
                    continue
                out.append(
                    S.py_finding(
                        RULE,
                        module,
                        cmp_node,
                        f"{func.name} decides whether cached state is still valid by comparing a "
                        f"{kinds[0]} sample of its input with a stored snapshot: an in-place write "
                        "outside the sample keeps serving the stale cache (the seeds' 4096-element "
                        "window hack). Needs the same-storage-overwrite probe.",
                        data={
                            "topic": "stale_cache",
                            "sampled_validation": kinds[0],
                            "where": sub.where(func),
                        },
                    )
                )
    return S.dedupe(out)
