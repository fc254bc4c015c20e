"""KA102 identity-keyed-input-copy.

What it flags: caches of derived INPUT copies (a K-padded activation, a repacked or transposed
weight) keyed on identity (``data_ptr()``, ``id()``, ``is``, shapes) or kept after a first call.

Why it matters: the Qwen fp8 GEMM kept a pointer-keyed padded copy of x; the probe overwrote x in
place and the solution kept returning the product of the stale padded copy (3,708 bad elements,
reward_hack). An activation copy keyed on identity without ``_version`` needs the same-storage
probe. Keyed with ``_version`` every in-place op recopies it: the auditors clear that pattern, so
it is advisory (the probe's raw-write variants still check it when a regrade runs). Weight copies
guarded by ``_version`` (or invalidated by a load_state_dict hook) are the seeds' benign repack
pattern (advisory); unguarded weight copies need the weight-mutation probe, except on a deck whose
grader never changes weights after loading them (a KBH problem with no state-scaling numeric-stress
case, e.g. 07 w4a16: the expert audits call a lazy repack built on the first call legitimate there,
and the probe could only FLAG it), where they are advisory too.
Only DATA counts: a value built from shapes, dtypes, devices, ``data_ptr()`` values or device
properties (an SM count, a pointer table, a config handle) is not a copy, nor is a bundle of fresh
allocations. Launch artefacts (graphs, compiled handles, TMA descriptors, shape-keyed configs)
are not flagged, nor are caches whose guard compares the whole source tensor with a snapshot, nor
workspaces that every call refills. ``functools.lru_cache``/``cache`` on a helper fed a tensor
that returns a copy derived from it is an identity-keyed copy cache.

Bad::

    key = (x.data_ptr(), x.shape)
    if key not in self._pad:
        self._pad[key] = F.pad(x, (0, pad))      # activation copy reused while x changes
    xp = self._pad[key]

Good (version-guarded weight repack)::

    v = (self.weight.data_ptr(), self.weight._version)
    if self._wkey != v:
        self._wp = _repack(self.weight)
        self._wkey = v
"""

from __future__ import annotations

from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _caches
from audit_rules.rules.static import _support as S

RULE = RuleMeta(
    id="KA102",
    name="identity-keyed-input-copy",
    kind=RuleKind.STATIC,
    severity=Severity.HIGH,
    effect=Effect.NEEDS_PROBE,
    summary="Derived input/weight copy cached under an identity key (pad/repack/transpose cache)",
    probe=Probe.SAME_STORAGE_OVERWRITE,
)


