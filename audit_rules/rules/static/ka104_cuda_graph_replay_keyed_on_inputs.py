"""KA104 cuda-graph-replay-keyed-on-inputs.

What it flags: CUDA graph capture + replay (``torch.cuda.CUDAGraph``/``torch.cuda.graph``,
``capture_begin``, ``make_graphed_callables``; C++ ``cudaStreamBeginCapture``/``cudaGraphLaunch``)
and classifies what a replay reads (``data["replay_reads"]``):

* ``live``: the captured kernels were launched on the caller's own tensors (or a device pointer
  table patched every call): replay recomputes on whatever those buffers hold now. A launch
  cache (seeds: KDA/top-k/paged-attention graph caches, "launch caching, not result caching"):
  ADVISORY, naming the same-storage probe, so a regrade confirms it (and a FAILED probe makes it
  decisive); never pending on static evidence.
* ``staging_refreshed_each_call``: inputs are copied into static buffers before every replay, or
  the copy is itself captured into the graph: advisory likewise.
* ``staging_refreshed_at_capture`` / ``staging_refreshed_on_key_change``: a buffer the graph
  reads holds a copy of an input made only when the graph is captured, or only when a cache key
  moves: later replays compute on old data. Needs the probe.

Staging buffers are only the buffers an input's data is copied into (``buf.copy_(x)``,
``buf[:] = x``, ``self.buf = x.clone()``, a local clone): model weights, sizes and output buffers
a kernel writes are read in place by the replay. C++ graphs (``cudaStreamBeginCapture`` ...
``cudaGraphLaunch``) are judged the same way: a capture function launching on the tensors or raw
pointers the Python caller passes is live; a copy made in it before the capture begins, or a
snapshot handed over from Python, is stale.

Why it matters: graph replay is the most common "looks cached" pattern in kernel runs; the
auditors cleared it only after proving replay reads live memory. Replay of a staging copy made
only at capture returns the old answer for every later input with the same key.

Bad::

    if self._g is None:
        self._sx.copy_(x)                       # staging filled at capture only
        with torch.cuda.graph(self._g):
            self._out = _launch(self._sx)
    self._g.replay()

Good (copy in every call, then replay)::

    self._sx.copy_(x)
    self._g.replay()
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _caches
from audit_rules.rules.static import _support as S
from audit_rules.source_model import FunctionInfo, PyModule, Scope, Submission, walk_body

RULE = RuleMeta(
    id="KA104",
    name="cuda-graph-replay-keyed-on-inputs",
    kind=RuleKind.STATIC,
    severity=Severity.HIGH,
    effect=Effect.NEEDS_PROBE,
    summary="CUDA graph replay keyed on inputs; classifies whether replay reads live or staged data",
    probe=Probe.SAME_STORAGE_OVERWRITE,
)


def _capture_regions(sub: Submission, module: PyModule) -> list[tuple[FunctionInfo | None, ast.AST, list[ast.AST]]]:
    """(function, capture node, nodes captured) for every capture site of a module."""
    regions: list[tuple[FunctionInfo | None, ast.AST, list[ast.AST]]] = []
    funcs: list[FunctionInfo | None] = [None, *module.functions.values()]
    for func in funcs:
        scope = module.scope(func)
        body_nodes = walk_body(func.node) if func is not None else iter(())
        for node in body_nodes:
            if isinstance(node, ast.With):
                for item in node.items:
                    ce = item.context_expr
                    if isinstance(ce, ast.Call) and (sub.qualname(ce.func, scope) or "").endswith("cuda.graph"):
                        inner: list[ast.AST] = []
                        for stmt in node.body:
                            inner.extend(ast.walk(stmt))
                        regions.append((func, node, inner))
            elif isinstance(node, ast.Call) and S.call_name(node) == "capture_begin" and func is not None:
                # statements between capture_begin and capture_end in the same block
                parent = module.parents.get(module.parents.get(node) or node)
                block = getattr(parent, "body", [])
                inner = []
                started = False
                for stmt in block:
                    if any(n is node for n in ast.walk(stmt)):
                        started = True
                        continue
                    if started:
                        if any(isinstance(n, ast.Call) and S.call_name(n) == "capture_end" for n in ast.walk(stmt)):
                            break
                        inner.extend(ast.walk(stmt))
                regions.append((func, node, inner))
            elif isinstance(node, ast.Call) and S.call_name(node) == "make_graphed_callables":
                regions.append((func, node, []))
    return regions


def _staging_buffers(
    sub: Submission, module: PyModule, func: FunctionInfo | None, nodes: list[ast.AST]
) -> tuple[set[str], bool]:
    """Buffers a captured call reads that hold a copy of an input's data (persistent buffers some
    code copies an activation into, or a local/closure snapshot of one); and whether captured
    calls read the caller's live tensors. Model weights, sizes and output buffers only ever
    written by kernels are neither: replay reads them in place."""
    staging: set[str] = set()
    live = False
    for n in nodes:
        if not isinstance(n, ast.Call):
            continue
        for a in [*n.args, *[k.value for k in n.keywords]]:
            if isinstance(a, ast.Starred):
                a = a.value
            root = _caches.is_persistent_value(a, module, func) if isinstance(a, ast.expr) else None
            if root is not None:
                if _holds_input_copy(sub, module, root):
                    staging.add(root)
            elif isinstance(a, ast.Name) and func is not None and a.id in func.params and a.id != "self":
                live = True
            elif isinstance(a, ast.Name) and func is not None:
                kind = _local_kind(a, module.scope(func), func)
                if kind == "snapshot":
                    staging.add(a.id)  # a copy of an input made at capture: replay reads it forever
                elif kind == "live":
                    live = True
    return staging, live


def _holds_input_copy(sub: Submission, module: PyModule, root: str) -> bool:
    """Is activation data ever copied into this persistent buffer (`buf.copy_(x)`, `buf[:] = x`,
    `self.buf = x.clone()`)?"""
    for func in module.functions.values():
        if func.is_triton:
            continue
        scope = module.scope(func)
        for node in walk_body(func.node):
            src: ast.expr | None = None
            if isinstance(node, ast.Call) and S.call_name(node) in _COPY_IN and isinstance(node.func, ast.Attribute):
                if _caches.is_persistent_value(node.func.value, module, func) == root and node.args:
                    src = node.args[-1] if S.call_name(node) == "index_copy_" else node.args[0]
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Subscript) and _caches.persistent_root(t.value, module, func) == root:
                        src = node.value
                    elif _caches.persistent_root(t, module, func) == root and not isinstance(t, ast.Subscript):
                        if _value_kind(node.value, scope, func, set(func.params) - {"self", "cls"}, 0) == "snapshot":
                            return True
            if src is None:
                continue
            params, _ = _caches.data_roots(src, scope)
            if _caches.carries_input_data(sub, func, params):
                return True
    return False


_COPY_IN = frozenset({"copy_", "index_copy_"})


# Calls that return a new tensor holding a copy of their receiver's data (not a view).
_COPY_CALLS = frozenset({"clone", "copy", "deepcopy"})  # dtype casts may return self: not here
_VIEW_CALLS = frozenset({"view", "reshape", "t", "transpose", "permute", "narrow", "expand", "as_strided",
                         "unsqueeze", "squeeze", "flatten", "view_as", "contiguous", "detach", "__getitem__"})


def _copies(elt: ast.expr) -> bool:
    """A comprehension element that copies the data it walks over, on some arm."""
    if isinstance(elt, ast.IfExp):
        return _copies(elt.body) or _copies(elt.orelse)
    return isinstance(elt, ast.Call) and S.call_name(elt) in _COPY_CALLS


def _local_kind(name: ast.Name, scope: Scope, func: FunctionInfo, depth: int = 0) -> str | None:
    """What a local argument of a captured call is: 'live' (an input or a view of it), 'snapshot'
    (a copy of an input's data taken when the graph was captured), 'alloc' (a fresh buffer, e.g.
    an output sized from x.shape: neither live input nor stale), or None when unknown."""
    if depth > 4:
        return None
    params = set(func.params) - {"self", "cls"}
    if name.id in params:
        return "live"
    kinds: set[str | None] = set()
    for v in S.local_defs(scope, name.id):
        kinds.add(_value_kind(v, scope, func, params, depth))
    if "snapshot" in kinds:
        return "snapshot"
    if "live" in kinds:
        return "live"
    if kinds and kinds <= {"alloc"}:
        return "alloc"
    return None


def _value_kind(v: ast.expr, scope: Scope, func: FunctionInfo, params: set[str], depth: int) -> str | None:
    if isinstance(v, ast.Name):
        return _local_kind(v, scope, func, depth + 1)
    if isinstance(v, ast.Subscript):
        return _value_kind(v.value, scope, func, params, depth)
    if isinstance(v, ast.List | ast.Tuple):
        kinds = {_value_kind(e, scope, func, params, depth) for e in v.elts}
        return "snapshot" if "snapshot" in kinds else "live" if "live" in kinds else None
    if isinstance(v, ast.IfExp):  # `a.clone() if cond else a`: a copy on either arm is a snapshot
        kinds = {_value_kind(e, scope, func, params, depth) for e in (v.body, v.orelse)}
        return "snapshot" if "snapshot" in kinds else "live" if "live" in kinds else "alloc" if "alloc" in kinds else None
    if isinstance(v, ast.ListComp | ast.GeneratorExp):
        # [t.clone() for t in (q, k, v)] (or `t.clone() if ... else t`): the element is a copy of
        # what the loop walks over
        from_inputs = any(S.param_roots(g.iter, scope)[0] for g in v.generators)
        if from_inputs and _copies(v.elt):
            return "snapshot"
        return "live" if from_inputs else None
    if isinstance(v, ast.Call):
        last = S.call_name(v)
        recv = v.func.value if isinstance(v.func, ast.Attribute) else None
        if last in S.ALLOC_FUNCS:
            return "alloc"
        copy_to = last == "to" and any(k.arg == "copy" and isinstance(k.value, ast.Constant) and k.value.value
                                       for k in v.keywords)
        if last in _COPY_CALLS or copy_to:
            # x.clone(), torch.clone(x), copy.deepcopy(x): the receiver or the first argument is copied
            sources = ([recv] if recv is not None else []) + v.args[:1]
            inner = {_value_kind(src, scope, func, params, depth) for src in sources}
            return "snapshot" if inner & {"live", "snapshot"} else ("alloc" if "alloc" in inner else None)
        if recv is not None and (last in _VIEW_CALLS or last == "to"):
            return _value_kind(recv, scope, func, params, depth)
    p, _ = S.param_roots(v, scope)
    return "live" if p else None


def _pointer_table_patch(func: FunctionInfo) -> bool:
    for node in walk_body(func.node):
        if isinstance(node, ast.Call) and S.call_name(node) == "data_ptr":
            for anc in func.module.ancestors(node):
                if anc is func.node:
                    break
                if isinstance(anc, ast.Assign) and any(isinstance(t, ast.Subscript) for t in anc.targets):
                    return True
                if isinstance(anc, ast.Call) and S.call_name(anc) in ("copy_", "fill_", "tensor"):
                    return True
    return False


def _contains(outer: ast.AST, inner: ast.AST) -> bool:
    return any(n is inner for n in ast.walk(outer))


def _fills(module: PyModule, func: FunctionInfo, bufs: set[str]) -> list[ast.AST]:
    """Writes into the staging buffers inside one function (copy_/fill_/index_copy_, slice stores),
    through a loop over the buffers too (`for dst, src in zip(self._static, args): dst.copy_(src)`)."""
    out: list[ast.AST] = []
    for node in walk_body(func.node):
        if isinstance(node, ast.Call) and S.call_name(node) in ("copy_", "fill_", "index_copy_"):
            recv = node.func.value if isinstance(node.func, ast.Attribute) else None
            if recv is not None and _caches.is_persistent_value(recv, module, func) in bufs:
                out.append(node)
            elif isinstance(recv, ast.Name) and (recv.id in bufs or _caches.loop_element_root(module, func, recv) in bufs):
                out.append(node)
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and _caches.persistent_root(t.value, module, func) in bufs:
                    out.append(node)
    return out


def _fill_target(module: PyModule, func: FunctionInfo, node: ast.AST, bufs: set[str]) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        recv = node.func.value
        r = _caches.is_persistent_value(recv, module, func)
        if r in bufs:
            return r
        if isinstance(recv, ast.Name) and recv.id in bufs:
            return recv.id
        if isinstance(recv, ast.Name) and (r := _caches.loop_element_root(module, func, recv)) in bufs:
            return r
    if isinstance(node, ast.Assign):
        for t in node.targets:
            if isinstance(t, ast.Subscript):
                r = _caches.persistent_root(t.value, module, func)
                if r in bufs:
                    return r
    return None


def _capture_guards(module: PyModule, func: FunctionInfo, capture_nodes: list[ast.AST]) -> list[ast.AST]:
    """For each capture inside `func`, the branch of the innermost `if` that holds it: code in
    that branch runs only when the graph is (re)captured."""
    out: list[ast.AST] = []
    for cap in capture_nodes:
        if not _contains(func.node, cap):
            continue
        child: ast.AST = cap
        for anc in module.ancestors(cap):
            if anc is func.node:
                break
            if isinstance(anc, ast.If):
                branch = anc.body if child in anc.body else anc.orelse if child in anc.orelse else None
                if branch is not None:
                    out.append(ast.Module(body=list(branch), type_ignores=[]))
                    break
            child = anc
    return out


def _under_state_guard(module: PyModule, func: FunctionInfo, node: ast.AST, replay: ast.AST) -> bool:
    """Inside an `if`/`elif` that compares with persistent state (`elif key != self._key:`) and
    does not also hold the replay: the copy is skipped on calls that still replay. Not when the
    copy sits in the arm that runs while the state is present (`if g is None: <capture> else:
    static.copy_(x)`): that arm is every call after the capture (`_caches._miss_in_body`)."""
    child: ast.AST = node
    for anc in module.ancestors(node):
        if anc is func.node:
            break
        if isinstance(anc, ast.If) and not _contains(anc, replay) and any(
            isinstance(n, ast.expr) and _caches.is_persistent_value(n, module, func) is not None
            for n in _caches.walk_test(anc.test)
        ):
            miss_in_body = _caches._miss_in_body(anc.test)
            in_body = any(child is st for st in anc.body)
            if miss_in_body is None or miss_in_body == in_body:
                return True
        child = anc
    return False


def _classify_replay(
    module: PyModule,
    func: FunctionInfo,
    staging: set[str],
    regions: list[tuple[FunctionInfo | None, ast.AST, list[ast.AST]]],
    replay: ast.AST,
) -> tuple[str, list[str]]:
    """('live' | 'staging_refreshed_each_call' | 'staging_refreshed_at_capture', stale buffers)."""
    if _pointer_table_patch(func):
        return "live", []
    if not staging:
        return "live", []
    captured = {id(n) for _, _, nodes in regions for n in nodes}
    capture_nodes = [r for _, r, _ in regions]
    refreshed: set[str] = set()
    keyed: set[str] = set()
    for other in module.functions.values():
        if other.is_triton:
            continue
        has_capture = any(_contains(other.node, r) for r in capture_nodes)
        for fill in _fills(module, other, staging):
            target = _fill_target(module, other, fill, staging)
            if target is None:
                continue
            if id(fill) in captured:
                refreshed.add(target)  # the copy is part of the graph: every replay redoes it
                continue
            if other is func:
                if any(_contains(g, fill) for g in _capture_guards(module, func, capture_nodes)):
                    continue  # runs only when the graph is captured
                if _under_state_guard(module, func, fill, replay):
                    keyed.add(target)  # copied in only when a cache key moves
                    continue
                refreshed.add(target)  # runs on every call, before the replay
            elif not has_capture:
                refreshed.add(target)  # a copy-in helper with no capture of its own
    stale = sorted(staging - refreshed)
    if stale and set(stale) <= keyed:
        return "staging_refreshed_on_key_change", stale
    if stale:
        return "staging_refreshed_at_capture", stale
    return "staging_refreshed_each_call", []


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    out: list[Finding] = []
    # a capture anywhere in the submission (a sidecar helper that captures and hands the graph
    # back) makes every `.replay()` of any analyzed module a graph replay
    all_regions = {m.path: _capture_regions(sub, m) for m in sub.modules.values()}
    captured_elsewhere = any(all_regions.values())
    for module in sub.modules.values():
        regions = all_regions[module.path]
        if not regions and not captured_elsewhere:
            continue
        staging: set[str] = set()
        for func, _, nodes in regions:
            s, _live = _staging_buffers(sub, module, func, nodes)
            staging |= s
        judged_regions = regions
        if not regions:  # captured in another module: judge by what that capture reads
            judged_regions = []
            for omod in sub.modules.values():
                for cfunc, cnode, nodes in all_regions[omod.path]:
                    s, _live = _staging_buffers(sub, omod, cfunc, nodes)
                    staging |= s
                    judged_regions.append((cfunc, cnode, nodes))
        for func in module.functions.values():
            scope = module.scope(func)
            for node in walk_body(func.node):
                if not (isinstance(node, ast.Call) and S.call_name(node) == "replay"):
                    continue
                key_kinds: set[str] = set()
                for anc in module.ancestors(node):
                    if anc is func.node:
                        break
                    if isinstance(anc, ast.If):
                        key_kinds |= S.identity_kinds(anc.test, scope)
                reads, stale = _classify_replay(module, func, staging, judged_regions if regions else [], node)
                if not regions and staging:
                    # the capture lives in another module: its copies decide
                    reads, stale = "staging_refreshed_at_capture", sorted(staging)
                    for omod in sub.modules.values():
                        for ofunc in omod.functions.values():
                            r2, st2 = _classify_replay(omod, ofunc, staging, all_regions[omod.path], node)
                            if ofunc.node is not None and not st2 and r2 != "live":
                                reads, stale = r2, []
                data = {
                    "topic": "cuda_graph",
                    "cached_kind": "launch_artifact",
                    "replay_reads": reads,
                    "key_kinds": sorted(key_kinds),
                    "staging_buffers": sorted(staging),
                    "stale_buffers": stale,
                    "where": sub.where(func),
                }
                if reads in ("staging_refreshed_at_capture", "staging_refreshed_on_key_change"):
                    data["topic"] = "stale_cache"
                    when = (
                        "only when the graph is captured"
                        if reads == "staging_refreshed_at_capture"
                        else "only when a cache key moves, not before every replay"
                    )
                    out.append(
                        S.py_finding(
                            RULE,
                            module,
                            node,
                            f"{func.name} replays a CUDA graph whose input staging buffers "
                            f"({', '.join(stale)}) are filled {when}: later calls with the same key "
                            "compute on stale data. Needs the same-storage probe.",
                            severity=Severity.HIGH if reads == "staging_refreshed_at_capture" else Severity.MEDIUM,
                            data=data,
                        )
                    )
                else:
                    how = (
                        "the caller's live buffers (or a pointer table patched per call)"
                        if reads == "live"
                        else "staging buffers copied from the inputs before every replay"
                    )
                    out.append(
                        S.py_finding(
                            RULE,
                            module,
                            node,
                            f"{func.name} replays a CUDA graph that reads {how}: a launch cache (every "
                            "replay recomputes into its output), clean by static data flow; the "
                            "same-storage probe confirms it when a regrade runs.",
                            effect=Effect.ADVISORY,
                            severity=Severity.LOW,
                            data=data,
                        )
                    )
    out.extend(_native_graphs(sub))
    return S.dedupe(out)


_CPP_FUNC = re.compile(r"\b([A-Za-z_]\w*)\s*\([^;{}()]*(?:\([^()]*\)[^;{}()]*)*\)\s*(?:const\s*)?\{")
_CPP_KEYWORDS = frozenset({"if", "for", "while", "switch", "catch", "return", "sizeof", "TORCH_CHECK", "defined"})
_CPP_COPY = re.compile(r"cudaMemcpy\w*\s*\(|\.copy_\s*\(|\.clone\s*\(|std::memcpy\s*\(")


def _native_graphs(sub: Submission) -> list[Finding]:
    """C++ graph APIs: what the captured launches read. A capture function whose launches read the
    tensors (or raw pointers) the Python caller passes replays on those live addresses; a copy into
    a buffer made before BeginCapture (and not captured) is a capture-time snapshot."""
    out: list[Finding] = []
    for src in sub.loaded_native():
        launches = list(src.find(r"\bcudaGraphLaunch\s*\("))
        if not launches:
            continue
        text = src.text
        patched = src.has(r"cudaGraphExec(KernelNode)?SetParams|cudaGraphExecUpdate|cudaGraphKernelNodeSetParams")
        reads = "live" if patched else "unknown"
        capture_funcs: list[str] = []
        snapshot = False
        for m in re.finditer(r"cudaStreamBeginCapture\s*\(", text):
            head = text[: m.start()]
            names = [f for f in _CPP_FUNC.finditer(head) if f.group(1) not in _CPP_KEYWORDS]
            if not names:
                continue
            fstart = names[-1].start()
            capture_funcs.append(names[-1].group(1))
            if _CPP_COPY.search(text[fstart : m.start()]):
                snapshot = True  # copied outside the capture, before it begins
        if not patched and capture_funcs and not snapshot:
            reads = _python_capture_args(sub, capture_funcs)
        for tl, _, _ in launches[:1]:
            data = {"topic": "cuda_graph", "cached_kind": "launch_artifact", "replay_reads": reads,
                    "capture_functions": capture_funcs}
            if reads == "live":
                out.append(
                    S.native_finding(
                        RULE,
                        src,
                        tl,
                        "A C++ CUDA graph is launched; its capture ("
                        + ", ".join(capture_funcs or ["node parameters patched per call"])
                        + ") launches on the addresses the Python caller passes (the live inputs): a launch "
                        "cache, clean by static data flow; the same-storage probe confirms it.",
                        effect=Effect.ADVISORY,
                        severity=Severity.LOW,
                        data=data,
                    )
                )
            else:
                data["topic"] = "stale_cache" if snapshot else "cuda_graph"
                out.append(
                    S.native_finding(
                        RULE,
                        src,
                        tl,
                        "A C++ CUDA graph is launched"
                        + (" after a copy made outside its capture (a capture-time snapshot)" if snapshot else
                           "; what its captured launches read could not be traced to the caller's tensors")
                        + ". The same-storage probe decides it.",
                        severity=Severity.HIGH if snapshot else Severity.MEDIUM,
                        data=data,
                    )
                )
    return out


def _python_capture_args(sub: Submission, names: list[str]) -> str:
    """'live' when every Python call of a C++ capture function passes live inputs (tensors, views,
    their data_ptr(), or persistent slots bound from them) and no capture-time clone; else 'unknown'."""
    seen = False
    for module in sub.modules.values():
        for func in module.functions.values():
            if func.is_triton:
                continue
            for node in walk_body(func.node):
                if not (isinstance(node, ast.Call) and S.call_name(node) in names):
                    continue
                seen = True
                if _passes_snapshot(sub, module, func, node):
                    return "unknown"
    if seen:
        return "live"
    # the extension entry point is bound under another name (a method table, a getattr): no
    # Python call may hand the extension a snapshot of an input either
    for module in sub.modules.values():
        for func in module.functions.values():
            if func.is_triton or func not in sub.reach().live:
                continue
            for node in walk_body(func.node):
                if isinstance(node, ast.Call) and _passes_snapshot(sub, module, func, node):
                    return "unknown"
    return "live"


def _passes_snapshot(sub: Submission, module: PyModule, func: FunctionInfo, call: ast.Call) -> bool:
    """Does this call hand over a capture-time copy of an input (a local clone, or a persistent
    buffer an input is copied into), or its data_ptr()?"""
    scope = module.scope(func)
    params = set(func.params) - {"self", "cls"}
    for a in [*call.args, *[k.value for k in call.keywords]]:
        base = a
        if isinstance(base, ast.Call) and S.call_name(base) == "data_ptr" and isinstance(base.func, ast.Attribute):
            base = base.func.value
        if isinstance(base, ast.Name) and base.id not in params:
            if _local_kind(base, scope, func) == "snapshot":
                return True
        elif isinstance(base, ast.Call) and _value_kind(base, scope, func, params, 0) == "snapshot":
            return True
        root = _caches.is_persistent_value(base, module, func) if isinstance(base, ast.expr) else None
        if root is not None and _holds_input_copy(sub, module, root):
            return True
    return False
