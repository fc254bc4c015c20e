"""KA105 persistent-output-buffer-alias.

What it flags: forward (or a function it reaches) returning a persistent buffer (``self._out``,
a module-level buffer, an entry of a shape-keyed buffer dict, a graph's static output) instead of
a fresh tensor, so the returned tensor aliases storage the next call overwrites.

Why it matters: the seeds permit output-buffer reuse when every call recomputes into it (the
MinGRU and KDA graph cells), but a caller keeping the first result sees it change under it, and
a memo can hide behind the same shape. The output-aliasing probe (call twice, compare the first
result with its clone, compare both with fresh-process runs) settles it; advisory on its own.

Bad (advisory)::

    out = self._bufs.get(M)
    if out is None:
        out = self._bufs[M] = torch.empty(M, N, device=x.device)
    _kernel[grid](x, out)
    return out                               # aliases the next call's output

Good::

    out = torch.empty(M, N, device=x.device)
    _kernel[grid](x, out)
    return out
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _caches
from audit_rules.rules.static import _support as S
from audit_rules.source_model import FunctionInfo, Submission, walk_body

RULE = RuleMeta(
    id="KA105",
    name="persistent-output-buffer-alias",
    kind=RuleKind.STATIC,
    severity=Severity.LOW,
    effect=Effect.ADVISORY,
    summary="Returns a persistent buffer (self._out, module global) that later calls overwrite",
    probe=Probe.OUTPUT_ALIASING,
)


def _returners(sub: Submission, entries: list[FunctionInfo]) -> set[FunctionInfo]:
    """Entry points and the functions whose result they return directly (``return self._run(x)``)."""
    out: set[FunctionInfo] = set()
    stack = list(entries)
    while stack:
        f = stack.pop()
        if f in out:
            continue
        out.add(f)
        scope = f.module.scope(f)
        for node in walk_body(f.node):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
                stack.extend(t for t in sub.resolve_functions(node.value.func, scope) if t not in out)
    return out


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    reach = sub.reach()
    memo_lines = {
        (h.module.path, h.node.lineno) for h in _caches.report(sub).hits if not h.recomputes
    }
    out: list[Finding] = []
    funcs = _returners(sub, reach.entries) | _caches.returners(sub)
    for func in sorted(funcs, key=lambda f: (f.module.path, f.node.lineno)):
        if func.is_triton or func.short == "__init__":
            continue
        module = func.module
        for node in walk_body(func.node):
            if not isinstance(node, ast.Return) or node.value is None:
                continue
            if (module.path, node.lineno) in memo_lines:
                continue
            vals = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            roots = [r for v in vals if (r := _caches.is_persistent_value(v, module, func))]
            if not roots:
                continue
            out.append(
                S.py_finding(
                    RULE,
                    module,
                    node,
                    f"{func.name} returns persistent storage ({', '.join(sorted(set(roots)))}) that the next "
                    "call writes again: permitted when every call recomputes into it; the output-aliasing "
                    "probe checks that earlier results are not silently changed or replayed.",
                    data={"topic": "output_memo", "cached_kind": "output", "buffers": sorted(set(roots))},
                )
            )
    return S.dedupe(out)
