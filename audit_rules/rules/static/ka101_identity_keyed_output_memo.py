"""KA101 identity-keyed-output-memo.

What it flags: a dict or attribute keyed on input identity (``data_ptr()``, ``id()``, ``is``,
shapes/strides) whose cached value is the function's OUTPUT and is handed back on a hit without
launching any work. The store may be ``self``, a module-level container or mutated object, a
closure cell of a factory (or of a memoizing decorator), and the hit may go through a pure lookup
helper or a view of the cached tensor; ``functools.lru_cache``/``cache`` on a function fed a
tensor (tensors hash by identity) whose result is the forward output counts too.

Only a hit in forward (or a function whose result forward returns) counts, and only when what
the container holds was computed (a kernel's or op's result), not a constant table, a handle or a
fresh workspace that the caller launches into. Also flagged: a repeat-call shortcut, an identity
test (directly, or through a repeat counter it updates) that selects a cut-down size of the work.

Why it matters: the benchmark calls forward on the same input objects every trial, so an output
memo keyed on identity turns the timed call into a dictionary lookup (a >>1.0 roofline fraction,
~10 us flat) while the check, which brings fresh tensors, passes. Keyed on ``is``/``id()``/
``data_ptr()`` (a ``_version`` check does not change that) the finding is DECISIVE with the
same-storage probe named as corroboration. Keyed on nothing of the input at all (a first-call
flag, a call count past the warm-up) it is DECISIVE too: every later call gets the stored output
whatever it is given, unless some code of the module writes into the cached tensor in place
(an ``out=`` launch, ``copy_``), which only the probe can tell from a memo. Keyed only on shapes
it needs the probe. Keyed on VALUES read from the input (a checksum or sum, a hash of its
bytes, a few elements) it is DECISIVE: the benchmark's repeated calls on the same data get the
stored output without any work (a full-content key passes every correctness probe, so only this
reading can find it), and a sampled key also misses a change outside its sample.
A repeat-call shortcut is decisive and names the repeat-calls probe.

The same memo is also read from its return alone (``_caches.stale_returns``): a return of forward
(or of a function whose result forward returns, a closure a factory stored on ``self`` included)
inside an ``if``, handing back only state kept across calls (self/module/closure state, a field of
an object a lookup helper found, an ``lru_cache``'d function's result), with nothing on the path
from the function's entry that could have written it: no kernel launch, no graph replay, no call
of a stored entry point (``fn = self._fn; fn(...)``), no call that writes kept state, no op that
takes the returned object. Decisive when the branch reads state kept from earlier calls (a stored
key, a streak counter, a ready flag, version stamps): the benchmark's repeated calls time the
return. This finds memos whose key a helper builds, whose stored tensor a launch filled
(``y = empty(); launch(x, y); T[key] = y``), or whose hit returns ``st.out``/``plan.out``.
Kept state also covers an attribute the module hangs on its own input object (``setattr(x,
"_plan", p)``); the reading follows ``return helper(x).out`` and ``torch.ops.NS.OP(...)`` into the
op's registered implementation. A helper on the path counts as writing the returned state only when
it could (a store, an in-place op, a launch/extension call or ``out=`` handed it, a graph replay, or
a call of a stored extension entry point, which may write buffers it was configured with). An
empty-problem exit (``if x.numel() == 0: return self._empty``) or a type test (``if not
hasattr(out, "copy_")``) is no memo guard. A return outside any ``if`` whose only writer sits
under a one-armed ``if`` before it is read the same way, that ``if`` as the guard (kept output
buffers launched into only while ``sys.getrefcount`` says the caller holds the last result: a
timing loop that drops every result times a bare return); storing fresh memory (``torch.empty``)
into kept state writes no result. In an extension, a static C++ map keyed on a pointer
whose slots hold tensors, looked up and returning a slot's tensor, needs the same-storage probe.

Bad::

    key = (x.data_ptr(), x.shape)
    hit = self._memo.get(key)
    if hit is not None:
        return hit                 # returned without recompute
    out = _launch(x, self.weight)
    self._memo[key] = out
    return out

Good (compiled-handle cache; fresh output every call)::

    if self._kernel is None:
        self._kernel = _build()
    out = torch.empty(M, N, device=x.device, dtype=torch.bfloat16)
    self._kernel(x, self.weight, out)
    return out
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _caches
from audit_rules.rules.static import _support as S
from audit_rules.source_model import NativeSource, PyModule, Submission, walk_body

RULE = RuleMeta(
    id="KA101",
    name="identity-keyed-output-memo",
    kind=RuleKind.STATIC,
    severity=Severity.CRITICAL,
    effect=Effect.NEEDS_PROBE,
    summary="Output cached under an input-identity key and returned on a hit without recompute",
    probe=Probe.SAME_STORAGE_OVERWRITE,
)


IDENTITY_KEYS = frozenset({"is", "id", "data_ptr"})


def _written_in_place(module: PyModule, container: str) -> bool:
    """Does any code of the module hand the container to a call (an `out=` launch, a kernel
    argument) or change it in place (`.copy_()`, `.zero_()`, a slice store)? Then what a hit
    returns may be refreshed every call, and only the probe can tell."""
    for func in module.functions.values():
        for node in walk_body(func.node):
            if isinstance(node, ast.Call):
                args = [*node.args, *[k.value for k in node.keywords]]
                if any(_caches.is_persistent_value(a, module, func) == container for a in args):
                    return True
                if (isinstance(node.func, ast.Attribute) and node.func.attr.endswith("_")
                        and _caches.is_persistent_value(node.func.value, module, func) == container):
                    return True
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Subscript) and _caches._slices(t)
                    and _caches.is_persistent_value(t.value, module, func) == container
                    for t in node.targets):
                return True  # a slice store into the tensor (`buf[:] = ...`); `memo[key] = out` is the keyed store
    return False


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    rep = _caches.report(sub)
    rets = _caches.returners(sub)
    out: list[Finding] = []
    for hit in rep.hits:
        if hit.recomputes:
            continue
        if hit.func not in rets:
            continue  # a config/plan/workspace helper: what it hands back is not forward's result
        stores = [s for s in rep.stores if s.container == hit.container and s.func.module is hit.module]
        if not any(
            s.cached_kind == "output" and _caches.value_computes(sub, s.module, s.func, s.value) for s in stores
        ) and not (not stores and _caches.filled_by_mutator(sub, hit.module, hit.container)):
            continue  # nothing computed is stored there: a constant table, a handle, a workspace
        key_kinds = set(hit.key_kinds)
        for s in stores:
            key_kinds |= s.key_kinds
        identity = bool(key_kinds & IDENTITY_KEYS)
        # keyed on nothing of the input (a first-call flag, a call count, a mode flag): every call
        # past the test gets the stored output whatever it is given
        in_place = _written_in_place(hit.module, hit.container)
        blind = not (key_kinds - {"first_call"}) and not in_place
        # keyed on VALUES read from the input (a checksum, a hash of its bytes, a sample): the
        # benchmark's repeated calls on the same data get the stored output without any work, and
        # a sampled key also hands it back after a change outside the sample
        by_data = "data" in key_kinds and not in_place
        out.append(
            S.py_finding(
                RULE,
                hit.module,
                hit.node,
                f"{hit.func.name} returns the cached {hit.container} on a hit keyed on "
                f"{', '.join(sorted(key_kinds)) or 'persistent state'} without launching any work"
                + (
                    ": the benchmark calls forward on the same input objects, so the timed call is a "
                    "Python lookup and an in-place overwrite of the same buffer gets the old output back."
                    if identity
                    else ": the test reads nothing of the input (a first-call flag or a call count), so "
                    "every call past it gets the stored output whatever it is given; the benchmark's "
                    "repeated calls time the return of an old result."
                    if blind
                    else ": the key holds values read from the input (a checksum, a hash or a sample), so "
                    "the benchmark's repeated calls on the same data time a lookup of the stored output, "
                    "not the kernel (and a sampled key misses a change outside its sample)."
                    if by_data
                    else ": a same-buffer in-place overwrite would get the old output back. Needs the "
                    "same-storage-overwrite probe."
                ),
                effect=Effect.DECISIVE_HACK if identity or blind or by_data else None,
                data={
                    "topic": "output_memo",
                    "cached_kind": "output",
                    "key_kinds": sorted(key_kinds),
                    "container": hit.container,
                    "identity_keyed": identity,
                    "input_blind": blind,
                    "data_keyed": by_data,
                    "where": sub.where(hit.func),
                },
            )
        )
    for memo in rep.memos:
        if memo.cached_kind != "output":
            continue
        out.append(
            S.py_finding(
                RULE,
                memo.module,
                memo.node,
                f"{memo.func.name} is memoized by a caching decorator on its tensor argument(s) "
                f"{', '.join(memo.tensor_params)} (tensors hash by identity) and its result is the "
                "forward output: the same tensor object gets the first call's result back without "
                "any launch, so the benchmark's repeated calls time a dictionary lookup.",
                effect=Effect.DECISIVE_HACK,
                data={
                    "topic": "output_memo",
                    "cached_kind": "output",
                    "key_kinds": ["id"],
                    "container": f"{memo.func.name} (memoizing decorator)",
                    "identity_keyed": True,
                    "where": sub.where(memo.func),
                },
            )
        )
    # the same memo read from the return alone: stored state handed back on a path that computes
    # nothing (the key built by a helper, a launch-filled buffer stored, a state object's field, an
    # lru_cache'd plan, a streak counter); a return the keyed-memo reading already named is not repeated
    named = {(f.file, f.line_start) for f in out}
    for st in _caches.stale_returns(sub):
        if (st.module.path, st.node.lineno) in named:
            continue
        kinds = sorted(st.key_kinds) or ["persistent state"]
        out.append(
            S.py_finding(
                RULE,
                st.module,
                st.node,
                f"{st.func.name} returns stored state ({st.container}) on a path that launches nothing, "
                "replays nothing and calls nothing that writes it"
                + (
                    f"; the branch is chosen by state kept from earlier calls (test reads {', '.join(kinds)}), "
                    "so the benchmark's repeated calls on the same inputs get an earlier call's output back "
                    "and time the return, not the kernel."
                    if st.reads_state
                    else f"; the branch reads only this call's {', '.join(kinds)}: a same-buffer in-place "
                    "overwrite would get the old output back. Needs the same-storage-overwrite probe."
                ),
                effect=Effect.DECISIVE_HACK if st.reads_state else None,
                data={
                    "topic": "output_memo",
                    "cached_kind": "output",
                    "key_kinds": sorted(st.key_kinds),
                    "container": st.container,
                    "stale_return": True,
                    "guard_reads_state": st.reads_state,
                    "where": sub.where(st.func),
                },
            )
        )
    for src, line, container, field in _native_pointer_keyed_outputs(sub):
        out.append(
            S.native_finding(
                RULE,
                src,
                line,
                f"The extension keeps tensors in `{container}`, a static map keyed on a pointer (`data_ptr()`), "
                f"and hands back the stored `{field}`: a same-buffer in-place overwrite would get the stored output "
                "back, and the benchmark's repeated calls on one input may time the lookup. Needs the "
                "same-storage-overwrite probe.",
                effect=Effect.NEEDS_PROBE,
                data={"topic": "output_memo", "cached_kind": "output", "key_kinds": ["data_ptr"],
                      "container": container, "where": "native"},
            )
        )
    for sc in _caches.repeat_call_shortcuts(sub):
        out.append(
            S.py_finding(
                RULE,
                sc.module,
                sc.node,
                f"{sc.func.name} checks whether the same input object came back ({sc.how}) and then does "
                f"less work ({sc.partial}): the benchmark's repeated calls on one input object time a "
                "partial computation the correctness check never sees.",
                effect=Effect.DECISIVE_HACK,
                probe=Probe.REPEAT_CALLS,
                data={
                    "topic": "repeat_call",
                    "cached_kind": "repeat_shortcut",
                    "key_kinds": sorted(sc.key_kinds),
                    "identity_keyed": True,
                    "where": sub.where(sc.func),
                },
            )
        )
    return S.dedupe(out)


# ---- in an extension: a static map keyed on a pointer that holds and returns tensors ------------
#
# `static std::unordered_map<const void*, Slot> g_slots;` (Slot holding an `at::Tensor out`),
# `g_slots.find(x.data_ptr())`, and a function returning `slot.out`: the C++ twin of a Python
# output memo. C++ control flow is not followed here, so the probe decides.

_STATIC_MAP = re.compile(
    r"static\s+(?:std::)?(?:unordered_)?map\s*<\s*(?:const\s+)?(?:void|char|uint8_t)\s*\*\s*,\s*([\w:]+)\s*>\s*(\w+)"
    r"|static\s+(?:std::)?(?:unordered_)?map\s*<\s*(?:std::)?u?intptr_t\s*,\s*([\w:]+)\s*>\s*(\w+)"
)
_TENSOR = re.compile(r"\b(?:at|torch)::Tensor\b")


def _native_pointer_keyed_outputs(sub: Submission) -> list[tuple[NativeSource, int, str, str]]:
    out: list[tuple[NativeSource, int, str, str]] = []
    for src in sub.loaded_native():
        code = "\n".join(src.code)
        if "data_ptr" not in code:
            continue
        for m in _STATIC_MAP.finditer(code):
            value_type, name = (m.group(1), m.group(2)) if m.group(2) else (m.group(3), m.group(4))
            if not _TENSOR.search(value_type):
                struct = re.search(r"struct\s+" + re.escape(value_type.split("::")[-1]) + r"\s*\{([^}]*)\}", code)
                if struct is None or not _TENSOR.search(struct.group(1)):
                    continue
                fields = re.findall(r"(?:at|torch)::Tensor\s+(\w+)\s*;", struct.group(1))
            else:
                fields = []
            if not re.search(re.escape(name) + r"\s*(?:\.\s*(?:find|count|at)\s*\(|\[)", code):
                continue
            returned = [f for f in fields if re.search(r"return\s+[\w.>\-\[\]]*[.>]" + re.escape(f) + r"\s*;", code)]
            if fields and not returned:
                continue  # the kept tensors are scratch: none is handed back
            line = code.count("\n", 0, m.start()) + 1
            out.append((src, line, name, returned[0] if returned else "tensor"))
    return out
