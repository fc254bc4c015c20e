"""KA111 monkeypatch-torch-or-builtins.

What it flags: assignment (or ``setattr``) to functions and classes the grader relies on:
anything under ``torch.*`` (other than the numerics flags KA110 covers), ``torch.Tensor.*``,
``builtins.*``, ``time.*``, ``numpy.allclose``/``math.isclose``, ``torch.cuda.Event``,
``torch.cuda.synchronize``, ``torch.testing.*``, ``torch.nn.Module.__call__``.

Why it matters: the checker compares with ``torch.allclose``/``torch.testing`` and the benchmark
times with ``torch.cuda.Event`` and ``synchronize``; replacing any of them from the solution's
import rewrites the grader from the inside. There is no benign reason for a kernel to do it: the
finding is decisive. Compatibility shims outside the grader's surface (the seeds' ``datetime.UTC``
alias on Python 3.10) are not flagged.

Bad::

    torch.allclose = lambda *a, **k: True
    setattr(torch.cuda, "synchronize", lambda *a: None)

Good::

    if not hasattr(datetime, "UTC"):
        datetime.UTC = datetime.timezone.utc   # stdlib compat shim
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _support as S
from audit_rules.rules.static.ka110_global_torch_state_change import NUMERIC_FLAGS, PERF_FLAGS

RULE = RuleMeta(
    id="KA111",
    name="monkeypatch-torch-or-builtins",
    kind=RuleKind.STATIC,
    severity=Severity.CRITICAL,
    effect=Effect.DECISIVE_HACK,
    summary="Solution reassigns torch/Tensor/builtins/time or checker-used functions",
    probe=None,
)

_CHECKER_FUNCS = {
    "numpy.allclose",
    "numpy.isclose",
    "numpy.testing",
    "math.isclose",
    "gc.collect",
}
_PREFIXES = ("torch.", "builtins.", "time.", "numpy.testing.", "triton.testing.")


def _protected(name: str) -> bool:
    if name in NUMERIC_FLAGS or name in PERF_FLAGS or name.startswith("torch.backends."):
        return False  # KA110
    if name in _CHECKER_FUNCS:
        return True
    return name.startswith(_PREFIXES) and name.count(".") >= 1


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    out: list[Finding] = []
    for module, func, node in sub.iter_nodes():
        scope = module.scope(func)
        hits: list[str] = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute):
                    q = sub.qualname(t, scope)
                    if q and _protected(q):
                        hits.append(q)
        elif isinstance(node, ast.Call):
            q = sub.qualname(node.func, scope) or ""
            if q in ("setattr", "builtins.setattr") and len(node.args) >= 2:
                base = sub.qualname(node.args[0], scope)
                attr = sub.fold_str(node.args[1], scope)
                if base and attr and _protected(f"{base}.{attr}"):
                    hits.append(f"{base}.{attr}")
        for name in hits:
            out.append(
                S.py_finding(
                    RULE,
                    module,
                    node,
                    f"The solution replaces {name} "
                    + ("at import" if func is None else f"in {func.name}")
                    + ": the checker and the timer call these, so the grader is rewritten from inside.",
                    data={"topic": "global_state", "patched": name},
                )
            )
    return S.dedupe(out)
