"""scripts/add_rule.py scaffolds a rule that registers, parses and fails its fixture until written."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_script():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("add_rule", REPO / "scripts" / "add_rule.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["add_rule_under_test"] = mod
    spec.loader.exec_module(mod)
    return mod


def _tree(tmp: Path) -> Path:
    root = tmp / "repo"
    shutil.copytree(REPO / "audit_rules", root / "audit_rules", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tests" / "audit_rules" / "fixtures").mkdir(parents=True)
    return root


def test_new_static_rule_is_scaffolded_and_registered(tmp_path: Path) -> None:
    add_rule = _load_script()
    root = _tree(tmp_path)
    rc = add_rule.main(["--root", str(root), "new", "static", "KA199", "scaffold-probe-pattern",
                        "--severity", "high", "--effect", "needs_probe", "--probe", "l2_policy", "--summary", "A test rule"])
    assert rc == 0
    mod_path = root / "audit_rules/rules/static/ka199_scaffold_probe_pattern.py"
    tree = ast.parse(mod_path.read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body)
    doc = ast.get_docstring(tree) or ""
    assert all(word in doc for word in ("What it flags", "Why it matters", "Bad::", "Good::"))
    init = (root / "audit_rules/rules/static/__init__.py").read_text()
    tup = init.split("RULES: tuple[ModuleType, ...] = (")[1]
    assert "ka199_scaffold_probe_pattern," in tup and tup.index("ka153_deck_file_write") < tup.index("ka199")
    compile(init, "init", "exec")
    bad = (root / "tests/audit_rules/fixtures/KA199/bad_example.py").read_text()
    assert "# expect: KA199" in bad
    assert (root / "tests/audit_rules/fixtures/KA199/good_example.py").is_file()
    assert "KA199 scaffold-probe-pattern" in (root / "docs/rules/static.md").read_text()


def test_refuses_reused_id_bad_name_and_probe_less_needs_probe(tmp_path: Path) -> None:
    add_rule = _load_script()
    root = _tree(tmp_path)
    for argv in (
        ["new", "static", "KA101", "another-name", "--summary", "x"],  # id taken
        ["new", "static", "KA198", "NotKebab", "--summary", "x"],
        ["new", "static", "KA250", "out-of-range", "--summary", "x"],
        ["new", "static", "KA197", "needs-a-probe", "--effect", "needs_probe", "--summary", "x"],
    ):
        with pytest.raises(SystemExit):
            add_rule.main(["--root", str(root), *argv])


def test_docs_catalogue_lists_every_static_rule(tmp_path: Path) -> None:
    add_rule = _load_script()
    from audit_rules.rules.static import RULES

    text = add_rule.render_docs("static")
    for m in RULES:
        assert f"## {m.RULE.id} {m.RULE.name}" in text
    assert (REPO / "docs/rules/static.md").read_text() == text, "docs/rules/static.md is stale: run scripts/add_rule.py docs"
