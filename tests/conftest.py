"""Root test configuration: GPU tests skip where no CUDA device exists (never faked)."""

from __future__ import annotations

import pytest


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run scripts/gpu_lane.sh on the H200")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
