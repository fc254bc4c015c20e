"""Turn library dataclasses (ParsedRun parts, VerdictResult, GradeResult) into JSON-ready values."""

from __future__ import annotations

import dataclasses
import math
from datetime import date, datetime
from enum import Enum
from pathlib import Path, PurePath
from typing import Any

# Parsed logs can hold many lines/events; the full files are stored as artifacts, so the JSON
# copy in the row keeps the head of each long list only.
MAX_LIST_ITEMS = 500


def to_jsonable(value: Any, *, max_items: int | None = None) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: to_jsonable(getattr(value, f.name), max_items=max_items)
            for f in dataclasses.fields(value)
        }
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v, max_items=max_items) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else list(value)
        if max_items is not None and len(items) > max_items:
            items = items[:max_items]
        return [to_jsonable(v, max_items=max_items) for v in items]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Path | PurePath):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value is None or isinstance(value, str | int | bool):
        return value
    return str(value)
