"""KA121 library-laundering.

What it flags: the problem's math handed to a library the forbidden list does not name:

* ATen compute from inside an extension (``at::matmul``/``at::mm``/``at::bmm``/``at::linear``/
  ``at::addmm``/``at::einsum``, ``torch::`` spellings);
* vendor BLAS/DNN calls (``cublasGemmEx``, ``cublasLtMatmul``, ``cublas*gemm*``, ``cudnn*``) in
  extensions or through ``ctypes``;
* ``torch.compile`` (the compiler writes the kernel, not the agent);
* library primitives that replace the asked algorithm: ``thrust::sort``/``cub::DeviceRadixSort``/
  ``cub::DeviceSegmentedSort`` in a top-k problem (``cub::Block*`` in-kernel primitives are advisory:
  the seeds accepted CUB BlockRadixSort inside a hand-written top-k kernel).

Effect: a vendor GEMM in a problem whose forbidden list names a torch GEMM op, ATen compute, or torch.compile is a
rubric leak (passes, but measures the library), unless problem.yaml allows the library
(``allowed_libraries``); elsewhere advisory. ``at::sort``/``at::topk`` in top-k are the forbidden
op itself (KA120).

Why it matters: KernelBench-Hard measures the agent's kernel. A cuBLAS call inside a C++ op
passes every language gate ("framework=cuda_raw") while the timed GEMM is NVIDIA's.

Bad::

    cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, CUDA_R_16BF, ...);

Good::

    gemm_kernel<<<grid, block, smem, stream>>>(x, w, out, M, N, K);
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.rules.static import _support as S

RULE = RuleMeta(
    id="KA121",
    name="library-laundering",
    kind=RuleKind.STATIC,
    severity=Severity.HIGH,
    effect=Effect.RUBRIC_LEAK,
    summary="Problem math done by a library the forbidden list does not name (cuBLAS, ATen, torch.compile)",
    probe=None,
)

_ATEN = re.compile(r"\b(?:at|torch)::(matmul|mm|bmm|linear|addmm|baddbmm|einsum|conv\w*|_grouped_mm|scaled_dot_product_attention|softmax)\s*\(")
_BLAS = re.compile(r"\b(cublasLt\w*Matmul\w*|cublas\w*[Gg]emm\w*|cudnn\w+)\s*\(")
_SORT = re.compile(r"\b(thrust::(?:sort|sort_by_key|stable_sort\w*)|cub::Device(?:Radix|Segmented|Merge)\w*::\w+)")
_BLOCK_PRIM = re.compile(r"\bcub::(Block|Warp)(RadixSort|MergeSort)\b")


_GEMM_OPS = re.compile(r"(?:^|\.)(?:matmul|mm|bmm|addmm|linear|_scaled_mm|einsum|gemm\w*|gemv\w*)$", re.I)


def _gemm_family(ctx: AuditContext) -> bool:
    """The deck forbids a torch GEMM op, so a vendor GEMM launders exactly what the list forbids.

    Decided from the problem's forbidden list, not its name: a deck that does not forbid library
    GEMMs (the seeds' CUDA-only MoE cells with cublasGemmEx were judged clean) stays advisory.
    """
    forbidden = ctx.problem.forbidden if ctx.problem else []
    return any(_GEMM_OPS.search(str(op).strip()) for op in forbidden)


def _allowed(ctx: AuditContext, lib: str) -> bool:
    raw = ctx.problem.raw if ctx.problem else {}
    allowed = raw.get("allowed_libraries") or raw.get("allows") or []
    return isinstance(allowed, list) and any(lib.lower().startswith(str(a).lower()) for a in allowed)


def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    pid = ctx.problem.problem_id if ctx.problem else ""
    gemm = _gemm_family(ctx)
    topk = "topk" in pid or "sort" in pid
    authored = S.authored_kernels(sub)
    out: list[Finding] = []
    for src in sub.loaded_native():
        for tl, _, m in src.find(_ATEN):
            out.append(
                S.native_finding(
                    RULE,
                    src,
                    tl,
                    f"at::{m.group(1)} runs the math through ATen from inside the extension: the timed work is "
                    "PyTorch's library kernel, not the agent's.",
                    data={"topic": "fig_leaf", "library": f"aten.{m.group(1)}"},
                )
            )
        for tl, _, m in src.find(_BLAS):
            name = m.group(1)
            if name.startswith("cublasCreate") or name.startswith("cublasSet") or name.startswith("cublasLtCreate"):
                continue
            lib = "cudnn" if name.startswith("cudnn") else "cublas"
            if _allowed(ctx, lib):
                continue
            leak = gemm and lib == "cublas" or lib == "cudnn" and bool(re.search(r"conv", pid))
            out.append(
                S.native_finding(
                    RULE,
                    src,
                    tl,
                    f"{name} hands the problem's GEMM to {lib}"
                    + (": the graded GEMM is the vendor's, not the agent's kernel." if leak else " (not the problem's core op)."),
                    effect=Effect.RUBRIC_LEAK if leak else Effect.ADVISORY,
                    severity=Severity.HIGH if leak else Severity.LOW,
                    data={"topic": "fig_leaf", "library": lib},
                )
            )
        if topk:
            for tl, _, m in src.find(_SORT):
                if authored:
                    # Part of a pipeline of the agent's own kernels; the forbidden list names torch/aten
                    # sorts only, and the decks' prompts invite reading library headers.
                    out.append(
                        S.native_finding(
                            RULE,
                            src,
                            tl,
                            f"{m.group(1)} is a device-wide library sort inside a submission with kernels of its own: "
                            "a library stage of the agent's pipeline (not on the forbidden list), noted for the record.",
                            effect=Effect.ADVISORY,
                            severity=Severity.LOW,
                            data={"topic": "fig_leaf", "library": m.group(1), "interesting": True},
                        )
                    )
                    continue
                out.append(
                    S.native_finding(
                        RULE,
                        src,
                        tl,
                        f"{m.group(1)} is a device-wide library sort replacing the selection the top-k problem asks "
                        "for: the submission has no kernel of its own, so the timed selection is the library's.",
                        data={"topic": "fig_leaf", "library": m.group(1)},
                    )
                )
            for tl, _, m in src.find(_BLOCK_PRIM):
                out.append(
                    S.native_finding(
                        RULE,
                        src,
                        tl,
                        f"cub::{m.group(1)}{m.group(2)} is an in-kernel primitive inside the agent's own kernel "
                        "(accepted by the seeds' auditors); noted for the record.",
                        effect=Effect.ADVISORY,
                        severity=Severity.INFO,
                        data={"topic": "fig_leaf", "library": f"cub.{m.group(1)}{m.group(2)}"},
                    )
                )
    for module, func, call, q in sub.iter_calls():
        if module.in_main_guard(call):
            continue
        if q in ("torch.compile", "torch._dynamo.optimize", "torch.jit.script", "torch.jit.trace") or (
            q or ""
        ).startswith("torch._inductor"):
            out.append(
                S.py_finding(
                    RULE,
                    module,
                    call,
                    f"{q} generates the kernel: the compiler's code is timed, not the agent's.",
                    data={"topic": "fig_leaf", "library": q, "where": sub.where(func)},
                )
            )
    # decorators @torch.compile
    for func in sub.functions():
        if any(d in ("torch.compile", "torch.jit.script") for d in func.decorators):
            out.append(
                S.py_finding(
                    RULE,
                    func.module,
                    func.node.decorator_list[0],
                    f"{func.name} is decorated with torch.compile: the compiler generates the kernel.",
                    data={"topic": "fig_leaf", "library": "torch.compile"},
                )
            )
    return S.dedupe(out)
