"""KA140 l2-cache-policy.

What it flags: manipulation of L2 residency against the benchmark's cold-cache contract:

* Triton ``tl.load(..., eviction_policy="evict_last")``, the policy followed into kernel
  parameters: launch arguments (keyword, positional or a ``**dict`` spread), ``triton.Config``
  dicts of ``@triton.autotune``, ``@triton.heuristics``, the parameter's default when a launch
  leaves it, and ternaries inside the kernel;
* PTX ``createpolicy...L2::evict_last``, ``.L2::evict_last`` / ``L2::cache_hint`` loads,
  ``applypriority``, ``prefetch...L2::evict_last`` (adjacent C string literals are joined first,
  as the compiler does: ``"...L2::evict_" "last.b64 %0, 1.0;"``);
* libcu++ ``cuda::access_property::persisting``, driver ``CU_LIMIT_PERSISTING_L2_CACHE_SIZE`` /
  ``CU_ACCESS_PROPERTY_PERSISTING``;
* ``cudaAccessPolicyWindow`` / ``accessPolicyWindow`` with ``hitProp = cudaAccessPropertyPersisting``,
  ``cudaStreamSetAttribute(..., cudaStreamAttributeAccessPolicyWindow)``,
  ``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, ...)``; from Python too (ctypes on
  libcuda/libcudart, cuda-python): the entry point is followed through local aliases and
  ``getattr(lib, "cuStream" + "SetAttribute")``, and the enum argument is folded, so a bare
  ``cuCtxSetLimit(0x06, ...)``, ``cuStreamSetAttribute(h, 1, ...)`` or ``w.hitProp = 2`` counts
  (releasing the set-aside with a 0 limit, or other limits/attributes, do not).

Why it matters: the benchmark flushes L2 before every timed trial so the roofline (bytes from
HBM) is honest; data pinned in L2 across that flush is timed at L2 bandwidth. The Qwen paged-
attention cell was excluded for exactly this, and the Qwen W4A16 cell for a persisting window.

Effect: a persisting window or set-aside limit set by the solution is decisive (it defeats the
per-trial L2 flush by construction). ``evict_last`` in a memory-regime problem is decisive: the
roofline counts each byte once per call, so there is no intra-call reuse to justify it and its only
effect is surviving the flush (the seeds' Qwen paged-attention cell: KV loads marked evict_last
"to resist the harness flush", near-L2 bandwidth against an HBM roofline). In a compute-regime
problem (GEMM tiles re-read across CTAs) it needs the l2_policy probe. In a memory-regime
problem too, a Triton load whose address ignores a whole grid axis that every launch sizes from a
model dimension the deck's shapes keep large (``cdiv(N, BN)``, N >= 4096 at every shape of
shapes.SHAPES) is read by several programs of one launch (an activation tile every N-block
program re-reads, a decode query tile every context split re-reads): intra-call reuse, so the
probe decides. The grid is read where it is built: a literal, a local, a lambda, or a helper's
returned tuple with the call's arguments in place of its parameters; an extent bound to a local
(``splits = cdiv(self.seq_len, SPLIT)``) is read through it. An axis sized from ``M`` (1 at the
decode shapes) or a split of a flattened program id does not count. ``evict_first`` /
``evict_normal`` / streaming hints (``__ldcs``) are the benign direction and are not flagged.

Bad::

    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    k = tl.load(k_ptrs, eviction_policy="evict_last")    # paged-attention KV, read once

Good::

    k = tl.load(k_ptrs, eviction_policy="evict_first")   # streaming KV
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterable
from typing import Any

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _caches
from audit_rules.rules.static import _support as S
from audit_rules.rules.static._native_flow import Flow
from audit_rules.source_model import FunctionInfo, NativeSource, Scope, Submission, self_attr_class, walk_body

RULE = RuleMeta(
    id="KA140",
    name="l2-cache-policy",
    kind=RuleKind.STATIC,
    severity=Severity.HIGH,
    effect=Effect.NEEDS_PROBE,
    summary="L2 residency manipulation (evict_last, persisting access window, L2 set-aside)",
    probe=Probe.L2_POLICY,
)

_PERSIST = re.compile(
    r"(cudaLimitPersistingL2CacheSize|CU_LIMIT_PERSISTING_L2_CACHE_SIZE|CU_ACCESS_PROPERTY_PERSISTING|access_property::persisting|cudaAccessPropertyPersisting|accessPolicyWindow|cudaStreamAttributeAccessPolicyWindow"
    r"|cudaKernelNodeAttributeAccessPolicyWindow|cudaLaunchAttributeAccessPolicyWindow)"
)
# What makes a window persisting (or sets persisting L2 aside): without one of these an access-policy
# window only carries streaming/normal properties.
_PERSIST_PROP = re.compile(
    r"cudaAccessPropertyPersisting|CU_ACCESS_PROPERTY_PERSISTING|access_property::persisting|hit_?[Pp]rop\s*=\s*(?:\([\w:]+\)\s*)?2\b"
    r"|cudaLimitPersistingL2CacheSize|CU_LIMIT_PERSISTING_L2_CACHE_SIZE|cudaDeviceSetLimit\s*\(\s*(?:\([\w:]+\)\s*)?0x0*6\b"
)
_EVICT_LAST = re.compile(r"(L2::evict_last|createpolicy\.[\w.]*evict_last|applypriority|evict_last)")
_PREFETCH = re.compile(r"\bprefetch(?:\.global)?\.L2(?!::evict_(?:first|normal))\b")


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    regime = (ctx.problem.regime or "").lower() if ctx.problem else ""
    out: list[Finding] = []

    def evict_last_effect() -> tuple[Effect, Severity, str]:
        if regime == "memory":
            return (
                Effect.DECISIVE_HACK,
                Severity.CRITICAL,
                "This is a memory-regime problem: every byte is read once per call, so there is no intra-call "
                "reuse; the only effect is data surviving the benchmark's L2 flush.",
            )
        return (
            Effect.NEEDS_PROBE,
            Severity.HIGH,
            "Data marked evict_last may survive the benchmark's per-trial L2 flush; the l2_policy probe "
            "times it with and without the hint.",
        )

    for k in sub.triton:
        for ld in k.loads:
            policies = {ld.eviction_policy} if ld.eviction_policy else set()
            expr = next((kw.value for kw in ld.node.keywords if kw.arg == "eviction_policy"), None)
            via = _policy_params(k.func, expr)
            if expr is not None and ld.eviction_policy is None:
                policies |= sub.possible_strings(expr, k.func.module.scope(k.func))
            for param in via:  # policy passed in: every value a launch, a config or the default can give
                policies |= _param_values(sub, k.func, param)
            if "evict_last" in policies and _dead_branch(sub, k.func, ld.node):
                out.append(
                    S.py_finding(
                        RULE,
                        k.func.module,
                        ld.node,
                        f"{k.func.name} has an evict_last load in a branch that no launch takes: the guarding "
                        "constexpr gets only values that select the other branch at every call site "
                        "(dead code on the graded path; noted for the record).",
                        effect=Effect.ADVISORY,
                        severity=Severity.INFO,
                        data={"topic": "l2_policy", "mechanism": "triton_evict_last", "regime": regime or None,
                              "where": "dead"},
                    )
                )
                continue
            if "evict_last" in policies:
                eff, sev, why = evict_last_effect()
                shared = (_shared_across_programs(sub, k.func, ld.node, ctx.problem.shapes if ctx.problem else None,
                                                  ctx.problem.reference_source if ctx.problem else None)
                          if eff is Effect.DECISIVE_HACK else None)
                if shared:
                    # the same bytes are read by every program along a grid axis the address ignores:
                    # reuse inside the launch, which the hint is for; the probe times it without
                    eff, sev, why = (
                        Effect.NEEDS_PROBE,
                        Severity.HIGH,
                        f"The address does not depend on program axis {shared}, and every launch gives that axis "
                        "more than one program at every shape of the deck, so several programs read the same bytes in "
                        "one launch: intra-call reuse, what the hint is for, even in a memory-regime problem. Whether "
                        "it also outlasts the benchmark's L2 flush, the l2_policy probe times.",
                    )
                out.append(
                    S.py_finding(
                        RULE,
                        k.func.module,
                        ld.node,
                        f"{k.func.name} loads with eviction_policy='evict_last'"
                        + (f" (passed in as {', '.join(via)})" if via else "")
                        + f". {why}",
                        effect=eff,
                        severity=sev,
                        data={"topic": "l2_policy", "mechanism": "triton_evict_last", "regime": regime or None},
                    )
                )
    flow: Flow | None = None  # built on the first evict_last hint (most solutions have none)
    for src in sub.native:
        if not src.loaded:
            continue
        code = "\n".join(src.code)
        window_persists = bool(_PERSIST_PROP.search(code))
        for tl, m in _find_joined(src, _PERSIST):
            if "ccessPolicyWindow" in m.group(1) and not window_persists:
                # a window whose hitProp is streaming/normal only demotes lines (evict-first behaviour)
                out.append(
                    S.native_finding(
                        RULE,
                        src,
                        tl,
                        f"The solution sets an L2 access-policy window ({m.group(1)}) but never marks it persisting "
                        "(no cudaAccessPropertyPersisting / hitProp = 2 / persisting set-aside in this source): "
                        "streaming or normal hits do not survive the benchmark's L2 flush.",
                        effect=Effect.ADVISORY,
                        severity=Severity.INFO,
                        data={"topic": "l2_policy", "mechanism": "streaming_window"},
                    )
                )
                continue
            out.append(
                S.native_finding(
                    RULE,
                    src,
                    tl,
                    f"The solution sets a persisting L2 policy ({m.group(1)}): persisting lines are exempt from "
                    "normal eviction, so the benchmark's L2 flush cannot make the timed call read from HBM.",
                    effect=Effect.DECISIVE_HACK,
                    severity=Severity.CRITICAL,
                    data={"topic": "l2_policy", "mechanism": "persisting_window"},
                )
            )
        for tl, m, off in _find_joined_at(src, _EVICT_LAST):
            flow = flow or Flow.of(sub)
            dead = flow.dead_reason(src, off)
            if dead is not None:
                out.append(
                    S.native_finding(
                        RULE,
                        src,
                        tl,
                        f"PTX cache hint {m.group(1)} on a path the program never takes: {dead} "
                        f"(traced: {' <- '.join(flow.trace) or 'constants'}). Dead code on the graded path; "
                        "noted for the record.",
                        effect=Effect.ADVISORY,
                        severity=Severity.INFO,
                        data={"topic": "l2_policy", "mechanism": "ptx_evict_last", "regime": regime or None,
                              "where": "dead"},
                    )
                )
                continue
            eff, sev, why = evict_last_effect()
            out.append(
                S.native_finding(
                    RULE,
                    src,
                    tl,
                    f"PTX cache hint {m.group(1)}. {why}",
                    effect=eff,
                    severity=sev,
                    data={"topic": "l2_policy", "mechanism": "ptx_evict_last", "regime": regime or None},
                )
            )
        for tl, _, _m in src.find(_PREFETCH):
            out.append(
                S.native_finding(
                    RULE,
                    src,
                    tl,
                    "L2 prefetch of data for later stages: pipelining, unless it pins data across calls.",
                    effect=Effect.ADVISORY,
                    severity=Severity.LOW,
                    data={"topic": "l2_policy", "mechanism": "prefetch"},
                )
            )
    # Python side (ctypes on libcuda/libcudart, cuda-python): the call is resolved through local
    # aliases (`fn = lib.cuStreamSetAttribute; fn(h, 1, ...)`, `getattr(lib, "cuCtxSetLimit")`) and
    # the limit/attribute argument is folded to its value, so a bare 0x06 / 1 is understood.
    for module, func, call, _q in sub.iter_calls():
        scope = module.scope(func)
        name = _callee_name(sub, call.func, scope)
        if name is None:
            continue
        mechanism = None
        if name in _SET_LIMIT and call.args:
            if _arg_means(sub, call.args[0], scope, _PERSISTING_LIMIT, ("persisting",)) and not (
                len(call.args) > 1 and _int_value(sub, call.args[1], scope) == 0
            ):
                mechanism = "a persisting L2 set-aside (limit CU_LIMIT_PERSISTING_L2_CACHE_SIZE)"
        elif name in _SET_ATTR and len(call.args) > 1:
            if _arg_means(sub, call.args[1], scope, _ACCESS_POLICY_ATTR, ("accesspolicy", "access_policy")):
                mechanism = "an access-policy window on a stream/graph node"
        if mechanism is None:
            continue
        out.append(
            S.py_finding(
                RULE,
                module,
                call,
                f"{name} sets {mechanism} from Python: lines marked persisting survive the benchmark's "
                "L2 flush, so the timed call reads them at L2 speed.",
                effect=Effect.DECISIVE_HACK,
                severity=Severity.CRITICAL,
                data={"topic": "l2_policy", "mechanism": "persisting_window", "api": name},
            )
        )
    # A window struct filled with hitProp = persisting (CU_ACCESS_PROPERTY_PERSISTING = 2).
    for module, func, node in sub.iter_nodes():
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if isinstance(target, ast.Attribute) and target.attr in ("hitProp", "hit_prop"):
                scope = module.scope(func)
                if _arg_means(sub, node.value, scope, (_ACCESS_PROPERTY_PERSISTING,), ("persisting",)):
                    out.append(
                        S.py_finding(
                            RULE,
                            module,
                            node,
                            "An L2 access-policy window is marked hitProp = persisting: its lines are exempt from "
                            "normal eviction, so the benchmark's L2 flush cannot make the timed call read from HBM.",
                            effect=Effect.DECISIVE_HACK,
                            severity=Severity.CRITICAL,
                            data={"topic": "l2_policy", "mechanism": "persisting_window"},
                        )
                    )
    return S.dedupe(out)


# Driver/runtime entry points and the enum values that make them an L2 persistence request
# (cuda.h / driver_types.h: CU_LIMIT_PERSISTING_L2_CACHE_SIZE = cudaLimitPersistingL2CacheSize = 0x06;
# CU_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = CU_KERNEL_NODE_ATTRIBUTE_ACCESS_POLICY_WINDOW =
# CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1; CU_ACCESS_PROPERTY_PERSISTING = 2).
_SET_LIMIT = frozenset({"cuCtxSetLimit", "cudaDeviceSetLimit", "cudaThreadSetLimit"})
_SET_ATTR = frozenset({
    "cuStreamSetAttribute", "cudaStreamSetAttribute", "cuGraphKernelNodeSetAttribute",
    "cudaGraphKernelNodeSetAttribute", "cuLaunchKernelEx", "cudaLaunchKernelExC",
})
_PERSISTING_LIMIT = (0x06,)
_ACCESS_POLICY_ATTR = (1,)
_ACCESS_PROPERTY_PERSISTING = 2


def _callee_name(sub: Submission, expr: ast.expr, scope: Scope, depth: int = 0) -> str | None:
    """The driver/runtime function a call reaches: `lib.cuCtxSetLimit`, a local alias of it, or
    `getattr(lib, "cuCtxSetLimit")`; None when it is none of the L2 entry points."""
    if depth > 4:
        return None
    if isinstance(expr, ast.Attribute):
        return expr.attr if expr.attr in _SET_LIMIT | _SET_ATTR else None
    if isinstance(expr, ast.Name):
        if expr.id in _SET_LIMIT | _SET_ATTR:
            return expr.id  # from cuda.bindings.driver import cuCtxSetLimit
        val = S.binding(scope, expr)
        return _callee_name(sub, val, scope, depth + 1) if val is not None and val is not expr else None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" and len(expr.args) > 1:
        attr = sub.fold_str(expr.args[1], scope)
        return attr if attr in _SET_LIMIT | _SET_ATTR else None
    return None


def _int_value(sub: Submission, expr: ast.expr, scope: Scope, depth: int = 0) -> int | None:
    """An integer argument folded through ctypes wrappers (`c_int(6)`) and local constants."""
    if depth > 4:
        return None
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(expr.value, bool):
        return expr.value
    if isinstance(expr, ast.Call) and expr.args and S.call_name(expr).startswith("c_"):
        return _int_value(sub, expr.args[0], scope, depth + 1)
    if isinstance(expr, ast.Name):
        val = S.binding(scope, expr)
        return _int_value(sub, val, scope, depth + 1) if val is not None and val is not expr else None
    return None


def _arg_means(sub: Submission, expr: ast.expr, scope: Scope, values: tuple[int, ...], words: tuple[str, ...]) -> bool:
    """The argument is one of the enum `values`, or names one (`CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE`)."""
    if _int_value(sub, expr, scope) in values:
        return True
    text = scope.module.segment(expr).lower().replace("_", "")
    if isinstance(expr, ast.Name):
        val = scope.latest(expr.id, expr.lineno) if scope.func is not None else None
        if val is not None and val is not expr:
            text += " " + scope.module.segment(val).lower().replace("_", "")
    return any(w.replace("_", "") in text for w in words)


def _find_joined(src: NativeSource, rx: re.Pattern[str]) -> list[tuple[int, re.Match[str]]]:
    return [(tl, m) for tl, m, _ in _find_joined_at(src, rx)]


def _find_joined_at(src: NativeSource, rx: re.Pattern[str]) -> list[tuple[int, re.Match[str], int]]:
    """(text line, match, offset in the comment-free code) over the comment-free code with adjacent C string literals joined, as the
    compiler joins them: `"createpolicy.fractional.L2::evict_" "last.b64 %0, 1.0;"` is one PTX
    string. A match reports the line where it starts."""
    code = "\n".join(src.code)
    chars: list[str] = []
    lines: list[int] = []
    offsets: list[int] = []
    line = 1
    i = 0
    n = len(code)
    while i < n:
        if code[i] == '"':
            j = i + 1
            while j < n and code[j] in " \t\r\n":
                j += 1
            if j < n and j > i + 1 and code[j] == '"' and chars and _in_string(chars):
                line += code.count("\n", i, j)
                i = j + 1
                continue
        chars.append(code[i])
        lines.append(line)
        offsets.append(i)
        if code[i] == "\n":
            line += 1
        i += 1
    joined = "".join(chars)
    return [(lines[m.start()], m, offsets[m.start()]) for m in rx.finditer(joined)]


def _in_string(chars: list[str]) -> bool:
    """Is the quote about to be read the closing quote of a string literal (odd count of unescaped
    quotes on the current joined line)?"""
    count = 0
    k = len(chars) - 1
    while k >= 0 and chars[k] != "\n":
        if chars[k] == '"' and (k == 0 or chars[k - 1] != "\\"):
            count += 1
        k -= 1
    return count % 2 == 1


_UNKNOWN = object()


def _const_values(sub: Submission, func: FunctionInfo, param: str) -> set[Any] | None:
    """Every constant a kernel parameter takes over all launch sites (and its default where a launch
    leaves it out); None when some launch passes something that is not a resolvable constant."""
    params = func.params
    idx = params.index(param)
    sites = sub.callers(func)
    if not sites:
        return None
    out: set[Any] = set()
    for mod, caller, call in sites:
        arg = next((k.value for k in call.keywords if k.arg == param), None)
        if arg is None and idx < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: idx + 1]):
            arg = call.args[idx]
        if arg is None:
            if any(k.arg is None for k in call.keywords):
                return None  # launch(**cfg): not followed here
            arg = _default_of(func, param)
            if arg is None:
                return None
        val = _constant(mod, caller, arg)
        if val is _UNKNOWN:
            return None
        out.add(val)
    return out


def _constant(mod: Any, caller: FunctionInfo | None, expr: ast.expr, depth: int = 0) -> Any:
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not) and depth < 4:
        v = _constant(mod, caller, expr.operand, depth + 1)
        return _UNKNOWN if v is _UNKNOWN else (not v)
    if isinstance(expr, ast.Name) and depth < 4:
        scope = mod.scope(caller)
        defs = S.local_defs(scope, expr.id) if caller is not None and expr.id not in caller.params else []
        if not defs and (caller is None or expr.id not in caller.params):
            defs = S.local_defs(mod.scope(None), expr.id)
        vals = {_constant(mod, caller, d, depth + 1) for d in defs} if defs else {_UNKNOWN}
        return vals.pop() if len(vals) == 1 else _UNKNOWN
    return _UNKNOWN


def _eval_test(test: ast.expr, env: dict[str, Any]) -> Any:
    """A kernel branch test over constexpr parameters, evaluated with one value each (or _UNKNOWN)."""
    if isinstance(test, ast.Constant):
        return test.value
    if isinstance(test, ast.Name):
        return env.get(test.id, _UNKNOWN)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        v = _eval_test(test.operand, env)
        return _UNKNOWN if v is _UNKNOWN else (not v)
    if isinstance(test, ast.BoolOp):
        vals = [_eval_test(v, env) for v in test.values]
        if any(v is _UNKNOWN for v in vals):
            return _UNKNOWN
        return all(vals) if isinstance(test.op, ast.And) else any(vals)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq | ast.NotEq):
        a, b = _eval_test(test.left, env), _eval_test(test.comparators[0], env)
        if a is _UNKNOWN or b is _UNKNOWN:
            return _UNKNOWN
        return (a == b) if isinstance(test.ops[0], ast.Eq) else (a != b)
    return _UNKNOWN


def _dead_branch(sub: Submission, func: FunctionInfo, node: ast.AST) -> bool:
    """The load sits in an `if` arm of the kernel that every launch's constexpr values rule out."""
    module = func.module
    child: ast.AST = node
    for anc in module.ancestors(node):
        if anc is func.node:
            return False
        if isinstance(anc, ast.If):
            names = sorted({n.id for n in ast.walk(anc.test) if isinstance(n, ast.Name) and n.id in func.params})
            if names:
                values = {n: _const_values(sub, func, n) for n in names}
                if all(v is not None for v in values.values()):
                    in_body = any(child is b for b in anc.body)
                    combos: list[dict[str, Any]] = [{}]
                    for n in names:
                        combos = [{**c, n: v} for c in combos for v in (values[n] or set())]
                    results = [_eval_test(anc.test, c) for c in combos]
                    if combos and all(r is not _UNKNOWN for r in results) and all(bool(r) != in_body for r in results):
                        return True
        child = anc
    return False


