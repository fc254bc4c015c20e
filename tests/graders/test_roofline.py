from __future__ import annotations

import pytest

from graders.roofline import HARDWARE, detect_sku, shape_fraction


@pytest.mark.parametrize(
    ("name", "sku"),
    [
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 SXM5 80GB", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA B200", "B200"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000"),
        ("NVIDIA A100-SXM4-80GB", None),
        (None, None),
    ],
)
def test_detect_sku(name: str | None, sku: str | None) -> None:
    assert detect_sku(name) == sku


def test_table_matches_spec_peaks() -> None:
    assert HARDWARE["H200"].tflops["fp8"] == 1979.0 and HARDWARE["H200"].gbps == 4800.0
    assert HARDWARE["H100 SXM"].tflops["bf16"] == 989.5 and HARDWARE["H100 SXM"].gbps == 3350.0
    assert HARDWARE["H100 PCIe"].tflops["fp8"] == 1513.0 and HARDWARE["H100 PCIe"].gbps == 2039.0
    assert HARDWARE["B200"].tflops["bf16"] == 2250.0 and HARDWARE["B200"].gbps == 8000.0
    assert HARDWARE["RTX PRO 6000"].tflops["fp32"] == 125.0 and HARDWARE["RTX PRO 6000"].gbps == 1800.0


def test_compute_fraction() -> None:
    flops = 2 * 4096**3
    fr = shape_fraction(regime="compute", precision="fp8", flops=flops, nbytes=3 * 4096**2, ms=0.2, sku="H200")
    assert fr.tflops == pytest.approx(flops / 0.2e-3 / 1e12)
    assert fr.fraction == pytest.approx(fr.tflops / 1979.0)
    assert fr.plausible


def test_memory_fraction_and_same_time_differs_by_sku() -> None:
    nbytes = 4.8e9  # exactly H200 peak bandwidth (4800 GB/s) over 1 ms
    h200 = shape_fraction(regime="memory", precision="fp32", flops=0, nbytes=nbytes, ms=1.0, sku="H200")
    h100 = shape_fraction(regime="memory", precision="fp32", flops=0, nbytes=nbytes, ms=1.0, sku="H100 SXM")
    assert h200.fraction == pytest.approx(1.0) and h200.plausible
    assert h100.fraction == pytest.approx(4800 / 3350) and not h100.plausible  # impossible on an H100


def test_implausible_when_faster_than_roofline() -> None:
    flops = 2 * 4096**3  # 137 GFLOP: at 1979 TFLOPS needs >= 69 us
    fr = shape_fraction(regime="compute", precision="fp8", flops=flops, nbytes=1.0, ms=0.01, sku="H200")
    assert not fr.plausible and fr.roofline_fraction is not None and fr.roofline_fraction > 1.0
    assert "roofline" in (fr.reason or "")


def test_unknown_sku_gets_no_fraction() -> None:
    fr = shape_fraction(regime="compute", precision="bf16", flops=1e12, nbytes=1e9, ms=1.0, sku=None)
    assert fr.fraction is None and "unknown GPU SKU" in (fr.reason or "")
    missing = shape_fraction(regime="compute", precision="fp32", flops=1e12, nbytes=1e9, ms=1.0, sku="B200")
    assert missing.fraction is None and "no fp32 peak" in (missing.reason or "")
