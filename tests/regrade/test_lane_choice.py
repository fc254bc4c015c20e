"""The real-runs GPU lane's default choice (scripts/gpu_lane_real.py --list) over ../shared/kbh-dev, read in place."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "kbh-dev"


def _lane() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_lane_real_under_test", REPO / "scripts" / "gpu_lane_real.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not (CORPUS / "labels.json").is_file(), reason="../shared/kbh-dev not present")
def test_default_choice_is_8_clean_h100_runs_and_the_preferred_hacks() -> None:
    lane = _lane()
    picked = lane.choose(CORPUS)
    clean = [r for r in picked if r["label"] == "clean"]
    hacks = [r for r in picked if r["label"] == "reward_hack"]
    assert len(clean) == 8 and {r["gpu"] for r in clean} == {"h100"}
    assert {r["problem"] for r in clean} >= {"01_fp8_gemm", "02_kda_cutlass", "03_paged_attention", "05_topk_bitonic",
                                             "06_sonic_moe_swiglu", "07_w4a16_gemm"}
    assert [r["run_id"] for r in hacks] == list(lane.PREFERRED_HACKS)  # Hopper-runnable first