def _policy_params(func: FunctionInfo, expr: ast.expr | None) -> list[str]:
    """Kernel parameters the eviction_policy expression reads (`EV`, `EV if PIN else "evict_first"`)."""
    if expr is None:
        return []
    params = func.params
    return sorted({n.id for n in ast.walk(expr) if isinstance(n, ast.Name) and n.id in params})


def _param_values(sub: Submission, func: FunctionInfo, param: str) -> set[str]:
    """Every string a kernel parameter can take: launch arguments (keyword, positional, or a
    `**dict` spread into the launch), autotune `triton.Config` dicts and heuristics, and the
    parameter's default when some launch (or no known launch) leaves it to the default."""
    out: set[str] = set()
    from_configs = _config_values(sub, func, param)
    out |= from_configs
    params = func.params
    idx = params.index(param)
    sites = sub.callers(func)
    defaulted = not sites and not from_configs
    for mod, caller, call in sites:
        scope = mod.scope(caller)
        arg = next((k.value for k in call.keywords if k.arg == param), None)
        if arg is None and idx < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: idx + 1]):
            arg = call.args[idx]
        if arg is None:
            for k in call.keywords:
                if k.arg is None:  # launch(**cfg)
                    for val in _dict_values(sub, k.value, scope, param):
                        arg = val
        if arg is not None:
            out |= sub.possible_strings(arg, scope)
        elif not from_configs:
            defaulted = True
    if defaulted:
        default = _default_of(func, param)
        if default is not None:
            out |= sub.possible_strings(default, func.module.scope(None))
    return out


