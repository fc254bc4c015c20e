#!/usr/bin/env python3
"""Scaffold a new audit rule (like ruff's add_rule.py), or regenerate the rule catalogue docs.

    python scripts/add_rule.py new static KA142 graph-pool-aliasing \\
        --severity high --effect needs_probe --probe output_aliasing \\
        --summary "Graph memory pool shared between captures aliases outputs"
    python scripts/add_rule.py docs            # rewrite docs/rules/{static,transcript,template_log}.md

`new` writes, and refuses to overwrite:
  * audit_rules/rules/<package>/<id>_<name>.py  (metadata, docstring sections what/why/bad/good,
    a check(ctx) or a transcript Checker that fires nothing yet);
  * an import and an entry in the package's explicit RULES tuple (kept in id order);
  * tests/audit_rules/fixtures/<ID>/bad_example.<ext> and good_example.<ext> (the bad one carries
    an `expect:` marker on the line that must fire, so the fixture test fails until the rule works);
  * a section in docs/rules/<package>.md.
Ids are never renumbered: an id already registered (or present as a file) is refused.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"static": "static", "transcript": "transcript", "template": "template_log", "log": "template_log"}
RANGES = {"static": (100, 199), "transcript": (200, 299), "template": (300, 309), "log": (310, 399)}
EFFECTS = ("decisive_hack", "rubric_leak", "contamination", "passive_exposure", "infra", "provider", "code_defect", "needs_probe", "advisory")
SEVERITIES = ("critical", "high", "medium", "low", "info")
PROBES = ("same_storage_overwrite", "weight_mutation", "repeat_calls", "output_aliasing", "checked_vs_timed", "fresh_vs_warm", "l2_policy", "stream_escape")

_CHECK_BODY = '''

def check(ctx: AuditContext) -> Iterable[Finding]:
    sub = S.submission(ctx)
    if sub is None:
        return []
    out: list[Finding] = []
    # TODO: walk sub.iter_nodes() / sub.iter_calls() / sub.loaded_native() / sub.triton and
    # append S.py_finding(RULE, module, node, "plain-words explanation", data={{"topic": ...}}).
    return out
'''

_CHECKER_BODY = '''

class Checker:
    """Fed every normalized transcript event once, in order; never holds the whole stream."""

    def __init__(self, ctx: AuditContext) -> None:
        self.ctx = ctx
        self.findings: list[Finding] = []

    def feed(self, event: TranscriptEvent) -> None:
        # TODO: inspect event.kind / event.tool_input / event.text
        return None

    def finish(self) -> Iterable[Finding]:
        return self.findings
'''


def module_text(kind: str, rule_id: str, name: str, severity: str, effect: str, probe: str | None, summary: str) -> str:
    enum_kind = {"static": "STATIC", "transcript": "TRANSCRIPT", "template": "TEMPLATE", "log": "LOG"}[kind]
    imports = ["AuditContext", "Effect", "Finding", "RuleKind", "RuleMeta", "Severity"]
    if probe:
        imports.insert(3, "Probe")
    head = f'''"""{rule_id} {name}.

What it flags: TODO (the pattern, in the words of the seeds).

Why it matters: TODO (the real failure it prevents; name the run or seed where it happened).

Bad::

    TODO

Good::

    TODO
