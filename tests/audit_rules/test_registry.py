"""Meta-test of the rule registry: every rule module registered once, well-formed, with fixtures.

* every module under audit_rules/rules/** (helpers named `_*` excepted) is in registry.RULES;
* ids match KA + 3 digits, are unique, and sit in their kind's range (static KA1xx,
  transcript KA2xx, template KA30x, logs KA31x+) and in the package of that kind;
* names are kebab-case and unique; metadata types are right; NEEDS_PROBE rules name a probe;
* STATIC/TEMPLATE/LOG rules expose check(ctx); TRANSCRIPT rules a Checker with feed/finish;
* each module docstring has what / why / bad / good sections;
* every rule has >= 1 bad_* and >= 1 good_* fixture under tests/audit_rules/fixtures/<ID>/.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

import pytest

import audit_rules.rules as rules_pkg
from audit_rules import catalogue
from audit_rules.base import Effect, Probe, RuleKind, RuleMeta, Severity
from audit_rules.registry import ID_RANGES, RULES, meta_of, rules_by_id
from tests.audit_rules.conftest import FIXTURES

PACKAGE_KINDS = {
    "audit_rules.rules.static": {RuleKind.STATIC},
    "audit_rules.rules.transcript": {RuleKind.TRANSCRIPT},
    "audit_rules.rules.template_log": {RuleKind.TEMPLATE, RuleKind.LOG},
}
KEBAB = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")
SECTIONS = {
    "what": re.compile(r"^\s*(?:#+\s*)?(?:\*\*)?what\b", re.I | re.M),
    "why": re.compile(r"^\s*(?:#+\s*)?(?:\*\*)?why\b", re.I | re.M),
    "bad": re.compile(r"^\s*(?:#+\s*)?(?:\*\*)?bad\b", re.I | re.M),
    "good": re.compile(r"^\s*(?:#+\s*)?(?:\*\*)?good\b", re.I | re.M),
}


def _all_rule_modules() -> list[ModuleType]:
    found: list[ModuleType] = []
    for info in pkgutil.walk_packages(rules_pkg.__path__, prefix="audit_rules.rules."):
        leaf = info.name.rsplit(".", 1)[-1]
        if info.ispkg or leaf.startswith("_"):
            continue
        found.append(importlib.import_module(info.name))
    return found


def _ids() -> list[str]:
    return [meta_of(m).id for m in RULES]


def test_every_rule_module_is_registered() -> None:
    registered = {m.__name__ for m in RULES}
    missing = sorted(m.__name__ for m in _all_rule_modules() if m.__name__ not in registered)
    assert not missing, f"rule modules not listed in their package's RULES tuple: {missing}"


def test_registered_modules_are_unique_and_live_in_a_rule_package() -> None:
    names = [m.__name__ for m in RULES]
    assert len(names) == len(set(names)), "a rule module is registered twice"
    for m in RULES:
        assert m.__name__.rsplit(".", 1)[0] in PACKAGE_KINDS, f"{m.__name__} is not under a rule package"


def test_ids_unique_and_in_range() -> None:
    ids = _ids()
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    assert not dupes, f"duplicate rule ids: {dupes}"
    for m in RULES:
        meta = meta_of(m)
        assert re.fullmatch(r"KA\d{3}", meta.id), f"{m.__name__}: bad id {meta.id!r}"
        lo, hi = ID_RANGES[meta.kind]
        assert lo <= int(meta.id[2:]) <= hi, f"{meta.id} ({meta.kind}) outside KA{lo}-KA{hi}"
        package = m.__name__.rsplit(".", 1)[0]
        assert meta.kind in PACKAGE_KINDS[package], f"{meta.id}: kind {meta.kind} registered under {package}"


def test_names_and_metadata() -> None:
    names = [meta_of(m).name for m in RULES]
    assert len(names) == len(set(names)), "duplicate rule names"
    for m in RULES:
        meta = meta_of(m)
        assert isinstance(meta, RuleMeta)
        assert KEBAB.match(meta.name), f"{meta.id}: name {meta.name!r} is not kebab-case"
        assert isinstance(meta.kind, RuleKind) and isinstance(meta.severity, Severity)
        assert isinstance(meta.effect, Effect)
        assert meta.summary.strip() and "\n" not in meta.summary, f"{meta.id}: summary must be one line"
        if meta.effect is Effect.NEEDS_PROBE:
            assert isinstance(meta.probe, Probe), f"{meta.id}: a NEEDS_PROBE rule must name its probe"


def test_rule_entry_points() -> None:
    for m in RULES:
        meta = meta_of(m)
        if meta.kind is RuleKind.TRANSCRIPT:
            checker = getattr(m, "Checker", None)
            assert isinstance(checker, type), f"{meta.id}: transcript rules define class Checker"
            assert callable(getattr(checker, "feed", None)) and callable(getattr(checker, "finish", None))
        else:
            assert callable(getattr(m, "check", None)), f"{meta.id}: define check(ctx)"


@pytest.mark.parametrize("module", RULES, ids=_ids())
def test_docstring_sections(module: ModuleType) -> None:
    doc = module.__doc__ or ""
    missing = [k for k, pat in SECTIONS.items() if not pat.search(doc)]
    assert not missing, f"{meta_of(module).id}: module docstring lacks section(s) {missing} (what/why/bad/good)"


@pytest.mark.parametrize("module", RULES, ids=_ids())
def test_every_rule_has_good_and_bad_fixtures(module: ModuleType) -> None:
    rid = meta_of(module).id
    folder = FIXTURES / rid
    entries = [p.name for p in folder.iterdir()] if folder.is_dir() else []
    assert any(n.startswith("bad_") for n in entries), f"{rid}: no bad_* fixture in {folder}"
    assert any(n.startswith("good_") for n in entries), f"{rid}: no good_* fixture in {folder}"


def test_fixture_folders_name_registered_rules() -> None:
    if not FIXTURES.is_dir():
        return
    known = set(rules_by_id())
    orphans = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name not in known)
    assert not orphans, f"fixture folders for unregistered rules: {orphans}"


def test_catalogue_lists_every_rule_sorted() -> None:
    cat = catalogue()
    assert [r.id for r in cat] == sorted(_ids())
    assert all(isinstance(r, RuleMeta) for r in cat)
