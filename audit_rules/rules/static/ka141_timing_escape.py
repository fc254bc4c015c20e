"""KA141 timing-escape.

What it flags: work launched where the benchmark's CUDA events do not see it: side streams
(``with torch.cuda.stream(s)``, ``torch.cuda.set_stream(s)``, a created stream's raw
``s.cuda_stream`` handle passed to an extension; C++ ``cudaStreamCreate`` + launches on it) or
Python threads/executors, with no join of THAT object anywhere on the live path
(``wait_stream(s)``, ``s.synchronize()``, device-wide ``torch.cuda.synchronize()``,
``wait_event(ev)`` of an event recorded on ``s``, ``t.join()`` of that thread, ``fut.result()`` /
``pool.shutdown()``; C++ ``cudaStreamSynchronize``/``cudaStreamWaitEvent``/``cudaDeviceSynchronize``).
Joins are matched by object, so a string ``",".join(...)`` joins nothing; a join in a helper or
in the caller counts; a helper's stream parameter that every caller fills with the current
stream is no side stream. A join that runs only once (behind a first-call flag its branch or the
method it calls sets, on the miss path after a keyed early return, in an except handler, or in a
helper only such paths call) joins nothing the timed calls launch; a launch on such a one-time
path (a warm-up before a graph capture) is not what the timed calls run.

A join that runs only when the input object changed (inside ``if not repeat:`` where ``repeat``
is ``self._last() is x``, or its else arm), or only above the launch in the same function (a
"deferred" join of the previous call's work), leaves the benchmark's repeated calls unjoined:
decisive, the stream_escape probe named.

Why it matters: the benchmark records events on the current stream; kernels on another stream
that the current stream never waits for finish outside the timed window, so the measured time
covers only the launch. Needs the stream_escape probe (time with a device-wide synchronize).

Bad::

    with torch.cuda.stream(self._side):
        _kernel[grid](x, out)
    return out                                  # nobody waits for self._side

Good::

    with torch.cuda.stream(self._side):
        _kernel[grid](x, out)
    torch.cuda.current_stream().wait_stream(self._side)
    return out
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _support as S
from audit_rules.source_model import FunctionInfo, PyModule, Scope, Submission, self_attr_class, walk_body

RULE = RuleMeta(
    id="KA141",
    name="timing-escape",
    kind=RuleKind.STATIC,
    severity=Severity.HIGH,
    effect=Effect.NEEDS_PROBE,
    summary="Work on side streams or threads not joined before forward returns",
    probe=Probe.STREAM_ESCAPE,
)

_THREADS = {"threading.Thread", "multiprocessing.Process", "_thread.start_new_thread", "thread.start_new_thread"}
_WAIT_ALL = {"concurrent.futures.wait", "concurrent.futures.as_completed"}


def _key(expr: ast.expr | None, scope: Scope, depth: int = 0) -> str | None:
    """A name for the object an expression denotes, shared by the places that use it: `self.X`,
    a module global, or a local (followed through plain local aliases)."""
    if expr is None or depth > 4:
        return None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id in ("self", "cls"):
        return f"self.{expr.attr}"
    if isinstance(expr, ast.Name):
        if scope.func is not None and expr.id not in scope.func.params:
            val = scope.latest(expr.id, expr.lineno)
            if isinstance(val, ast.Name | ast.Attribute) and val is not expr:
                return _key(val, scope, depth + 1)
            if val is not None:
                return f"{scope.func.name}:{expr.id}"
        if scope.func is not None and expr.id in scope.func.params:
            return f"{scope.func.name}:{expr.id}"
        return f"global:{expr.id}"
    return None


def _values(expr: ast.expr, scope: Scope) -> list[ast.expr]:
    """What a name / self attribute was bound to (all bindings)."""
    module = scope.module
    if isinstance(expr, ast.Name):
        vals = scope.values_of(expr.id) if scope.func is not None and expr.id not in scope.func.params else []
        return vals or module.scope(None).values_of(expr.id)
    if (
        isinstance(expr, ast.Attribute)
        and isinstance(expr.value, ast.Name)
        and (cls_name := self_attr_class(scope.func, expr.value.id))
    ):
        return [v for _f, v in module.self_assigns(cls_name).get(expr.attr, [])]
    return []


def _is_current_stream(sub: Submission, expr: ast.expr | None, scope: Scope, depth: int = 0) -> bool:
    """torch.cuda.current_stream() / default_stream(), directly or through a name bound to it."""
    if expr is None or depth > 4:
        return False
    if isinstance(expr, ast.Call):
        q = sub.qualname(expr.func, scope) or ""
        return "current_stream" in q or "default_stream" in q or S.call_name(expr) in ("current_stream", "default_stream")
    func = scope.func
    if isinstance(expr, ast.Name) and func is not None and expr.id in func.params:
        # a helper's stream parameter: current when every caller passes the current stream
        idx = func.params.index(expr.id) - (1 if func.cls and func.params[0] in ("self", "cls") else 0)
        args: list[tuple[ast.expr, Scope]] = []
        for mod, caller, call in sub.callers(func):
            arg = next((k.value for k in call.keywords if k.arg == expr.id), None)
            if arg is None and 0 <= idx < len(call.args):
                arg = call.args[idx]
            if arg is None:
                return False
            args.append((arg, mod.scope(caller)))
        return bool(args) and all(_is_current_stream(sub, a, sc, depth + 1) for a, sc in args)
    vals = _values(expr, scope)
    return bool(vals) and all(_is_current_stream(sub, v, scope, depth + 1) for v in vals if v is not expr)


def _is_created_stream(sub: Submission, expr: ast.expr, scope: Scope) -> bool:
    """Bound to a stream the submission creates (torch.cuda.Stream(...), torch.cuda.streams.Stream)."""
    for v in _values(expr, scope):
        if isinstance(v, ast.Call) and (sub.qualname(v.func, scope) or S.call_name(v)).rsplit(".", 1)[-1] in (
            "Stream",
            "ExternalStream",
        ):
            return True
    return False


def _assigned_key(module: PyModule, node: ast.AST, scope: Scope) -> str | None:
    parent = module.parents.get(node)
    if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
        return _key(parent.targets[0], scope)
    return None


def _is_executor(sub: Submission, module: PyModule, recv: ast.expr, scope: Scope) -> bool:
    for v in _values(recv, scope):
        if isinstance(v, ast.Call) and (sub.qualname(v.func, scope) or S.call_name(v)).endswith("Executor"):
            return True
    return "executor" in module.segment(recv).lower() or "pool" in module.segment(recv).lower()


def _enclosing_stream(sub: Submission, module: PyModule, node: ast.AST, scope: Scope) -> str | None:
    """The stream of the innermost `with torch.cuda.stream(S):` holding the node."""
    for anc in module.ancestors(node):
        if isinstance(anc, ast.With):
            for item in anc.items:
                ce = item.context_expr
                if isinstance(ce, ast.Call) and (sub.qualname(ce.func, scope) or "").endswith(("cuda.stream", "StreamContext")):
                    return _key(ce.args[0], scope) if ce.args else None
    return None


@dataclass(frozen=True)
class _Site:
    module: PyModule
    func: FunctionInfo
    node: ast.AST


def _in_loop(module: PyModule, func: FunctionInfo, node: ast.AST) -> bool:
    for anc in module.ancestors(node):
        if anc is func.node:
            return False
        if isinstance(anc, ast.For | ast.While | ast.AsyncFor):
            return True
    return False


def _before_in_same_call(site: _Site, func: FunctionInfo, node: ast.AST) -> bool:
    """A join in the launching function, above the launch and outside any loop: it runs before
    this call's launch, so it can only join what an earlier call left running."""
    return site.func is func and getattr(site.node, "lineno", 0) < getattr(node, "lineno", 0) \
        and not _in_loop(site.module, func, site.node)