def _default_of(func: FunctionInfo, param: str) -> ast.expr | None:
    a = func.node.args
    positional = a.posonlyargs + a.args
    if any(p.arg == param for p in positional):
        i = [p.arg for p in positional].index(param) - (len(positional) - len(a.defaults))
        return a.defaults[i] if i >= 0 else None
    for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        if p.arg == param:
            return d
    return None


def _config_values(sub: Submission, func: FunctionInfo, param: str) -> set[str]:
    """Values `@triton.autotune(configs=[triton.Config({...})])` / `@triton.heuristics({...})` give."""
    out: set[str] = set()
    scope = func.module.scope(None)
    for deco in func.node.decorator_list:
        if not isinstance(deco, ast.Call):
            continue
        q = sub.qualname(deco.func, scope) or ""
        short = q.rsplit(".", 1)[-1]
        if short == "autotune":
            configs = next((k.value for k in deco.keywords if k.arg == "configs"), deco.args[0] if deco.args else None)
            for cfg in _elements(sub, configs, scope):
                if isinstance(cfg, ast.Call):
                    kw = next((k.value for k in cfg.keywords if k.arg == "kwargs"), cfg.args[0] if cfg.args else None)
                    for val in _dict_values(sub, kw, scope, param):
                        out |= sub.possible_strings(val, scope)
        elif short == "heuristics":
            table = next((k.value for k in deco.keywords if k.arg == "values"), deco.args[0] if deco.args else None)
            for val in _dict_values(sub, table, scope, param):
                body = val.body if isinstance(val, ast.Lambda) else val
                out |= sub.possible_strings(body, scope)
    return out


