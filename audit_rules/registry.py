"""The one explicit registry of audit rules.

Each rule package (`audit_rules/rules/static`, `.transcript`, `.template_log`) lists its
modules in an explicit tuple `RULES`; this module concatenates the three tuples. Nothing is
discovered by scanning folders: a rule that is not listed does not run (the meta-test in
tests/audit_rules/test_registry.py fails when a module under audit_rules/rules/** is missing
here, so a forgotten registration cannot go unnoticed).
"""

from __future__ import annotations

from functools import cache
from types import ModuleType

from audit_rules.base import RuleKind, RuleMeta
from audit_rules.rules import static as _static
from audit_rules.rules import template_log as _template_log
from audit_rules.rules import transcript as _transcript

RULES: tuple[ModuleType, ...] = (*_static.RULES, *_transcript.RULES, *_template_log.RULES)

# Id ranges per kind (docs/CONTRACTS.md): static KA1xx, transcript KA2xx, template KA30x, logs KA31x+.
ID_RANGES: dict[RuleKind, tuple[int, int]] = {
    RuleKind.STATIC: (100, 199),
    RuleKind.TRANSCRIPT: (200, 299),
    RuleKind.TEMPLATE: (300, 309),
    RuleKind.LOG: (310, 399),
}


def meta_of(module: ModuleType) -> RuleMeta:
    meta = getattr(module, "RULE", None)
    if not isinstance(meta, RuleMeta):
        raise TypeError(f"rule module {module.__name__} has no RULE: RuleMeta")
    return meta


def all_rules() -> tuple[ModuleType, ...]:
    return RULES


@cache
def rules_by_id() -> dict[str, ModuleType]:
    return {meta_of(m).id: m for m in RULES}


def meta_by_id(rule_id: str) -> RuleMeta | None:
    module = rules_by_id().get(rule_id)
    return meta_of(module) if module is not None else None


def kind_of(rule_id: str) -> RuleKind | None:
    """Kind of a registered rule; falls back to the id range for unregistered ids."""
    meta = meta_by_id(rule_id)
    if meta is not None:
        return meta.kind
    try:
        num = int(rule_id[2:])
    except ValueError:
        return None
    for kind, (lo, hi) in ID_RANGES.items():
        if lo <= num <= hi:
            return kind
    return None


def rules_of_kind(*kinds: RuleKind) -> list[ModuleType]:
    return [m for m in RULES if meta_of(m).kind in kinds]


def catalogue() -> list[RuleMeta]:
    """Every registered rule's metadata, ordered by id (for `GET /rules`)."""
    return sorted((meta_of(m) for m in RULES), key=lambda r: r.id)