def _repeat_implies(sub: Submission, module: PyModule, func: FunctionInfo, test: ast.expr, depth: int = 0) -> bool | None:
    """What the test evaluates to in the benchmark's steady state, where forward gets the same input
    object as the call before and the state it keeps is set: True/False when an identity test of an
    input against kept state decides it, None when the test does not say."""
    from audit_rules.rules.static import _caches

    if depth > 4:
        return None
    scope = module.scope(func)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        v = _repeat_implies(sub, module, func, test.operand, depth + 1)
        return None if v is None else not v
    if isinstance(test, ast.Name) and test.id not in func.params:
        val = scope.latest(test.id, test.lineno)
        return _repeat_implies(sub, module, func, val, depth + 1) if val is not None and val is not test else None
    if isinstance(test, ast.BoolOp):
        vals = [_repeat_implies(sub, module, func, v, depth + 1) for v in test.values]
        if isinstance(test.op, ast.And):
            if any(v is False for v in vals):
                return False
            if all(v is True for v in vals):
                return True
            return None
        if any(v is True for v in vals):
            return True
        if all(v is False for v in vals):
            return False
        return None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = test.ops[0]
        side = test.comparators[0]
        if isinstance(side, ast.Constant) and side.value is None and isinstance(op, ast.Is | ast.IsNot) \
                and _caches.is_persistent_value(test.left, module, func) is not None:
            return isinstance(op, ast.IsNot)  # kept state is set in the steady state
        hit = _caches._identity_hit(test, module, func, sub)
        if hit is not None:
            return hit[0] == "body"
        if isinstance(op, ast.Is | ast.IsNot):  # `self._last() is x`: a kept weak reference called
            sides = [test.left, side]
            kept = [e for e in sides if isinstance(e, ast.Call) and not e.args
                    and _caches.is_persistent_value(e.func, module, func) is not None]
            acts = [e for e in sides if isinstance(e, ast.Name) and e.id in func.params
                    and not S.param_is_weight(sub, func, e.id)]
            if kept and acts:
                return isinstance(op, ast.Is)
    return None