"""

from __future__ import annotations

from collections.abc import Iterable

from audit_rules.base import {", ".join(imports)}
'''
    if kind == "static":
        head += "from audit_rules.rules.static import _support as S\n"
    if kind == "transcript":
        head += "from ingest.model import TranscriptEvent\n"
    head += f'''
RULE = RuleMeta(
    id="{rule_id}",
    name="{name}",
    kind=RuleKind.{enum_kind},
    severity=Severity.{severity.upper()},
    effect=Effect.{effect.upper()},
    summary={summary!r},
    probe={"Probe." + probe.upper() if probe else "None"},
)
'''
    if kind == "transcript":
        return head + _CHECKER_BODY
    if kind == "static":
        return head + _CHECK_BODY.format()
    return head + _CHECK_BODY.replace("    sub = S.submission(ctx)\n    if sub is None:\n        return []\n", "").format()


def fixture_texts(kind: str, rule_id: str) -> tuple[str, str, str]:
    """(suffix, bad text, good text)."""
    if kind == "transcript":
        bad = '{"type": "assistant", "message": {"content": [{"type": "text", "text": "TODO"}]}, "_expect": ["RID"]}\n'.replace(
            "RID", rule_id
        )
        good = '{"type": "assistant", "message": {"content": [{"type": "text", "text": "TODO benign"}]}}\n'
        return ".jsonl", bad, good
    bad = (
        "# problem: 01_fp8_gemm\n"
        f'"""Bad example for {rule_id}: TODO (model it on the seed that motivated the rule)."""\n'
        "import torch\n\n\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        f"        return x  # expect: {rule_id}\n"
    )
    good = (
        "# problem: 01_fp8_gemm\n"
        f'"""Good example for {rule_id}: TODO (the benign look-alike)."""\n'
        "import torch\n\n\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return x\n"
    )
    return ".py", bad, good


def register(init_path: Path, package: str, module: str) -> None:
    """Insert the import and the RULES entry, keeping both in sorted (id) order."""
    text = init_path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    existing: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == f"audit_rules.rules.{package}":
            existing.extend(a.name for a in node.names)
    if module in existing:
        raise SystemExit(f"{module} is already registered in {init_path}")
    names = sorted([*existing, module])
    import_block = f"from audit_rules.rules.{package} import (\n" + "".join(f"    {n},\n" for n in names) + ")\n"
    tuple_block = "RULES: tuple[ModuleType, ...] = (\n" + "".join(f"    {n},\n" for n in names) + ")\n"
    pattern = r"from audit_rules\.rules\." + package + r" import \((?:.|\n)*?\)\n"
    text = re.sub(pattern, import_block, text, count=1) if existing else (
        text.replace("from types import ModuleType\n", "from types import ModuleType\n\n" + import_block, 1)
    )
    text = re.sub(r"RULES: tuple\[ModuleType, \.\.\.\] = \((?:.|\n)*?\)\n", tuple_block, text, count=1)
    init_path.write_text(text, encoding="utf-8")


def new_rule(args: argparse.Namespace, root: Path) -> list[Path]:
    kind, rule_id, name = args.kind, args.rule_id, args.name
    if not re.fullmatch(r"KA\d{3}", rule_id):
        raise SystemExit(f"bad id {rule_id!r}: KA + 3 digits")
    lo, hi = RANGES[kind]
    if not lo <= int(rule_id[2:]) <= hi:
        raise SystemExit(f"{rule_id} is outside the {kind} range KA{lo}-KA{hi}")
    if not re.fullmatch(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)+", name):
        raise SystemExit(f"name {name!r} must be kebab-case and name the pattern flagged")
    if args.effect == "needs_probe" and not args.probe:
        raise SystemExit("a needs_probe rule must name its --probe")
    package = PACKAGES[kind]
    pkg_dir = root / "audit_rules" / "rules" / package
    if any(p.name.startswith(rule_id.lower() + "_") for p in pkg_dir.glob("*.py")):
        raise SystemExit(f"{rule_id} already exists in {pkg_dir}: ids are never reused or renumbered")
    module = f"{rule_id.lower()}_{name.replace('-', '_')}"
    mod_path = pkg_dir / f"{module}.py"
    mod_path.write_text(module_text(kind, rule_id, name, args.severity, args.effect, args.probe, args.summary), encoding="utf-8")
    register(pkg_dir / "__init__.py", package, module)
    fx = root / "tests" / "audit_rules" / "fixtures" / rule_id
    fx.mkdir(parents=True, exist_ok=True)
    suffix, bad, good = fixture_texts(kind, rule_id)
    (fx / f"bad_example{suffix}").write_text(bad, encoding="utf-8")
    (fx / f"good_example{suffix}").write_text(good, encoding="utf-8")
    doc = root / "docs" / "rules" / f"{package}.md"
    doc.parent.mkdir(parents=True, exist_ok=True)
    with doc.open("a", encoding="utf-8") as f:
        f.write(f"\n## {rule_id} {name}\n\n{args.summary}\n\n(severity {args.severity}, effect {args.effect}"
                f"{', probe ' + args.probe if args.probe else ''}; docs regenerate with `scripts/add_rule.py docs`)\n")
    return [mod_path, pkg_dir / "__init__.py", fx / f"bad_example{suffix}", fx / f"good_example{suffix}", doc]


def render_docs(package: str) -> str:
    """The catalogue of one rule package, from the registered modules' metadata and docstrings."""
    import importlib

    pkg = importlib.import_module(f"audit_rules.rules.{package}")
    lines = [
        f"# {package.replace('_', '/')} rules",
        "",
        "Generated by `python scripts/add_rule.py docs` from each rule module's metadata and docstring;",
        "edit the module, not this file.",
        "",
        "A finding may carry a different effect than the rule's default (benign variants are advisory) and",
        "always names its `data[\"topic\"]` for synthesis. Fixtures live in",
        "`tests/audit_rules/fixtures/<ID>/`: `bad_*` entries mark every line that must fire; `bad_benign_*`",
        "entries are the seeds' benign look-alikes that the rule still reports, at advisory level only",
        "(tests/audit_rules/test_static_rules.py checks the effect); `good_*` entries must fire nothing.",
        "",
        "| id | name | severity | default effect | probe | summary |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for m in pkg.RULES:
        r = m.RULE
        lines.append(
            f"| {r.id} | `{r.name}` | {r.severity.value} | {r.effect.value} | {r.probe.value if r.probe else '-'} | {r.summary} |"
        )
    for m in pkg.RULES:
        r = m.RULE
        doc = (m.__doc__ or "").strip()
        body = doc.split("\n", 1)[1].strip() if "\n" in doc else ""
        lines += ["", f"## {r.id} {r.name}", "", body]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root (tests use a scratch copy)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("new", help="scaffold a rule module, its registration, fixtures and docs entry")
    n.add_argument("kind", choices=sorted(PACKAGES))
    n.add_argument("rule_id")
    n.add_argument("name")
    n.add_argument("--severity", choices=SEVERITIES, default="medium")
    n.add_argument("--effect", choices=EFFECTS, default="advisory")
    n.add_argument("--probe", choices=PROBES, default=None)
    n.add_argument("--summary", required=True)
    d = sub.add_parser("docs", help="regenerate docs/rules/<package>.md from the registered rules")
    d.add_argument("packages", nargs="*", default=["static"])
    args = ap.parse_args(argv)
    root: Path = args.root
    if args.cmd == "new":
        for p in new_rule(args, root):
            print(p.relative_to(root))
        return 0
    sys.path.insert(0, str(root))
    for package in args.packages:
        out = root / "docs" / "rules" / f"{package}.md"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render_docs(package), encoding="utf-8")
        print(out.relative_to(root))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
