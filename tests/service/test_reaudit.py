"""`kaudit reaudit`: re-judge stored runs with the current rules (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from pathlib import Path

from service.context import Services
from tests.archive_factory import DEFAULT_RUN_ID
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


def test_cli_reaudit_is_recorded_and_moves_a_verdict_in_a_process_pool(
    env: dict[str, str], svc: Services, tmp_path: Path  # noqa: F811
) -> None:
    from service.models import ReauditRow
    from service.reaudits.service import ReauditService
    from tests.service.test_reaudit_api import MEMO_SOLUTION

    assert run(env, "ingest", str(good_archive(tmp_path / "a", solution=MEMO_SOLUTION))).exit_code == 0
    assert run(env, "ingest", str(good_archive(tmp_path / "b", run_id="20260801_224338_claude_other_01_fp8_gemm")
                                  )).exit_code == 0
    rows = _verdict_rows(svc)
    # Two worker processes (forked), a what-if rule set without KA101: only the memoizing run moves.
    out = run(env, "reaudit", "--jobs", "2", "--rules", "KA102,KA103", "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["examined"] == 2 and doc["errors"] == 0, doc
    moved = [d["run_id"] for d in doc["diff"] if any(k.startswith("KA101@") for k in d["decisive_removed"])]
    assert moved == [DEFAULT_RUN_ID], doc["diff"]
    assert _verdict_rows(svc) == rows + doc["appended"] and doc["appended"] == doc["changed"] >= 1
    record = ReauditService(svc.settings, svc.db).get(doc["id"])
    assert isinstance(record, ReauditRow) and record.state == "succeeded"
    assert record.total == 2 and record.done == 2 and record.changed == doc["changed"]
    assert [d["run_id"] for d in record.diff] == [d["run_id"] for d in doc["diff"]]
    assert record.params["jobs"] == 2 and record.params["rules"] == ["KA102", "KA103"]


def test_the_pool_worker_drops_the_audit_librarys_per_submission_memos(
    env: dict[str, str], svc: Services, tmp_path: Path  # noqa: F811
) -> None:
    """Each memo holds a whole parsed submission; kept across runs, a worker grows ~0.65 MB per run."""
    import importlib

    from sqlalchemy import select

    from service import reaudit as R
    from service.models import Run

    assert run(env, "ingest", str(good_archive(tmp_path))).exit_code == 0
    R.init_worker(svc.settings.database_url, str(svc.settings.data_dir), None)
    with svc.db.session() as s:
        pk = s.scalars(select(Run.id)).one()
    from audit_rules.memo import IdentityMemo

    memos = [getattr(importlib.import_module(m), n) for m, names in R._PER_SUBMISSION_MEMOS for n in names]
    assert all(isinstance(d, (dict, IdentityMemo)) for d in memos)  # renamed in the library? this drop went stale
    R._judge_one(pk)
    assert any(len(d) for d in memos), "judging filled none of the memos: the list no longer names the library's caches"
    out = R.judge_one(pk)
    assert "error" not in out, out
    assert not any(len(d) for d in memos)