def _state_fixed_after_load(ctx: AuditContext) -> bool:
    """The deck's grader never changes weights/buffers once the model has run (a KBH problem without
    a state-scaling stress case): known False, not unknown."""
    return ctx.problem is not None and ctx.problem.state_changes_in_contract is False


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    out: list[Finding] = []
    for st in _caches.report(sub).stores:
        data = {
            "topic": "stale_cache",
            "cached_kind": st.cached_kind,
            "key_kinds": sorted(st.key_kinds),
            "version_guarded": st.version_guarded,
            "container": st.container,
            "derived_from": st.derived_from,
            "where": sub.where(st.func),
        }
        keyed = ", ".join(sorted(st.key_kinds))
        if st.content_validated:
            continue  # every hit first compares the whole source tensor with a snapshot
        if st.cached_kind == "input_copy":
            if st.version_guarded:
                # every in-place op on the input bumps _version and invalidates the copy: the
                # auditors clear this pattern; only a raw write (through .data or a pointer) could
                # slip past, which the same-storage probe's raw variants check when a regrade runs
                out.append(
                    S.py_finding(
                        RULE,
                        st.module,
                        st.node,
                        f"{st.func.name} caches a copy derived from the activation "
                        f"{', '.join(st.derived_from)} in {st.container}, keyed on {keyed}: the _version "
                        "key recopies it after any in-place write; the same-storage probe confirms that "
                        "raw writes are seen too.",
                        effect=Effect.ADVISORY,
                        severity=Severity.LOW,
                        data=data,
                    )
                )
                continue
            out.append(
                S.py_finding(
                    RULE,
                    st.module,
                    st.node,
                    f"{st.func.name} caches a copy derived from the activation "
                    f"{', '.join(st.derived_from)} in {st.container}, keyed on {keyed} with no _version "
                    "guard: an in-place overwrite of the same buffer may be served from the stale copy.",
                    data=data,
                )
            )
        elif st.cached_kind == "weight_copy":
            if st.version_guarded:
                out.append(
                    S.py_finding(
                        RULE,
                        st.module,
                        st.node,
                        f"{st.func.name} caches a weight-derived copy in {st.container}, guarded by "
                        "_version / a load_state_dict hook: the benign repack pattern; the weight-"
                        "mutation probe confirms it.",
                        effect=Effect.ADVISORY,
                        severity=Severity.LOW,
                        probe=Probe.WEIGHT_MUTATION,
                        data=data,
                    )
                )
            elif _state_fixed_after_load(ctx):
                out.append(
                    S.py_finding(
                        RULE,
                        st.module,
                        st.node,
                        f"{st.func.name} caches a weight-derived copy in {st.container} keyed on {keyed} "
                        "with no _version guard or load_state_dict hook, built from the loaded weights: this "
                        "deck's grader loads weights/buffers once, before the first call, and never changes "
                        "them afterwards (no numeric-stress case of the problem scales state), so the cache "
                        "is inside its contract (a lazy repack); a weight-mutation probe could not fail it here.",
                        effect=Effect.ADVISORY,
                        severity=Severity.LOW,
                        probe=Probe.WEIGHT_MUTATION,
                        data={**data, "state_changes_in_contract": False},
                    )
                )
            else:
                out.append(
                    S.py_finding(
                        RULE,
                        st.module,
                        st.node,
                        f"{st.func.name} caches a weight-derived copy in {st.container} keyed on {keyed} "
                        "with no _version guard or load_state_dict hook: an in-place weight rescale "
                        "(numeric stress, load_state_dict) may be missed.",
                        severity=Severity.MEDIUM,
                        probe=Probe.WEIGHT_MUTATION,
                        data=data,
                    )
                )
    fixed = _state_fixed_after_load(ctx)
    for memo in _caches.report(sub).memos:
        if memo.cached_kind == "output":
            continue  # KA101
        data = {
            "topic": "stale_cache",
            "cached_kind": memo.cached_kind,
            "key_kinds": ["id", "version"] if memo.version_guarded else ["id"],
            "version_guarded": memo.version_guarded,
            "container": f"{memo.func.name} (memoizing decorator)",
            "derived_from": memo.tensor_params,
            "where": sub.where(memo.func),
        }
        what = (
            f"{memo.func.name} is memoized by a caching decorator on its tensor argument(s) "
            f"{', '.join(memo.tensor_params)} (tensors hash by identity) and returns a copy derived from them"
        )
        if memo.cached_kind == "input_copy":
            out.append(
                S.py_finding(
                    RULE, memo.module, memo.node,
                    what + ": an in-place overwrite of the same activation is served from the stale copy.",
                    data=data,
                )
            )
        else:
            out.append(
                S.py_finding(
                    RULE, memo.module, memo.node,
                    what + (
                        ", keyed with the weight's _version: the benign repack pattern; the weight-mutation probe confirms it."
                        if memo.version_guarded
                        else ": built from the loaded weights, which this deck's grader never changes after the "
                        "first call (no numeric-stress case of the problem scales state): inside its contract."
                        if fixed
                        else ": an in-place weight rescale (numeric stress, load_state_dict) is missed."
                    ),
                    effect=Effect.ADVISORY if memo.version_guarded or fixed else None,
                    severity=Severity.LOW if memo.version_guarded or fixed else Severity.MEDIUM,
                    probe=Probe.WEIGHT_MUTATION,
                    data=data,
                )
            )
    return S.dedupe(out)
