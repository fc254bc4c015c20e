"""Root test configuration: GPU tests skip where no CUDA device exists (never faked); a test
marked `backends(...)` runs only on the database backends it names."""

from __future__ import annotations

import pytest


def _cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def _backend_deselected(item: pytest.Item) -> bool:
    """A `backends("postgresql")` test collected for another value of the session's `database_url`
    parameter (tests/service/conftest.py): an end-to-end regrade whose database work the lighter
    tests already cover on both backends runs once, not twice."""
    mark = item.get_closest_marker("backends")
    params = getattr(getattr(item, "callspec", None), "params", {})
    return mark is not None and "database_url" in params and params["database_url"] not in mark.args


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    dropped = [item for item in items if _backend_deselected(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        gone = {id(item) for item in dropped}
        items[:] = [item for item in items if id(item) not in gone]
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run scripts/gpu_lane.sh on the H200")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
