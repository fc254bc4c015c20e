"""KA314 wrong-hardware-sku: the run was measured on a GPU the deck does not target.

What it flags: the measured GPU (result.json regrade.gpu_name, legacy gpu_name, gpu_name, as
ParsedRun.hardware records it) mapped to a SKU (graders.roofline.detect_sku) that is not one of
the deck's target SKUs (problem.yaml `hardware:` when present, else the known deck table: the
bundled `hard` deck targets H100 PCIe / H100 SXM / H200) -> ADVISORY with
data["measurement_status"] = "wrong_hardware_sku".

Why it matters: "A figure measured on one SKU but graded against another is not comparable"
(spec). A B200 fraction ranked beside H100 fractions misleads every comparison.

Bad: an 01_fp8_gemm run of the hard deck with gpu_name "NVIDIA B200".
Good: the same run with gpu_name "NVIDIA H100 PCIe".
"""

from __future__ import annotations

from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from graders.roofline import HARDWARE, detect_sku

RULE = RuleMeta(
    id="KA314",
    name="wrong-hardware-sku",
    kind=RuleKind.LOG,
    severity=Severity.MEDIUM,
    effect=Effect.ADVISORY,
    summary="Measured GPU SKU differs from the deck's target hardware: the figure is not comparable.",
)

DECK_TARGETS: dict[str, tuple[str, ...]] = {
    "hard": ("H100 PCIe", "H100 SXM", "H200"),
}


def deck_targets(deck: str | None, raw: dict[str, object] | None) -> tuple[str, ...]:
    declared = (raw or {}).get("hardware")
    names: list[str] = []
    if isinstance(declared, str):
        names = [declared]
    elif isinstance(declared, list):
        names = [str(x) for x in declared]
    skus = tuple(s for n in names if (s := detect_sku(n) or (n if n in HARDWARE else None)))
    if skus:
        return skus
    if deck and deck in DECK_TARGETS:
        return DECK_TARGETS[deck]
    low = (deck or "").lower()
    for sku in HARDWARE:
        if sku.lower().replace(" ", "") in low.replace("_", "").replace("-", ""):
            return (sku,)
    return ()


def check(ctx: AuditContext) -> Iterable[Finding]:
    measured = ctx.run.hardware
    if not measured:
        return []
    sku = detect_sku(measured)
    deck = ctx.problem.deck if ctx.problem else (ctx.run.template.deck if ctx.run.template else None)
    targets = deck_targets(deck, ctx.problem.raw if ctx.problem else None)
    if not targets or sku in targets:
        return []
    if sku is None:
        return [Finding.of(
            RULE, file="result.json", line_start=None, quote=f"gpu_name: {measured}", severity=Severity.LOW,
            explanation=(f"measured on {measured}, which kaudit cannot map to a known SKU; the {deck or '?'} deck "
                         f"targets {', '.join(targets)}, so comparability is unknown"),
            data={"measurement_status": None, "measured": measured, "measured_sku": None,
                  "expected_skus": list(targets), "deck": deck})]
    return [Finding.of(
        RULE, file="result.json", line_start=None, quote=f"gpu_name: {measured}",
        explanation=(f"measured on {measured} ({sku or 'unknown SKU'}), but the {deck or '?'} deck targets "
                     f"{', '.join(targets)}: the figure is not comparable with the deck's other cells"),
        data={"measurement_status": "wrong_hardware_sku", "measured": measured, "measured_sku": sku,
              "expected_skus": list(targets), "deck": deck})]
