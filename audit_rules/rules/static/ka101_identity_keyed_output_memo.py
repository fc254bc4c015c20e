"""KA101 identity-keyed-output-memo.

What it flags: a dict or attribute keyed on input identity (``data_ptr()``, ``id()``, ``is``,
shapes/strides) whose cached value is the function's OUTPUT and is handed back on a hit without
launching any work. The store may be ``self``, a module-level container or mutated object, a
closure cell of a factory (or of a memoizing decorator), and the hit may go through a pure lookup
helper or a view of the cached tensor; ``functools.lru_cache``/``cache`` on a function fed a
tensor (tensors hash by identity) whose result is the forward output counts too.

Why it matters: the benchmark calls forward on the same input buffers every trial, so an output
memo keyed on identity turns the timed call into a dictionary lookup (a >>1.0 roofline fraction,
~10 us flat), and a caller that overwrites the same buffer in place gets a stale answer. The
seeds' auditors demand the "same-buffer overwrite" test for every such pattern: only the probe
can tell a stale lookup from live recompute, so the finding asks for it and is critical.

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

from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _caches
from audit_rules.rules.static import _support as S

RULE = RuleMeta(
    id="KA101",
    name="identity-keyed-output-memo",
    kind=RuleKind.STATIC,
    severity=Severity.CRITICAL,
    effect=Effect.NEEDS_PROBE,
    summary="Output cached under an input-identity key and returned on a hit without recompute",
    probe=Probe.SAME_STORAGE_OVERWRITE,
)


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    rep = _caches.report(sub)
    out: list[Finding] = []
    for hit in rep.hits:
        if hit.recomputes:
            continue
        stores = [s for s in rep.stores if s.container == hit.container and s.func.module is hit.module]
        kinds = {s.cached_kind for s in stores}
        if stores and not kinds & {"output"}:
            continue  # the branch hands back a cached copy/artifact, not a memoized result
        key_kinds = set(hit.key_kinds)
        for s in stores:
            key_kinds |= s.key_kinds
        out.append(
            S.py_finding(
                RULE,
                hit.module,
                hit.node,
                f"{hit.func.name} returns the cached {hit.container} on a hit keyed on "
                f"{', '.join(sorted(key_kinds)) or 'persistent state'} without launching any work: "
                "a same-buffer in-place overwrite would get the old output back. Needs the "
                "same-storage-overwrite probe.",
                data={
                    "topic": "output_memo",
                    "cached_kind": "output",
                    "key_kinds": sorted(key_kinds),
                    "container": hit.container,
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
                "any launch. Needs the same-storage-overwrite probe.",
                data={
                    "topic": "output_memo",
                    "cached_kind": "output",
                    "key_kinds": ["id"],
                    "container": f"{memo.func.name} (memoizing decorator)",
                    "where": sub.where(memo.func),
                },
            )
        )
    return S.dedupe(out)
