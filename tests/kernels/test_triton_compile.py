"""The genuine Triton examples compile for Hopper (sm_90) on a CPU-only machine.

The interpreter runs kernels through numpy and accepts code the compiler rejects (a non-constexpr
global, an unsupported dtype mix); compiling to PTX/cubin with the wheel's ptxas catches that
without a GPU, and the PTX shows the tensor-core path is the one taken (fp8 wgmma, bf16 mma).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("compile_sm90.py")


@pytest.fixture(scope="module")
def report() -> dict[str, dict[str, bool]]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert isinstance(data, dict)
    return data


def test_fp8_gemm_compiles_to_fp8_wgmma(report: dict[str, dict[str, bool]]) -> None:
    assert report["01_fp8_gemm"] == {"fp8_wgmma": True}


def test_topk_kernels_compile(report: dict[str, dict[str, bool]]) -> None:
    assert report["05_topk_bitonic"] == {"chunk": True, "merge": True}


def test_w4a16_compiles_to_bf16_mma(report: dict[str, dict[str, bool]]) -> None:
    assert report["07_w4a16_gemm"] == {"bf16_mma": True}
