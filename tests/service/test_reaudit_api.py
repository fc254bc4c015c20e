"""POST /reaudit over real HTTP (ASGI): auth, bad filters, a recorded job, its diff (SQLite and PostgreSQL).

The moved verdict is real: a stored run whose solution memoizes its output (KA101's own bad
fixture) is re-judged with a rule set that lacks KA101 (the what-if `rules`), so the decisive
finding disappears and the verdict moves; with every rule nothing moves and nothing is appended.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service.context import Services
from service.models import ReauditRow, VerdictRow
from tests.archive_factory import DEFAULT_RUN_ID
from tests.service.conftest import AUTH
from tests.service.test_api import good_archive, upload

ROOT = Path(__file__).resolve().parents[2]
MEMO_SOLUTION = (ROOT / "tests/audit_rules/fixtures/KA101/bad_closure_memo.py").read_text()


def _count(svc: Services, model: Any) -> int:
    with svc.db.session() as s:
        return int(s.scalar(select(func.count()).select_from(model)) or 0)


def _wait(client: TestClient, location: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        got = client.get(location)
        assert got.status_code == 200, got.text
        body: dict[str, Any] = got.json()
        if body["state"] != "running":
            return body
        assert time.monotonic() < deadline, f"re-audit still running after {timeout}s: {body}"
        time.sleep(0.3)


@pytest.fixture
def hack_run(client: TestClient, tmp_path: Path) -> dict[str, Any]:
    arc = good_archive(tmp_path, solution=MEMO_SOLUTION)
    up = upload(client, arc)
    assert up.status_code == 201, up.text
    verdict: dict[str, Any] = up.json()["current_verdict"]
    assert any(k.startswith("KA101@") for k in verdict["justification"].get("verdict", [])), verdict["justification"]
    return verdict


def test_reaudit_needs_the_operator_token(client: TestClient, svc: Services, hack_run: dict[str, Any]) -> None:
    assert client.post("/reaudit", json={}).status_code == 401
    assert client.post("/reaudit", json={}, headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert _count(svc, ReauditRow) == 0


@pytest.mark.parametrize(("body", "needle"), [
    ({"verdict": "nope"}, "unknown verdict 'nope'"),
    ({"contamination": "maybe"}, "unknown contamination"),
    ({"rules": ["KA999"]}, "unknown rule id(s): KA999"),
    ({"rules": []}, "rules is an empty list"),
    ({"run_ids": ["no-such-run"]}, "no stored run no-such-run"),
    ({"model": "nobody"}, "no stored run matches"),
    ({"started_from": "2026-09-01T00:00:00Z", "started_to": "2026-08-01T00:00:00Z"}, "is not before"),
    ({"jobs": 0}, "greater than or equal to 1"),
    ({"modle": "typo"}, "Extra inputs are not permitted"),
])
def test_bad_reaudit_requests_are_a_422_and_store_nothing(
    client: TestClient, svc: Services, hack_run: dict[str, Any], body: dict[str, Any], needle: str
) -> None:
    verdicts = _count(svc, VerdictRow)
    got = client.post("/reaudit", json=body, headers=AUTH)
    assert got.status_code == 422, got.text
    assert needle in got.text, got.text
    assert _count(svc, ReauditRow) == 0 and _count(svc, VerdictRow) == verdicts


def test_reaudit_is_a_recorded_job_with_a_served_diff(
    client: TestClient, svc: Services, hack_run: dict[str, Any]
) -> None:
    verdicts = _count(svc, VerdictRow)

    # Every rule, unchanged code: examined, nothing moved, nothing appended.
    same = client.post("/reaudit", json={"jobs": 1}, headers=AUTH)
    assert same.status_code == 202, same.text
    assert same.headers["location"] == f"/reaudits/{same.json()['id']}" and same.json()["total"] == 1
    done = _wait(client, same.headers["location"])
    assert done["state"] == "succeeded", done
    assert (done["done"], done["changed"], done["errors"]) == (1, 0, 0) and done["diff"] == []
    assert done["summary"]["appended"] == 0 and _count(svc, VerdictRow) == verdicts

    # A what-if without KA101, dry run: the diff names the move and KA101, nothing is appended.
    what_if = client.post("/reaudit", json={"rules": ["KA102", "KA103"], "dry_run": True, "jobs": 1,
                                            "problem": "01_fp8_gemm"}, headers=AUTH)
    assert what_if.status_code == 202, what_if.text
    body = _wait(client, what_if.headers["location"])
    assert body["state"] == "succeeded" and body["changed"] == 1, body
    [entry] = body["diff"]
    assert entry["run_id"] == DEFAULT_RUN_ID and entry["from"]["verdict"] == hack_run["verdict"]
    assert entry["to"]["verdict"] != hack_run["verdict"]
    assert "KA101" in entry["rules"] and any(k.startswith("KA101@") for k in entry["decisive_removed"])
    assert all(k.split("@")[0] not in ("KA102", "KA103") for k in entry["decisive_removed"])
    assert body["summary"]["appended"] == 0 and _count(svc, VerdictRow) == verdicts

    # The same for real, selected by run id: one verdict row appended, produced by this re-audit.
    real = client.post("/reaudit", json={"rules": ["KA102", "KA103"], "run_ids": [DEFAULT_RUN_ID]}, headers=AUTH)
    assert real.status_code == 202, real.text
    rid = real.json()["id"]
    body = _wait(client, f"/reaudits/{rid}")
    assert body["summary"]["appended"] == 1 and body["diff"][0]["written"] is True, body
    history = client.get(f"/runs/{DEFAULT_RUN_ID}/verdicts").json()
    assert len(history) == 2 and _count(svc, VerdictRow) == verdicts + 1
    newest = max(history, key=lambda v: v["id"])
    assert newest["id"] == body["diff"][0]["verdict_id"]
    assert newest["produced_by"] == "reaudit" and newest["producer_detail"].startswith(f"reaudit {rid} under rules ")
    run = client.get(f"/runs/{DEFAULT_RUN_ID}").json()
    assert run["verdict"] == entry["to"]["verdict"] and run["current_verdict"]["id"] == newest["id"]

    # The page shows the move and the rule responsible.
    page = client.get(f"/ui/reaudits/{rid}")
    assert page.status_code == 200 and DEFAULT_RUN_ID in page.text and "KA101" in page.text
    assert "Content-Security-Policy" in page.headers

    # Listing, newest first, without diffs; an unknown id is a 404.
    listed = client.get("/reaudits").json()
    assert [r["id"] for r in listed][:1] == [rid] and "diff" not in listed[0]
    assert client.get("/reaudits/999999").status_code == 404
    assert client.get("/ui/reaudits/999999").status_code == 404


def test_a_second_reaudit_while_one_runs_is_a_409_and_a_dead_owner_is_reaped(
    client: TestClient, svc: Services, hack_run: dict[str, Any]
) -> None:
    from datetime import timedelta

    from service.models import utcnow
    from service.reaudits.service import STALE_AFTER_S

    # A record left `running` by a process that is gone (its heartbeat stopped long ago).
    old = (utcnow() - timedelta(seconds=STALE_AFTER_S + 5)).isoformat()
    with svc.db.session() as s, s.begin():
        s.add(ReauditRow(state="running", params={}, ruleset="x", total=5, done=2, changed=0, errors=0,
                         summary={"owner": "gone-host:1", "heartbeat_at": old}, diff=[]))
    with svc.db.session() as s:
        dead_id = s.scalars(select(ReauditRow.id)).one()
    # ... and one whose owner is alive (fresh heartbeat): a new POST is refused with 409.
    with svc.db.session() as s, s.begin():
        s.add(ReauditRow(state="running", params={}, ruleset="x", total=5, done=2, changed=0, errors=0,
                         summary={"owner": "live-host:2", "heartbeat_at": utcnow().isoformat()}, diff=[]))
    busy = client.post("/reaudit", json={}, headers=AUTH)
    assert busy.status_code == 409, busy.text
    assert "still running" in busy.json()["detail"]
    dead = client.get(f"/reaudits/{dead_id}").json()
    assert dead["state"] == "failed" and "gone-host:1" in dead["error"] and dead["finished_at"]