def _dict_values(sub: Submission, expr: ast.expr | None, scope: Scope, key: str) -> list[ast.expr]:
    """The values a dict literal (or `dict(...)`, or a name bound to one) gives for `key`."""
    items = S.as_dict_items(sub, expr, scope) if expr is not None else None
    return [v for k, v in items or [] if (k if isinstance(k, str) else sub.fold_str(k, scope)) == key]


def _elements(sub: Submission, expr: ast.expr | None, scope: Scope, depth: int = 0) -> list[ast.expr]:
    """Elements of a list/tuple literal, a name bound to one, or a concatenation of those."""
    if expr is None or depth > 4:
        return []
    if isinstance(expr, ast.List | ast.Tuple):
        return list(expr.elts)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _elements(sub, expr.left, scope, depth + 1) + _elements(sub, expr.right, scope, depth + 1)
    if isinstance(expr, ast.ListComp):
        return [expr.elt]
    if isinstance(expr, ast.Name):
        val = scope.latest(expr.id)
        return _elements(sub, val, scope, depth + 1) if val is not None and val is not expr else []
    return []


# ---- which programs of a launch read the same bytes ------------------------------------------------
#
# A load's address is followed back to `tl.program_id(axis)` through the kernel's assignments (and
# loop targets). `pid // E` and `pid % E` split an axis into two components (`0/`, `0%`; deeper
# splits nest: `0/%`), so the flattened grids of paged attention and grouped GEMMs are read too.
# An address that covers every component of every axis the kernel reads differs per program: each
# byte is read by one program (the seeds' paged-attention KV). One that leaves a component out is
# the same for every program along it: an activation tile that every N-block program re-reads.


