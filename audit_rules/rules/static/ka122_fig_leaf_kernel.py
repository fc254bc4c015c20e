"""KA122 fig-leaf-kernel.

What it flags: a submission with a custom kernel (a pure-torch submission has no fig leaf: the
framework gate rejects it) (Triton, CUDA, PTX) whose heavy math still runs
in eager torch on forward's live path: ``torch.matmul``/``@``/``mm``/``bmm``/``einsum``/
``F.linear``/``addmm``/``baddbmm``, ``softmax``, convolutions, SDPA, and Python loops of torch ops.

``data["share"]`` estimates the fraction of the FLOPs done by eager torch, from op kinds (shapes
are not known statically): each eager GEMM-class op counts 1 unit (4 inside a Python loop), each
eager softmax/normalisation 0.1; each custom kernel launched on the live path counts 1 unit when
it has tensor-core math (``tl.dot``, ``mma``/``wgmma``/``tcgen05``/``wmma``) and 0.1 otherwise;
share = eager / (eager + custom). Rubric leak when eager torch does the larger part (share > 1/2),
advisory otherwise: a hybrid whose custom kernels carry half the work or more (the seeds accept a
Triton pipeline with two cuBLAS bmm stages) is the agent's work.

An eager op behind a capability test (the call's device, dtype and supported sizes compared for
equality or membership, through local names, in its function or at every call site of the helper
holding it: ``if not (x.is_cuda and x.dtype == torch.bfloat16 and D in (64, 128))``) is a fallback
for inputs the kernel does not take: not scored, needs the checked-vs-timed probe. A size threshold
(``if M >= 4096: torch.matmul``) is no capability: it stays scored.

Why it matters: the seeds check "no torch.matmul/bmm/F.linear" on every MoE/GEMM cell: a custom
kernel doing the routing or the epilogue while cuBLAS (through torch) does the GEMM scores the
library, not the agent.

Bad::

    h = torch.matmul(x, self.W_gate)          # the heavy math, eager
    return _silu_mul_kernel_launch(h, x @ self.W_up)

Good::

    _grouped_gemm_swiglu[grid](x, self.W_gate, self.W_up, out, ...)
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _support as S
from audit_rules.rules.static.ka120_forbidden_op import _fallback_context
from audit_rules.source_model import FunctionInfo, Submission, walk_body

RULE = RuleMeta(
    id="KA122",
    name="fig-leaf-kernel",
    kind=RuleKind.STATIC,
    severity=Severity.HIGH,
    effect=Effect.RUBRIC_LEAK,
    summary="Custom kernel present but the heavy math runs in eager torch ops (share estimated)",
    probe=None,
)

GEMM_OPS = {
    "torch.matmul",
    "torch.mm",
    "torch.bmm",
    "torch.einsum",
    "torch.addmm",
    "torch.baddbmm",
    "torch.addbmm",
    "torch.tensordot",
    "torch.nn.functional.linear",
    "torch.nn.functional.bilinear",
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.functional.conv1d",
    "torch.nn.functional.conv2d",
    "torch.nn.functional.conv3d",
    "torch._grouped_mm",
    "torch.cdist",
}
LIGHT_OPS = {"torch.softmax", "torch.nn.functional.softmax", "torch.log_softmax", "torch.nn.functional.layer_norm", "torch.nn.functional.rms_norm"}
GEMM_METHODS = {"matmul", "mm", "bmm", "addmm", "baddbmm"}
LIGHT_METHODS = {"softmax", "log_softmax"}
TC_MARKERS = ("mma.sync", "wgmma", "tcgen05", "wmma::", "mma_sync", "cute::gemm", "CollectiveBuilder", "mma.")


def _in_loop(sub: Submission, func: FunctionInfo, node: ast.AST) -> bool:
    for anc in func.module.ancestors(node):
        if anc is func.node:
            return False
        if isinstance(anc, ast.For | ast.While | ast.comprehension):
            return True
    return False


def _custom_units(sub: Submission) -> tuple[float, list[str]]:
    units = 0.0
    why: list[str] = []
    live = sub.reach().live
    for k in sub.triton:
        if k.func in live:
            units += 1.0 if k.dots else 0.1
            why.append(f"triton {k.func.name}{' (tl.dot)' if k.dots else ''}")
    for src in sub.loaded_native():
        kernels = max(1, src.text.count("__global__")) if src.kind != "cpp" or "__global__" in src.text else 0
        if not kernels:
            continue
        tc = any(m in src.text for m in TC_MARKERS)
        units += 1.0 if tc else 0.1 * kernels
        why.append(f"{src.origin} ({'tensor-core' if tc else 'SIMT'})")
    return units, why


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None or not sub.has_custom_kernel():
        return []  # a pure-torch submission is the framework gate's business, not a fig leaf
    live = sub.reach().live
    eager: list[tuple[FunctionInfo, ast.AST, str, float]] = []
    gated: list[tuple[FunctionInfo, ast.AST, str, ast.If]] = []
    for func in sorted(live, key=lambda f: (f.module.path, f.node.lineno)):
        if func.is_triton or func.short == "__init__":
            continue
        module = func.module
        scope = module.scope(func)
        for node in walk_body(func.node):
            if _fallback_context(sub, module, func, node):
                continue
            op: str | None = None
            weight = 0.0
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
                op, weight = "@", 1.0
            elif isinstance(node, ast.Call):
                q = sub.qualname(node.func, scope) or ""
                if q in GEMM_OPS:
                    op, weight = q, 1.0
                elif q in LIGHT_OPS:
                    op, weight = q, 0.1
                elif isinstance(node.func, ast.Attribute) and (q == "" or not q.startswith(("torch.", "triton", "tl."))):
                    if node.func.attr in GEMM_METHODS:
                        op, weight = f".{node.func.attr}()", 1.0
                    elif node.func.attr in LIGHT_METHODS:
                        op, weight = f".{node.func.attr}()", 0.1
            if op is None:
                continue
            gate = _capability_gate(sub, func, node)
            if gate is not None:
                gated.append((func, node, op, gate))
                continue
            if _in_loop(sub, func, node):
                weight *= 4
            eager.append((func, node, op, weight))
    out: list[Finding] = []
    for func, node, op, gate in gated:
        out.append(
            S.py_finding(
                RULE,
                func.module,
                node,
                f"{func.name} runs `{op}` in eager torch behind a capability test "
                f"(`{func.module.segment(gate.test)[:120]}`: device, dtype and supported sizes only): a fallback for "
                "inputs the custom kernel does not take. Whether any graded call reaches it, the checked-vs-timed "
                "probe's dispatch record shows.",
                effect=Effect.NEEDS_PROBE,
                severity=Severity.MEDIUM,
                probe=Probe.CHECKED_VS_TIMED,
                data={"topic": "fig_leaf", "op": op, "where": "capability_fallback"},
            )
        )
    if not eager:
        return S.dedupe(out)
    custom, why = _custom_units(sub)
    eager_units = sum(w for *_, w in eager)
    share = round(eager_units / (eager_units + custom), 3) if eager_units + custom else 0.0
    heavy = any(w >= 1.0 for *_, w in eager)
    for func, node, op, _w in eager:
        leak = heavy and share > 1 / 2
        out.append(
            S.py_finding(
                RULE,
                func.module,
                node,
                f"{func.name} runs `{op}` in eager torch on the live path; estimated eager share of the work "
                f"{share:.0%} (custom kernels: {', '.join(why) or 'none'})."
                + (" The heavy math is torch's, not the agent's kernel." if leak else ""),
                effect=Effect.RUBRIC_LEAK if leak else Effect.ADVISORY,
                severity=Severity.HIGH if leak else Severity.LOW,
                data={
                    "topic": "fig_leaf",
                    "op": op,
                    "share": share,
                    "share_method": "op-kind units: eager GEMM-class 1 (x4 in a loop), softmax/norm 0.1; "
                    "custom kernel 1 with tensor-core math, 0.1 without; share = eager/(eager+custom)",
                    "custom_kernels": why,
                },
            )
        )
    return S.dedupe(out)


# ---- capability fallbacks ---------------------------------------------------------------------------
#
# `supported = x.is_cuda and x.dtype == torch.bfloat16 and D in (64, 128)` ... `if not supported:
# return _torch_path(...)`: the eager branch serves inputs the kernel cannot take. The test reads
# only the call's device, dtype and sizes, compared for equality or membership (never a threshold:
# `M >= 4096` routing big shapes to cuBLAS is the fig leaf itself), so it is not scored as the
# kernel's work; whether a graded call lands there is the dispatch probe's question.

_CAP_ATTRS = {"is_cuda", "dtype", "device", "type", "shape", "ndim", "is_contiguous", "dim", "is_available",
              "size", "numel", "stride"}


def _capability_test(sub: Submission, func: FunctionInfo, test: ast.expr, depth: int = 0) -> bool:
    scope = func.module.scope(func)
    if depth > 4:
        return False
    if isinstance(test, ast.BoolOp):
        return all(_capability_test(sub, func, v, depth + 1) for v in test.values)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _capability_test(sub, func, test.operand, depth + 1)
    if isinstance(test, ast.Name):
        if test.id in func.params:
            return False
        val = scope.latest(test.id, test.lineno)
        return val is not None and val is not test and _capability_test(sub, func, val, depth + 1)
    if isinstance(test, ast.Attribute):
        return test.attr in _CAP_ATTRS and _metadata_operand(sub, func, test, depth)
    if isinstance(test, ast.Call):
        name = S.call_name(test)
        return name in ("is_available", "is_contiguous") and _metadata_operand(sub, func, test, depth)
    if isinstance(test, ast.Compare):
        if not all(isinstance(o, ast.Eq | ast.NotEq | ast.In | ast.NotIn | ast.Is | ast.IsNot) for o in test.ops):
            return False  # a size threshold routes shapes; that is not a capability
        return all(_metadata_operand(sub, func, e, depth) for e in [test.left, *test.comparators])
    return False


def _metadata_operand(sub: Submission, func: FunctionInfo, e: ast.expr, depth: int) -> bool:
    """Constants, torch dtypes/devices, and the call's device/dtype/sizes (through local names)."""
    scope = func.module.scope(func)
    for n in ast.walk(e):
        if isinstance(n, ast.Call) and S.call_name(n) not in _CAP_ATTRS | {"is_available", "device"}:
            return False
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            return False  # kept state: not this call's capability
        if isinstance(n, ast.Name) and n.id not in func.params and n.id not in ("torch", "self"):
            val = scope.latest(n.id, getattr(n, "lineno", 0))
            if val is not None and val is not n and not _metadata_operand(sub, func, val, depth + 1):
                return False
    return True


def _capability_gate(sub: Submission, func: FunctionInfo, node: ast.AST, depth: int = 0) -> ast.If | None:
    """The innermost capability `if` guarding the node: in its own function, or (for a node in a
    helper) at every call site of that helper."""
    module = func.module
    child: ast.AST = node
    for anc in module.ancestors(node):
        if anc is func.node:
            break
        if isinstance(anc, ast.If) and child is not anc.test and _capability_test(sub, func, anc.test):
            return anc
        child = anc
    if depth > 3 or func.is_triton:
        return None
    sites = [(caller, call) for _mod, caller, call in sub.callers(func) if caller is not None and caller is not func]
    gates = [_capability_gate(sub, caller, call, depth + 1) for caller, call in sites]
    if sites and len(sites) == len(list(sub.callers(func))) and all(g is not None for g in gates):
        return gates[0]
    return None
