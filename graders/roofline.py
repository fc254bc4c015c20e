"""Hardware peaks, SKU detection from the GPU name, and the per-shape roofline fraction.

Peaks are DENSE tensor-core TFLOPS (NVIDIA datasheets quote sparse figures at 2x; we halve them)
and HBM/GDDR bandwidth in GB/s (10^9 bytes/s). A figure measured on one SKU is never scored
against another's table: an unknown SKU gets no fraction (and says why), never a guessed one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Hardware:
    sku: str
    tflops: dict[str, float]  # dense, per precision: fp8 | bf16 | fp16 | tf32 | fp32
    gbps: float
    source: str
    notes: tuple[str, ...] = field(default_factory=tuple)


HARDWARE: dict[str, Hardware] = {
    # NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe column): FP8 3,026 / BF16 1,513 /
    # TF32 756 TFLOPS with sparsity -> dense halves; FP32 51 TFLOPS; HBM2e 2.0 TB/s (2039 GB/s).
    "H100 PCIe": Hardware(
        "H100 PCIe",
        {"fp8": 1513.0, "bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0},
        2039.0,
        "NVIDIA H100 datasheet, PCIe column (sparse/2)",
    ),
    # Same datasheet, SXM5 column: FP8 3,958 / BF16 1,979 / TF32 989 sparse; FP32 67; HBM3 3.35 TB/s.
    "H100 SXM": Hardware(
        "H100 SXM",
        {"fp8": 1979.0, "bf16": 989.5, "fp16": 989.5, "tf32": 494.7, "fp32": 67.0},
        3350.0,
        "NVIDIA H100 datasheet, SXM5 column (sparse/2)",
    ),
    # NVIDIA H200 datasheet (SXM): same GH100 SM and clocks as H100 SXM -> same tensor peaks;
    # HBM3e 4.8 TB/s, 141 GB.
    "H200": Hardware(
        "H200",
        {"fp8": 1979.0, "bf16": 989.5, "fp16": 989.5, "tf32": 494.7, "fp32": 67.0},
        4800.0,
        "NVIDIA H200 datasheet (SXM); tensor peaks as H100 SXM (same SM)",
    ),
    # NVIDIA B200 (HGX B200 per-GPU): FP8 9 PF sparse -> 4.5 dense, BF16 4.5 PF sparse -> 2.25,
    # TF32 2.2 PF sparse -> 1.1 dense; HBM3e 8 TB/s. FP32 not published per GPU consistently: absent.
    "B200": Hardware(
        "B200",
        {"fp8": 4500.0, "bf16": 2250.0, "fp16": 2250.0, "tf32": 1100.0},
        8000.0,
        "NVIDIA HGX B200 datasheet, per GPU (sparse/2)",
    ),
    # NVIDIA RTX PRO 6000 Blackwell (Server/Workstation) datasheet: FP8 ~2 PF sparse -> 1000
    # dense (fp32 accumulate), BF16 500, FP32 125 (non-tensor); GDDR7 1.8 TB/s. TF32 not listed: absent.
    "RTX PRO 6000": Hardware(
        "RTX PRO 6000",
        {"fp8": 1000.0, "bf16": 500.0, "fp16": 500.0, "fp32": 125.0},
        1800.0,
        "NVIDIA RTX PRO 6000 Blackwell datasheet (sparse/2)",
    ),
}


def detect_sku(gpu_name: str | None) -> str | None:
    """Map a CUDA device name to a HARDWARE key; None when unknown (never a guess).

    "NVIDIA H200" -> H200 (the SXM part the table has); "NVIDIA H100 PCIe" -> H100 PCIe;
    "NVIDIA H100 80GB HBM3" / "H100 SXM5" -> H100 SXM; NVL parts (H100 NVL, H200 NVL) -> None:
    different clocks, power and bandwidth, and no row of their own.
    """
    if not gpu_name:
        return None
    n = gpu_name.upper().replace("-", " ")
    if "H200" in n:
        return None if "NVL" in n else "H200"
    if "H100" in n:
        if "NVL" in n:
            return None
        if "PCIE" in n:
            return "H100 PCIe"
        if "SXM" in n or "HBM3" in n:
            return "H100 SXM"
        return None
    if "B200" in n:
        return "B200"
    if "RTX PRO 6000" in n:
        return "RTX PRO 6000"
    return None


@dataclass(frozen=True)
class ShapeFraction:
    tflops: float
    gbps: float
    fraction: float | None
    roofline_fraction: float | None  # achieved / min(compute, bandwidth) bound: > 1.0 is impossible
    plausible: bool
    reason: str | None  # why fraction is None, or why implausible


def shape_fraction(
    *, regime: str, precision: str, flops: float, nbytes: float, ms: float, sku: str | None
) -> ShapeFraction:
    """Fraction of the SKU's peak for one shape.

    compute regime: achieved TFLOPS / dense peak at the problem's precision;
    memory regime: achieved GB/s / peak bandwidth.
    Plausibility: the fastest physically possible time is max(flops/peak_flops, bytes/peak_bw);
    a measurement faster than that (roofline_fraction > 1.0) means skipped work or a cached output.
    """
    seconds = ms / 1e3
    tflops = flops / seconds / 1e12 if seconds > 0 else math.inf
    gbps = nbytes / seconds / 1e9 if seconds > 0 else math.inf
    if sku is None or sku not in HARDWARE:
        return ShapeFraction(tflops, gbps, None, None, True, f"unknown GPU SKU {sku!r}: no peak table")
    hw = HARDWARE[sku]
    peak_tflops = hw.tflops.get(precision)
    fraction: float | None
    reason: str | None = None
    if regime == "memory":
        fraction = gbps / hw.gbps
    elif peak_tflops is None:
        fraction = None
        reason = f"{sku} has no {precision} peak in the table"
    else:
        fraction = tflops / peak_tflops
    # The physical bound uses the fastest precision the SKU has when the problem's is missing.
    best = peak_tflops if peak_tflops is not None else max(hw.tflops.values())
    t_min = max(flops / (best * 1e12), nbytes / (hw.gbps * 1e9))
    roof = (t_min / seconds) if seconds > 0 else math.inf
    plausible = roof <= 1.0
    if not plausible:
        reason = f"faster than the {sku} roofline allows ({roof:.2f}x the bound)"
    return ShapeFraction(tflops, gbps, fraction, roof, plausible, reason)


def deck_fraction(fr: ShapeFraction, *, regime: str, peak_tflops: float | None,
                  peak_gbps: float | None) -> ShapeFraction:
    """`fr` scored against a deck's own peak table (a KBH benchmark.py's rule: memory regime ->
    GB/s / peak_bandwidth_gb_s, else TFLOPS / peak_tflops_dense[peak_tflops_key], clamped at 0)."""
    peak = peak_gbps if regime == "memory" else peak_tflops
    achieved = fr.gbps if regime == "memory" else fr.tflops
    if not peak or peak <= 0:
        return fr
    return ShapeFraction(fr.tflops, fr.gbps, max(0.0, achieved / peak), fr.roofline_fraction, fr.plausible,
                         fr.reason)
