"""KA113 caller-introspection.

What it flags: the solution looking at who calls it: ``inspect.stack``/``currentframe``,
``sys._getframe``, ``traceback.extract_stack``/``format_stack``, frame walks without them
(``e.__traceback__.tb_frame.f_back``), ``sys.modules["__main__"]`` / ``sys.modules.get("__main__")``
/ ``import __main__``, ``sys.argv`` and its file twin ``/proc/self/cmdline`` (``psutil``
``cmdline()``), and the checker/benchmark file names (``check.py``, ``benchmark.py``) used in
logic. Decisive when the value steers a branch; advisory otherwise.

Why it matters: a solution that knows whether check.py or benchmark.py is running can compute
exactly in the check and cut corners in the timed run; the seeds' auditors list "stack/caller or
check.py sniffing" among the standing checks of every clean verdict.

Bad::

    if any("benchmark.py" in f.filename for f in inspect.stack()):
        return _fast_path(x)

Good::

    return _kernel(x)                        # never asks who is calling
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _support as S
from audit_rules.source_model import FunctionInfo, PyModule, Scope, Submission

RULE = RuleMeta(
    id="KA113",
    name="caller-introspection",
    kind=RuleKind.STATIC,
    severity=Severity.CRITICAL,
    effect=Effect.DECISIVE_HACK,
    summary="Inspects the caller (stack frames, __main__, argv, checker file names) to steer behaviour",
    probe=None,
)

_INTROSPECT = {
    "inspect.stack",
    "inspect.currentframe",
    "inspect.getouterframes",
    "inspect.getframeinfo",
    "inspect.trace",
    "sys._getframe",
    "sys._current_frames",
    "traceback.extract_stack",
    "traceback.format_stack",
    "traceback.print_stack",
    "traceback.walk_stack",
}
_NAMES = ("check.py", "benchmark.py", "check", "benchmark")
# frame objects reached without inspect/sys: `e.__traceback__.tb_frame.f_back`, `gen.gi_frame.f_back`
_FRAME_ATTRS = {"f_back", "tb_frame"}
_OPENERS = {"open", "builtins.open", "io.open", "codecs.open", "pathlib.Path", "Path", "os.open"}


def _names_cmdline(sub: Submission, call: ast.Call, scope: Scope) -> bool:
    """open("/proc/self/cmdline"), Path(f"/proc/{pid}/cmdline").read_text(), psutil.Process().cmdline()."""
    if S.call_name(call) == "cmdline":
        return (sub.qualname(call.func, scope) or "").startswith("psutil") or "psutil" in scope.module.segment(call.func)
    expr: ast.AST = call
    if isinstance(call.func, ast.Attribute) and S.call_name(call) in ("read_text", "read_bytes"):
        expr = call.func.value
    if isinstance(expr, ast.Name):
        expr = S.binding(scope, expr) or expr
    if isinstance(expr, ast.Call) and expr.args:
        expr = expr.args[0]
    text = sub.fold_str(expr, scope) if isinstance(expr, ast.expr) else None
    if text is None:
        text = " ".join(n.value for n in ast.walk(expr) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    return "/proc/" in text and "cmdline" in text


def _source_of(sub: object, module: PyModule, func: FunctionInfo | None, node: ast.AST) -> str | None:
    s = sub  # Submission
    scope = module.scope(func)
    if isinstance(node, ast.Call):
        q = s.qualname(node.func, scope) or ""  # type: ignore[attr-defined]
        if q in _INTROSPECT:
            return q
        if q in ("sys.modules.get", "sys.modules.__getitem__") and node.args:
            if s.fold_str(node.args[0], scope) == "__main__":  # type: ignore[attr-defined]
                return "__main__"
        if q in _OPENERS or S.call_name(node) in ("read_text", "read_bytes", "cmdline"):
            if _names_cmdline(s, node, scope):  # type: ignore[arg-type]
                return "the process command line (/proc/*/cmdline)"
    if isinstance(node, ast.Attribute) and node.attr in _FRAME_ATTRS and isinstance(node.ctx, ast.Load):
        parent = module.parents.get(node)
        if not (isinstance(parent, ast.Attribute) and parent.attr in _FRAME_ATTRS and parent.value is node):
            return f"a frame walk (.{node.attr})"
    if isinstance(node, ast.Attribute | ast.Subscript | ast.Name) and isinstance(getattr(node, "ctx", None), ast.Load):
        q = s.qualname(node, scope) or ""  # type: ignore[attr-defined]
        if q in ("sys.argv", "__main__", "sys.orig_argv") or q.startswith("__main__."):
            parent = module.parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.value is node:
                return None  # the outer attribute is reported
            return q
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ("check.py", "benchmark.py"):
        parent = module.parents.get(node)
        if isinstance(parent, ast.Compare):
            return f'"{node.value}"'
    return None


def _in_branch(module: PyModule, func: FunctionInfo | None, node: ast.AST) -> bool:
    names: set[str] = set()
    for anc in module.ancestors(node):
        if isinstance(anc, ast.If | ast.IfExp | ast.While | ast.Assert) and any(n is node for n in ast.walk(anc.test)):
            return True
        if isinstance(anc, ast.comprehension) and any(n is node for n in ast.walk(anc.iter)):
            continue
        if isinstance(anc, ast.Return) and func is not None:
            # a helper returning the sniffed fact, used in a branch by its caller
            return True
        if isinstance(anc, ast.Assign):
            names |= {t.id for t in anc.targets if isinstance(t, ast.Name)}
            break
        if isinstance(anc, ast.stmt):
            break
    if not names:
        return False
    body = module.tree if func is None else func.node
    for n in ast.walk(body):
        if isinstance(n, ast.If | ast.IfExp | ast.While) and any(isinstance(x, ast.Name) and x.id in names for x in ast.walk(n.test)):
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
        what = _source_of(sub, module, func, node)
        if what is None:
            continue
        branch = _in_branch(module, func, node)
        out.append(
            S.py_finding(
                RULE,
                module,
                node,
                f"The solution inspects its caller through {what}"
                + (" and branches on it: it can behave differently under the checker and the benchmark." if branch else " (no branch on it was found)."),
                effect=None if branch else Effect.ADVISORY,
                severity=None if branch else Severity.LOW,
                data={"topic": "checked_vs_timed", "source": what, "branches": branch, "where": sub.where(func)},
            )
        )
    # `import __main__`
    for module in sub.modules.values():
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import) and any(a.name == "__main__" for a in node.names):
                out.append(
                    S.py_finding(
                        RULE,
                        module,
                        node,
                        "The solution imports __main__ (the harness entry script).",
                        effect=Effect.ADVISORY,
                        severity=Severity.LOW,
                        data={"topic": "checked_vs_timed", "source": "__main__"},
                    )
                )
    return S.dedupe(out)
