"""KA151 reference-in-timed-path.

What it flags: the solution importing or loading the deck's ``reference.py``, ``baseline.py`` or
``sota.py`` (``import reference``, ``from reference import Model``, ``importlib.import_module``,
``spec_from_file_location(..., "reference.py")``, ``exec(open("reference.py").read())``,
``runpy.run_path``).

Why it matters: the reference is the answer key and sota/baseline are the comparators; running
them inside the solution returns the checker's own numbers (and times the vendor path). Every
seed verdict checks "no reference/baseline import in the timed path". Decisive when the
graded call reaches the load (forward's live path, or a module-level import whose name a live
function reads); advisory when only an unreached helper (an import-time warm-up borrowing
``get_inputs``, the module's own ``get_inputs``) loads it.

Bad::

    from reference import Model as _Ref

Good::

    # reimplement the math in the solution's own kernel
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _support as S
from audit_rules.source_model import PyModule, Submission, walk_body

RULE = RuleMeta(
    id="KA151",
    name="reference-in-timed-path",
    kind=RuleKind.STATIC,
    severity=Severity.CRITICAL,
    effect=Effect.DECISIVE_HACK,
    summary="Solution imports or loads reference.py / baseline.py / sota.py",
    probe=None,
)

_MODS = {"reference", "baseline", "sota"}
_LOADERS = {
    "importlib.import_module",
    "__import__",
    "importlib.util.spec_from_file_location",
    "runpy.run_path",
    "runpy.run_module",
    "imp.load_source",
    "exec",
    "open",
    "importlib.machinery.SourceFileLoader",
}


def _names_deck_module(text: str) -> str | None:
    base = text.replace("\\", "/").rsplit("/", 1)[-1]
    stem = base[:-3] if base.endswith(".py") else base
    return stem if stem in _MODS else None


def _bound_name_used_live(sub: Submission, module: PyModule, node: ast.AST) -> bool:
    """A module-level import/load whose bound name is read by a function on the live path."""
    names: set[str] = set()
    if isinstance(node, ast.Import | ast.ImportFrom):
        names = {(a.asname or a.name).split(".")[0] for a in node.names}
    else:
        parent = module.parents.get(node)
        while parent is not None and not isinstance(parent, ast.stmt):
            parent = module.parents.get(parent)
        if isinstance(parent, ast.Assign):
            names = {t.id for t in parent.targets if isinstance(t, ast.Name)}
        elif parent is not None and not isinstance(parent, ast.Assign):
            return True  # exec(...) / run_path at import: its effects land in module globals
    if not names:
        return False
    for func in sub.functions():
        if func.module is not module or sub.where(func) != "live":  # Model's methods count: the harness builds it
            continue
        for n in walk_body(func.node):
            if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load):
                return True
    return False


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    out: list[Finding] = []
    for module, func, node in sub.iter_nodes():
        if module.in_main_guard(node):
            continue
        hit: str | None = None
        if isinstance(node, ast.Import):
            hit = next((a.name for a in node.names if a.name.split(".")[-1] in _MODS or a.name.split(".")[0] in _MODS), None)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[-1] in _MODS or node.module.split(".")[0] in _MODS:
                hit = node.module
        elif isinstance(node, ast.Call):
            q = sub.qualname(node.func, module.scope(func)) or ""
            if q in _LOADERS:
                for a in node.args[:2]:
                    s = sub.fold_str(a, module.scope(func))
                    if s and (m := _names_deck_module(s)):
                        if q == "open" and not s.endswith(".py"):
                            continue
                        hit = m
                        break
                    if isinstance(a, ast.Call):  # exec(open("reference.py").read())
                        for x in ast.walk(a):
                            if isinstance(x, ast.Constant) and isinstance(x.value, str) and _names_deck_module(x.value) and x.value.endswith(".py"):
                                hit = _names_deck_module(x.value)
        if hit:
            where = sub.where(func)
            used_live = where == "live" or (where == "import" and _bound_name_used_live(sub, module, node))
            data = {"topic": "forbidden", "module": hit, "where": where}
            if used_live:
                out.append(
                    S.py_finding(
                        RULE,
                        module,
                        node,
                        f"The solution loads the deck's {hit} module where the graded call reaches it: the answer key "
                        "(or the comparator) runs inside the graded solution.",
                        data=data,
                    )
                )
            else:
                # Loaded only by a helper the graded calls never reach (an import-time autotune warm-up
                # that borrows get_inputs, a module-level get_inputs): nothing it computes is returned.
                out.append(
                    S.py_finding(
                        RULE,
                        module,
                        node,
                        f"The solution loads the deck's {hit} module outside the graded path ({where}: "
                        f"{func.name if func else 'module level'}); forward never reaches it, so the reference "
                        "computes nothing the checker or the timer sees.",
                        effect=Effect.ADVISORY,
                        severity=Severity.INFO,
                        data=data,
                    )
                )
    return S.dedupe(out)