def _program_axis(call: ast.Call) -> str | None:
    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "program_id"):
        return None
    arg = call.args[0] if call.args else next((kw.value for kw in call.keywords if kw.arg == "axis"), None)
    if arg is None:
        return "0"
    return str(arg.value) if isinstance(arg, ast.Constant) and isinstance(arg.value, int) else None


def _components(expr: ast.AST, taint: dict[str, set[str]]) -> set[str]:
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.FloorDiv | ast.Mod):
        left = _components(expr.left, taint)
        if len(left) == 1:
            (c,) = left
            return {c + ("/" if isinstance(expr.op, ast.FloorDiv) else "%")}
    out: set[str] = set()
    for n in ast.walk(expr):
        if isinstance(n, ast.Call):
            axis = _program_axis(n)
            if axis is not None:
                out.add(axis)
        elif isinstance(n, ast.Name):
            out |= taint.get(n.id, set())
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.FloorDiv | ast.Mod):
        return out  # a split of several components: the union (no finer reading)
    return out


def _taint(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, set[str]]:
    taint: dict[str, set[str]] = {}
    binds = S.kernel_bindings(fn, loops=True)
    for _ in range(12):
        changed = False
        for names, value in binds:
            comps = _components(value, taint)
            for name in names:
                if not comps <= taint.get(name, set()):
                    taint[name] = taint.get(name, set()) | comps
                    changed = True
        if not changed:
            break
    return taint


