"""`kaudit reaudit`: re-judge stored runs with the current rules (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

from service.context import Services
from tests.service.test_api import good_archive
from tests.service.test_cli import env, run  # noqa: F401  (fixture)


def _verdict_rows(svc: Services) -> int:
    from sqlalchemy import func, select

    from service.models import VerdictRow

    with svc.db.session() as s:
        return int(s.scalar(select(func.count()).select_from(VerdictRow)) or 0)


def test_reaudit_unchanged_rules_append_nothing_and_a_dry_run_appends_nothing(
    env: dict[str, str], svc: Services, tmp_path: Path  # noqa: F811
) -> None:
    arc = good_archive(tmp_path)
    assert run(env, "ingest", str(arc)).exit_code == 0
    rows = _verdict_rows(svc)

    same = run(env, "reaudit", "--json")
    assert same.exit_code == 0, same.output
    doc = json.loads(same.stdout)
    assert doc["examined"] == 1 and doc["changed"] == 0 and doc["errors"] == 0, doc
    assert _verdict_rows(svc) == rows  # nothing moved: no row appended

    # A what-if with a single static rule drops the other rules' findings: a dry run reports
    # what would move and appends nothing.
    what_if = run(env, "reaudit", "--rules", "KA101", "--dry-run", "--json")
    assert what_if.exit_code == 0, what_if.output
    diff = json.loads(what_if.stdout)
    assert diff["examined"] == 1 and diff["errors"] == 0 and diff["appended"] == 0
    assert _verdict_rows(svc) == rows


def test_reaudit_unknown_rule_is_refused(env: dict[str, str]) -> None:  # noqa: F811
    out = run(env, "reaudit", "--rules", "KA999")
    assert out.exit_code == 2, out.output
