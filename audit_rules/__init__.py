"""kaudit's audit library: one module per rule, an engine that runs them, and verdict synthesis."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from audit_rules.base import RuleMeta


def catalogue() -> list[RuleMeta]:
    """Every registered rule's metadata, ordered by id (`GET /rules`)."""
    from audit_rules.registry import catalogue as _catalogue

    return _catalogue()


def kaudit_version() -> str:
    try:
        from importlib.metadata import version

        return version("kaudit")
    except Exception:
        return "0.1.0"