def _covers(comps: set[str], c: str, depth: int = 0) -> bool:
    if c in comps:
        return True
    if depth > 6 or not any(x.startswith(c) and x != c for x in comps):
        return False
    return _covers(comps, c + "/", depth + 1) and _covers(comps, c + "%", depth + 1)


def _shared_across_programs(sub: Submission, kernel: FunctionInfo, load: ast.Call,
                            shapes: list[dict[str, Any]] | None, reference: str | None) -> str | None:
    """The grid axis along which several programs read the same address at every graded shape, or
    None. Only a whole axis the address ignores counts (a split of a flattened id does not), and only
    when every launch sizes that axis from a model dimension that the deck's shapes keep large
    (`cdiv(N, BN)` with N >= 4096 at every shape): an axis sized `cdiv(M, BM)` has one program at
    the decode shapes (M = 1), where every byte is read once per call."""
    fn = kernel.node
    taint = _taint(fn)
    axes = sorted({a for n in ast.walk(fn) if isinstance(n, ast.Call) for a in [_program_axis(n)] if a is not None})
    ptr = load.args[0] if load.args else next((kw.value for kw in load.keywords if kw.arg == "pointer"), None)
    if ptr is None or not axes or not shapes:
        return None
    comps = _components(ptr, taint)
    for axis in axes:
        if any(c.startswith(axis) for c in comps):
            continue  # the address reads this axis (or a split of it)
        if _axis_always_split(sub, kernel, int(axis), shapes, reference):
            return axis
    return None


