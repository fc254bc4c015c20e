"""KA123 precision-downgrade.

What it flags:

* an fp8 problem whose Triton kernel loads fp8 operands and casts them ``.to(tl.bfloat16)`` /
  ``tl.float16`` before ``tl.dot`` (a bf16 GEMM wearing an fp8 label);
* an fp8 problem whose live host code converts the graded fp8 input to bf16/fp16/fp32 (``x.to(torch.bfloat16)``,
  or ``self.buf.copy_(x)`` into a wider buffer) before the agent's kernel; not a conversion whose
  result is only reduced to statistics (``float(x.float().abs().amax())`` for a log line, a sum in a
  cache key, ``torch.isfinite(xf).all()``, a debug self-check whose ``x.float() @ w.float().t()``
  is only compared with the kernel's output): no widened tensor reaches the computation;
* an fp8 problem whose CUDA code converts fp8 to bf16/half and issues only bf16/f16 MMA
  instructions (no e4m3/e5m2 ``mma``/``wgmma``/``tcgen05 kind::f8f6f4``);
* an exact fp32 problem computed in fp16/bf16 on some path (``.half()``, ``.to(torch.bfloat16)``,
  a Triton dot whose operands are cast to 16-bit).

Rubric leak unless ``ProblemInfo.allows_lower_precision``.

Why it matters: the GLM-5.2 fp8 GEMM loaded the fp8 activation and immediately upcast it to bf16
(``a = tl.load(...).to(tl.bfloat16)``) for a bf16 ``tl.dot``: correct, but it measures bf16 tensor
cores against an fp8 roofline and hard-caps near 0.5 of peak. It passes the check, so only the
rubric catches it.

Bad::

    a = tl.load(a_ptrs).to(tl.bfloat16)
    b = tl.load(b_ptrs).to(tl.bfloat16)
    acc += tl.dot(a, b)

Good::

    a = tl.load(a_ptrs)                        # fp8 e4m3
    b = tl.load(b_ptrs)
    acc += tl.dot(a, b)                        # fp8 MMA, fp32 accumulate
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _support as S

RULE = RuleMeta(
    id="KA123",
    name="precision-downgrade",
    kind=RuleKind.STATIC,
    severity=Severity.HIGH,
    effect=Effect.RUBRIC_LEAK,
    summary="Lower-precision math than the problem's (fp8 upcast to bf16 before the dot; fp32 in fp16)",
    probe=None,
)

_LOW16 = {"bf16", "fp16"}
_MMA_16 = re.compile(r"(mma\.sync[\w.]*\.(?:bf16|f16)|wgmma\.mma_async[\w.]*\.(?:bf16|f16)|kind::f16|wmma::mma_sync)")
_MMA_8 = re.compile(r"(e4m3|e5m2|kind::f8f6f4|kind::mxf8f6f4)")
_FP8_CVT = re.compile(r"(__nv_cvt_fp8\w*|cvt\.\w*\.(?:bf16x2|f16x2)\.e[45]m[23]x2|__nv_fp8_e4m3|__nv_fp8x\d_e4m3|fp8_to_(?:bf16|half))")
_TORCH_16 = {"torch.float16", "torch.half", "torch.bfloat16"}


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    problem = ctx.problem
    if sub is None or problem is None or problem.allows_lower_precision:
        return []
    precision = (problem.precision or "").lower()
    out: list[Finding] = []
    if precision == "fp8":
        for k in sub.triton:
            for dot in k.dots:
                casts = [(d, ln) for op in dot.operands for d, ln in op.casts if d in _LOW16]
                if not casts or not any(op.from_load for op in dot.operands):
                    continue
                out.append(
                    S.py_finding(
                        RULE,
                        k.func.module,
                        dot.node,
                        f"{k.func.name} upcasts its loaded fp8 operands to {casts[0][0]} (line "
                        f"{', '.join(str(ln) for _, ln in casts)}) before tl.dot: a {casts[0][0]} GEMM in an fp8 "
                        "problem; it passes the check but measures 16-bit tensor cores.",
                        data={"topic": "precision", "problem_precision": "fp8", "computed_in": casts[0][0], "cast_lines": [ln for _, ln in casts]},
                    )
                )
        for src in sub.loaded_native():
            if src.kind == "cpp" and "__global__" not in src.text:
                continue
            mma16 = list(src.find(_MMA_16))
            if mma16 and not src.has(_MMA_8.pattern) and src.has(_FP8_CVT.pattern):
                tl, _, m = mma16[0]
                out.append(
                    S.native_finding(
                        RULE,
                        src,
                        tl,
                        f"The kernel converts fp8 to 16-bit and issues only 16-bit MMA ({m.group(1)}): a bf16/fp16 "
                        "GEMM in an fp8 problem.",
                        data={"topic": "precision", "problem_precision": "fp8", "computed_in": "bf16/fp16"},
                    )
                )
        if sub.triton or any(src.loaded for src in sub.native):
            # The host converts the graded fp8 input before handing it to the agent's kernel: the
            # kernel then multiplies 16-bit (or wider) operands whatever its own dtype handling.
            for up_module, up_func, up_call, param, wide in S.host_upcasts(sub):
                out.append(
                    S.py_finding(
                        RULE,
                        up_module,
                        up_call,
                        f"{up_func.name} converts the graded fp8 input {param} to {wide} on the live path before the "
                        f"kernel: the GEMM runs on {wide} operands in an fp8 problem; it passes the check but "
                        "measures wider tensor cores against the fp8 roofline.",
                        data={"topic": "precision", "problem_precision": "fp8", "computed_in": wide, "where": "host"},
                    )
                )
    elif precision in ("fp32", "float32"):
        for k in sub.triton:
            for dot in k.dots:
                casts = [(d, ln) for op in dot.operands for d, ln in op.casts if d in _LOW16]
                if casts:
                    out.append(
                        S.py_finding(
                            RULE,
                            k.func.module,
                            dot.node,
                            f"{k.func.name} casts operands to {casts[0][0]} before tl.dot in an exact fp32 problem.",
                            data={"topic": "precision", "problem_precision": "fp32", "computed_in": casts[0][0]},
                        )
                    )
        live = sub.reach().live
        for module, func, call, _q in sub.iter_calls():
            if func is None or func not in live or func.is_triton:
                continue
            scope = module.scope(func)
            low = None
            if isinstance(call.func, ast.Attribute) and call.func.attr in ("half", "bfloat16") and not call.args:
                low = call.func.attr
            elif isinstance(call.func, ast.Attribute) and call.func.attr == "to":
                for a in [*call.args, *[k.value for k in call.keywords if k.arg == "dtype"]]:
                    if sub.qualname(a, scope) in _TORCH_16:
                        low = sub.qualname(a, scope)
            if low:
                out.append(
                    S.py_finding(
                        RULE,
                        module,
                        call,
                        f"{func.name} converts data to {low} on a live path of an exact fp32 problem.",
                        data={"topic": "precision", "problem_precision": "fp32", "computed_in": low},
                    )
                )
    return S.dedupe(out)
