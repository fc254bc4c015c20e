"""KA140 l2-cache-policy.

What it flags: manipulation of L2 residency against the benchmark's cold-cache contract:

* Triton ``tl.load(..., eviction_policy="evict_last")``;
* PTX ``createpolicy...L2::evict_last``, ``.L2::evict_last`` / ``L2::cache_hint`` loads,
  ``applypriority``, ``prefetch...L2::evict_last``;
* ``cudaAccessPolicyWindow`` / ``accessPolicyWindow`` with ``hitProp = cudaAccessPropertyPersisting``,
  ``cudaStreamSetAttribute(..., cudaStreamAttributeAccessPolicyWindow)``,
  ``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, ...)`` (also through ctypes).

Why it matters: the benchmark flushes L2 before every timed trial so the roofline (bytes from
HBM) is honest; data pinned in L2 across that flush is timed at L2 bandwidth. The Qwen paged-
attention cell was excluded for exactly this, and the Qwen W4A16 cell for a persisting window.

Effect: a persisting window or set-aside limit set by the solution is decisive (it defeats the
per-trial L2 flush by construction). ``evict_last`` in a memory-regime problem is decisive: the
roofline counts each byte once per call, so there is no intra-call reuse to justify it and its only
effect is surviving the flush (the seeds' Qwen paged-attention cell: KV loads marked evict_last
"to resist the harness flush", near-L2 bandwidth against an HBM roofline). In a compute-regime
problem (GEMM tiles re-read across CTAs) it needs the l2_policy probe. ``evict_first`` /
``evict_normal`` / streaming hints (``__ldcs``) are the benign direction and are not flagged.

Bad::

    attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    k = tl.load(k_ptrs, eviction_policy="evict_last")    # paged-attention KV, read once

Good::

    k = tl.load(k_ptrs, eviction_policy="evict_first")   # streaming KV
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _support as S

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
    r"(cudaLimitPersistingL2CacheSize|cudaAccessPropertyPersisting|accessPolicyWindow|cudaStreamAttributeAccessPolicyWindow"
    r"|cudaKernelNodeAttributeAccessPolicyWindow|cudaLaunchAttributeAccessPolicyWindow)"
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
            if ld.eviction_param:  # policy passed in at launch: every value any launch can pass
                for mod, caller, _call, arg in sub.launch_args(k.func, ld.eviction_param):
                    policies |= sub.possible_strings(arg, mod.scope(caller))
            if "evict_last" in policies:
                eff, sev, why = evict_last_effect()
                out.append(
                    S.py_finding(
                        RULE,
                        k.func.module,
                        ld.node,
                        f"{k.func.name} loads with eviction_policy='evict_last'"
                        + (f" (passed in as {ld.eviction_param})" if ld.eviction_param else "")
                        + f". {why}",
                        effect=eff,
                        severity=sev,
                        data={"topic": "l2_policy", "mechanism": "triton_evict_last", "regime": regime or None},
                    )
                )
    for src in sub.native:
        if not src.loaded:
            continue
        for tl, _, m in src.find(_PERSIST):
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
        for tl, _, m in src.find(_EVICT_LAST):
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
    # Python-side (ctypes / cuda-python) persisting limits
    for module, _func, call, q in sub.iter_calls():
        text = q or ""
        if text.endswith(("cudaDeviceSetLimit", "cudaStreamSetAttribute", "cuCtxSetLimit", "cuStreamSetAttribute")):
            args = " ".join(module.segment(a) for a in call.args)
            if "Persisting" in args or "AccessPolicy" in args or "0x06" in args:
                out.append(
                    S.py_finding(
                        RULE,
                        module,
                        call,
                        f"{text} sets a persisting L2 limit/window from Python: the benchmark's flush cannot evict it.",
                        effect=Effect.DECISIVE_HACK,
                        severity=Severity.CRITICAL,
                        data={"topic": "l2_policy", "mechanism": "persisting_window"},
                    )
                )
    return S.dedupe(out)