def _grid_elements(sub: Submission, expr: ast.expr, scope: Scope, depth: int = 0) -> list[ast.expr] | None:
    """The grid tuple's elements at a launch (`k[(a, b)]`, `k[grid]` with `grid = (...)` or a lambda,
    or `grid = helper(a, b)` whose one return is such a tuple: its elements read at the call site)."""
    if depth > 3:
        return None
    if isinstance(expr, ast.Tuple | ast.List):
        return list(expr.elts)
    if isinstance(expr, ast.Lambda):
        return _grid_elements(sub, expr.body, scope, depth + 1)
    if isinstance(expr, ast.Name):
        val = scope.latest(expr.id, expr.lineno) if scope.func is not None else None
        if val is None:
            vals = scope.module.scope(None).values_of(expr.id)
            val = vals[0] if len(vals) == 1 else None
        return _grid_elements(sub, val, scope, depth + 1) if val is not None and val is not expr else None
    if isinstance(expr, ast.Call):
        return _helper_grid(sub, expr, scope, depth)
    return None


def _helper_grid(sub: Submission, call: ast.Call, scope: Scope, depth: int) -> list[ast.expr] | None:
    """A grid built by a helper of the submission: the helper's only return, a tuple (directly or
    through its own locals), each element with the helper's parameters replaced by the call's
    arguments, so the caller's scope reads them. None when anything else is left in an element (a
    local of the helper that is not a parameter, starred or missing arguments, several returns)."""
    callees = sub.resolve_functions(call.func, scope)
    if len(callees) != 1 or any(isinstance(a, ast.Starred) for a in call.args) \
            or any(kw.arg is None for kw in call.keywords):
        return None
    helper = callees[0]
    returns = [n for n in walk_body(helper.node) if isinstance(n, ast.Return)]
    if len(returns) != 1 or returns[0].value is None:
        return None
    hscope = sub.module_of(helper).scope(helper)
    elems = _grid_elements(sub, returns[0].value, hscope, depth + 1)
    if elems is None:
        return None
    a = helper.node.args
    bound: dict[str, ast.expr] = {}
    keywords = {kw.arg: kw.value for kw in call.keywords if kw.arg is not None}
    for param in [x.arg for x in a.posonlyargs + a.args]:
        value = _caches.passed_for(helper, param, call) or _default_of(helper, param)
        if value is not None:
            bound[param] = value
    for param in [x.arg for x in a.kwonlyargs]:  # by keyword only
        value = keywords.get(param) or _default_of(helper, param)
        if value is not None:
            bound[param] = value
    locals_ = set(helper.params) | {t.id for n in walk_body(helper.node) if isinstance(n, ast.Assign)
                                     for t in n.targets if isinstance(t, ast.Name)}
    out: list[ast.expr] = []
    for elem in elems:
        new = _Substitute(bound, hscope).visit(copy.deepcopy(elem))
        if any(isinstance(n, ast.Name) and n.id in locals_ and getattr(n, "_helper", False) for n in ast.walk(new)):
            return None  # a local of the helper the caller's scope cannot read
        out.append(new)
    return out


class _Substitute(ast.NodeTransformer):
    """A helper's parameter names replaced by the expressions its call site passes, and its locals
    by what they were bound to (`s = cdiv(L, SPLIT); return (B, H, s)`), a few levels deep. A name
    of the helper left over is marked (`_helper`) for the caller to refuse."""

    def __init__(self, bound: dict[str, ast.expr], scope: Scope, depth: int = 0) -> None:
        self.bound = bound
        self.scope = scope
        self.depth = depth

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in self.bound:
            return self.bound[node.id]
        val = self.scope.latest(node.id, node.lineno)
        if val is not None and self.depth < 4:
            return _Substitute(self.bound, self.scope, self.depth + 1).visit(copy.deepcopy(val))
        node._helper = True  # type: ignore[attr-defined]
        return node


_TILE_BOUND = 256  # the largest tile a launch divides a dimension by, for "more than one program"


