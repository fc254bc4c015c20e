"""One parametrized test for every rule fixture (docs/CONTRACTS.md "Rule fixtures").

Each `bad_*` / `good_*` entry under tests/audit_rules/fixtures/<RULE_ID>/ is built into a REAL
tar.gz, unpacked with `safe_unpack`, parsed with `parse_run`, and the rule under test runs
through the engine (`audit_rules.engine.build_context` + `run_rules`). The exact set of
(rule, file, line) firings of that rule must equal the markers: `# expect: KA101` (Python),
`// expect: KA101` (C/C++/CUDA), `"_expect": ["KA201"]` on a transcript line, or expect.txt
lines `<path>:<line> <RULE_ID>` (`-:0` for an archive-level finding without a file).
A `good_*` entry must fire nothing; a `bad_*` entry must mark at least one firing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from audit_rules.engine import build_context, run_rules
from audit_rules.registry import rules_by_id
from ingest.archive import safe_unpack
from ingest.run import parse_run
from tests.audit_rules.conftest import FixtureEntry, discover_entries, materialize
from tests.corpus.build import tar_tree

ENTRIES = discover_entries()


def _fmt(firings: set[tuple[str, str | None, int]]) -> str:
    return "\n".join(f"  {rid} {path or '-'}:{line}" for rid, path, line in sorted(firings, key=str)) or "  (none)"


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.id for e in ENTRIES])
def test_rule_fixture(entry: FixtureEntry, tmp_path: Path, decks) -> None:  # type: ignore[no-untyped-def]
    module = rules_by_id().get(entry.rule_id)
    assert module is not None, f"fixtures exist for {entry.rule_id} but no such rule is registered"
    built = materialize(entry, tmp_path)
    expected = {f for f in built.expected if f[0] == entry.rule_id}
    if entry.bad:
        assert expected, f"{entry.id}: a bad_ fixture must mark at least one expected {entry.rule_id} firing"
    else:
        assert not expected, f"{entry.id}: a good_ fixture must not carry {entry.rule_id} markers"

    archive_path = tar_tree(built.tree, tmp_path / "run.tar.gz", top="run")
    archive = safe_unpack(archive_path, tmp_path / "staged")
    run = parse_run(archive, decks)
    ctx = build_context(archive, run, decks)
    findings = run_rules(ctx, [module])

    crashed = [f for f in findings if f.data.get("crashed")]
    assert not crashed, f"{entry.id}: rule crashed: {crashed[0].explanation}"
    actual = {(f.rule_id, f.file, f.line_start or 0) for f in findings if f.rule_id == entry.rule_id}
    assert actual == expected, (
        f"{entry.id}: firings differ\nexpected:\n{_fmt(expected)}\nactual:\n{_fmt(actual)}\n"
        f"missing: {_fmt(expected - actual)}\nunexpected: {_fmt(actual - expected)}"
    )