def _skipped_on_repeat(sub: Submission, site: _Site) -> bool:
    """Does the join sit in an arm of an `if` that the steady state (same input object again) does
    not take?"""
    module, func = site.module, site.func
    child: ast.AST = site.node
    for anc in module.ancestors(site.node):
        if anc is func.node:
            return False
        if isinstance(anc, ast.If) and child is not anc.test:
            value = _repeat_implies(sub, module, func, anc.test)
            if value is not None and (child in anc.body) != value:
                return True
        child = anc
    return False


_JOIN_NAMES = frozenset({"wait_stream", "join", "result", "synchronize", "shutdown", "wait", "exception", "wait_event"})


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    out: list[Finding] = []
    live = sub.reach().live
    # (module, func, node, what, keys of the objects whose join would cover it)
    escapes: list[tuple[PyModule, FunctionInfo, ast.AST, str, set[str]]] = []
    joined: dict[str, list[_Site]] = {}
    device_sync = False
    event_streams: dict[str, set[str]] = {}
    waited_events: dict[str, list[_Site]] = {}
    for func in sorted(live, key=lambda f: (f.module.path, f.node.lineno)):
        if func.is_triton:
            continue
        module = func.module
        scope = module.scope(func)
        for node in walk_body(func.node):
            if isinstance(node, ast.With):
                for item in node.items:
                    ce = item.context_expr
                    if isinstance(ce, ast.Call) and (sub.qualname(ce.func, scope) or "").endswith(("cuda.stream", "StreamContext")):
                        arg = ce.args[0] if ce.args else None
                        if _is_current_stream(sub, arg, scope):
                            continue
                        key = _key(arg, scope)
                        escapes.append((module, func, node, "side stream", {key} if key else set()))
            elif isinstance(node, ast.Attribute) and node.attr == "cuda_stream" and isinstance(node.ctx, ast.Load):
                # a raw handle of a private stream handed to an extension / launcher
                parent = module.parents.get(node)
                if isinstance(parent, ast.keyword):
                    parent = module.parents.get(parent)
                if isinstance(parent, ast.Call) and parent.func is not node and _is_created_stream(sub, node.value, scope):
                    key = _key(node.value, scope)
                    escapes.append((module, func, parent, "side stream", {key} if key else set()))
            elif isinstance(node, ast.Call):
                q = sub.qualname(node.func, scope) or ""
                name = S.call_name(node)
                recv = node.func.value if isinstance(node.func, ast.Attribute) else None
                site = _Site(module, func, node)
                if q.endswith("cuda.set_stream") and node.args and not _is_current_stream(sub, node.args[0], scope):
                    key = _key(node.args[0], scope)
                    escapes.append((module, func, node, "side stream", {key} if key else set()))
                elif q in _THREADS:
                    key = _assigned_key(module, node, scope)
                    escapes.append((module, func, node, "thread", {key} if key else set()))
                elif name in ("submit", "map") and recv is not None and _is_executor(sub, module, recv, scope):
                    keys = {k for k in (_assigned_key(module, node, scope), _key(recv, scope)) if k}
                    escapes.append((module, func, node, "thread", keys))
                # joins. One in an except handler / off-GPU branch, or on a one-time path (a first
                # call, a warm-up helper), joins nothing the timed calls launch.
                if module.in_except(node, stop=func.node) or (
                        name in _JOIN_NAMES or q.endswith("cuda.synchronize") or q in _WAIT_ALL) and S.once_only(sub, func, node):
                    pass
                elif q.endswith("cuda.synchronize"):  # device-wide: waits for every stream
                    device_sync = True
                elif name == "wait_stream" and node.args:
                    if (k := _key(node.args[0], scope)) is not None:
                        joined.setdefault(k, []).append(site)
                elif name in ("join", "result", "synchronize", "shutdown", "wait", "exception") and recv is not None:
                    if not (isinstance(recv, ast.Constant) and isinstance(recv.value, str)):
                        if (k := _key(recv, scope)) is not None:
                            joined.setdefault(k, []).append(site)
                            waited_events.setdefault(k, []).append(site)
                elif q in _WAIT_ALL or (name == "wait" and recv is None):
                    for a in node.args:
                        for n in ast.walk(a):
                            if (k := _key(n, scope) if isinstance(n, ast.Name | ast.Attribute) else None) is not None:
                                joined.setdefault(k, []).append(site)
                if name == "wait_event" and node.args and (k := _key(node.args[0], scope)) is not None:
                    waited_events.setdefault(k, []).append(site)
                elif name == "record" and recv is not None and (ek := _key(recv, scope)) is not None:
                    sk = _key(node.args[0], scope) if node.args else _enclosing_stream(sub, module, node, scope)
                    if sk:
                        event_streams.setdefault(ek, set()).add(sk)
                elif name == "record_event" and recv is not None and (sk := _key(recv, scope)) is not None:
                    ek = _key(node.args[0], scope) if node.args else _assigned_key(module, node, scope)
                    if ek:
                        event_streams.setdefault(ek, set()).add(sk)
    for ev, sites in waited_events.items():
        for sk in event_streams.get(ev, set()):
            joined.setdefault(sk, []).extend(sites)
    for module, func, node, what, keys in escapes:
        if what == "side stream" and device_sync:
            continue
        if S.once_only(sub, func, node):
            continue  # launched on a one-time path (first call, warm-up): not what the timed calls run
        sites = [j for k in keys for j in joined.get(k, [])]
        # a join earlier in the same function (a deferred join of the previous call's work) does not
        # cover this call's launch; one skipped exactly when the same input object comes back leaves
        # the benchmark's repeated calls unjoined
        covering = [j for j in sites if not _before_in_same_call(j, func, node)]
        steady = [j for j in covering if not _skipped_on_repeat(sub, j)]
        if steady:
            continue
        if covering and _skipped_on_repeat(sub, _Site(module, func, node)):
            continue  # launched and joined on the same miss path (a warm-up before a capture): never timed
        if covering:
            out.append(
                S.py_finding(
                    RULE,
                    module,
                    node,
                    f"{func.name} launches work on a {what} and joins it only when the input object changed "
                    f"({', '.join('line ' + str(getattr(j.node, 'lineno', 0)) for j in covering)} is skipped when the same object comes "
                    "back): the benchmark calls forward on the same input objects, so its timed calls return before "
                    "the work finishes and the window closes on the launch alone.",
                    effect=Effect.DECISIVE_HACK,
                    severity=Severity.CRITICAL,
                    probe=Probe.STREAM_ESCAPE,
                    data={"topic": "checked_vs_timed", "mechanism": what, "join": "skipped_on_repeat"},
                )
            )
            continue
        out.append(
            S.py_finding(
                RULE,
                module,
                node,
                f"{func.name} launches work on a {what} and forward returns without joining it: the timed window "
                "may close before that work finishes.",
                data={"topic": "checked_vs_timed", "mechanism": what},
            )
        )
    for src in sub.loaded_native():
        creates = list(src.find(r"\bcudaStreamCreate\w*\s*\("))
        if not creates:
            continue
        if src.has(r"\bcuda(StreamSynchronize|StreamWaitEvent|DeviceSynchronize|EventSynchronize)\b"):
            continue
        if not src.has(r"<<<[^>]*,[^>]*,[^>]*,[^>]*>>>") and not re.search(r"cudaLaunch\w*\(", src.text):
            continue
        tl = creates[0][0]
        out.append(
            S.native_finding(
                RULE,
                src,
                tl,
                "The extension creates its own CUDA stream and launches on it with no synchronisation back to the "
                "caller's stream.",
                effect=Effect.NEEDS_PROBE,
                severity=Severity.HIGH,
                data={"topic": "checked_vs_timed", "mechanism": "native stream"},
            )
        )
    return S.dedupe(out)