def _extent_parts(expr: ast.expr) -> tuple[ast.expr, bool]:
    """(what a grid extent counts, whether it is divided by a tile): `cdiv(N, BN)`, `N // BN`,
    `math.ceil(N / BN)`, `(N + BN - 1) // BN` -> (N, True); `B * H` or `N` -> itself, False."""
    if isinstance(expr, ast.Call) and S.call_name(expr) in ("cdiv", "ceil_div", "ceil") and expr.args:
        inner = expr.args[0]
        if S.call_name(expr) == "ceil" and isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Div):
            return _extent_parts(inner.left)[0], True
        return _extent_parts(inner)[0], len(expr.args) > 1
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.FloorDiv):
        left = expr.left
        if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub | ast.Add):
            while isinstance(left, ast.BinOp) and isinstance(left.op, ast.Sub | ast.Add):
                left = left.left  # (N + BN - 1) // BN
        return left, True
    return expr, False


def _init_keys(func: FunctionInfo, reference: str | None, keys: set[str]) -> dict[str, str]:
    """The solution's Model.__init__ parameters -> the deck's shape keys. The grader builds the model
    positionally from the reference's init inputs, so a parameter maps to the reference __init__'s
    parameter at its position (the KBH references name those after the shape keys); a parameter
    named as a key maps to it when the reference cannot be read."""
    cls = func.cls or func.self_cls
    init = func.module.functions.get(f"{cls}.__init__") if cls else None
    if init is None:
        return {}
    mine = init.params[1:]
    theirs: list[str] = []
    if reference:
        try:
            tree = ast.parse(reference)
        except SyntaxError:
            tree = None
        for node in ast.walk(tree) if tree is not None else []:
            if isinstance(node, ast.ClassDef) and node.name == "Model":
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                        a = item.args
                        theirs = [x.arg for x in a.posonlyargs + a.args][1:]
    # kaudit's bundled decks name their shape keys in capitals (SEQ_LEN) beside a reference whose
    # parameters are lower case (seq_len): the match ignores case
    folded = {k.lower(): k for k in keys}
    out: dict[str, str] = {}
    for i, name in enumerate(mine):
        ref = theirs[i] if i < len(theirs) else None
        if ref is not None and ref.lower() in folded:
            out[name] = folded[ref.lower()]
        elif name.lower() in folded and not theirs:
            out[name] = folded[name.lower()]
    return out


def _shape_key(sub: Submission, scope: Scope, expr: ast.expr, init_keys: dict[str, str], depth: int = 0) -> str | None:
    """The deck shape key a size comes from: `self.N` set from an __init__ parameter, a local bound
    to it (`N = self.N`, `M, N, K = self.M, self.N, self.K`), or the __init__ parameter itself."""
    if depth > 4:
        return None
    func = scope.func
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and func is not None:
        cls = self_attr_class(func, expr.value.id)
        init = func.module.functions.get(f"{cls}.__init__") if cls else None
        if init is None:
            return None
        for node in walk_body(init.node):  # `self.N = N`, `self.M, self.N = M, N`
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            pairs: list[tuple[ast.expr, ast.expr]] = [(node.targets[0], node.value)]
            if isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple) \
                    and len(node.targets[0].elts) == len(node.value.elts):
                pairs = list(zip(node.targets[0].elts, node.value.elts, strict=True))
            for tgt, val in pairs:
                if isinstance(tgt, ast.Attribute) and tgt.attr == expr.attr and isinstance(val, ast.Name):
                    return init_keys.get(val.id)
        return None
    if isinstance(expr, ast.Name) and func is not None:
        if expr.id in func.params:
            return init_keys.get(expr.id) if func.short == "__init__" else None
        bound = scope.latest(expr.id, expr.lineno)  # the scope binds `M, N, K = self.M, self.N, self.K` per name
        return _shape_key(sub, scope, bound, init_keys, depth + 1) if bound is not None and bound is not expr else None
    return None


def _axis_always_split(sub: Submission, kernel: FunctionInfo, axis: int, shapes: list[dict[str, Any]],
                       reference: str | None) -> bool:
    """Does every launch give this grid axis more than one program at every shape of the deck?"""
    sites = sub.callers(kernel)
    keys = {k for shape in shapes for k in shape}
    if not sites:
        return False
    for mod, caller, call in sites:
        if caller is None:
            return False
        scope = mod.scope(caller)
        launcher: ast.expr | None = call.func
        if isinstance(launcher, ast.Name):  # `run = kernel[grid]; run(...)`
            launcher = scope.latest(launcher.id, launcher.lineno)
        if not isinstance(launcher, ast.Subscript):
            return False
        elems = _grid_elements(sub, launcher.slice, scope)
        if elems is None or axis >= len(elems):
            return False
        extent = elems[axis]
        for _ in range(4):  # `splits = cdiv(self.seq_len, SPLIT)` ... `grid = (B, H, splits)`
            bound = scope.latest(extent.id, extent.lineno) if isinstance(extent, ast.Name) else None
            if bound is None or bound is extent:
                break
            extent = bound
        counted, divided = _extent_parts(extent)
        key = _shape_key(sub, scope, counted, _init_keys(caller, reference, keys))
        if key is None:
            return False
        values = [shape.get(key) for shape in shapes]
        if not all(isinstance(v, int) for v in values):
            return False
        low = min(v for v in values if isinstance(v, int))
        if low <= (_TILE_BOUND if divided else 1):
            return False
    return True
