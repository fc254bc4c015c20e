"""GET /runs: filters, sorting and cursor-pagination stability, on SQLite and PostgreSQL.

Runs are written through the real repository (RunRepository.add_run + append_verdict), the same
calls ingest makes, so the denormalised current-verdict columns are what production writes.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi.testclient import TestClient

from audit_rules.verdicts import Contamination, MeasurementStatus, Producer, Verdict, VerdictResult
from service.context import Services
from service.models import EPOCH, NO_PEAK, Run
from service.runs.repository import RunRepository

T0 = datetime(2026, 8, 1, 12, 0, tzinfo=UTC)


def add_runs(svc: Services, specs: list[dict[str, Any]]) -> None:
    with svc.db.session() as session, session.begin():
        repo = RunRepository(session)
        for spec in specs:
            n = spec["n"]
            started = spec.get("started_at")
            peak = spec.get("peak")
            run = repo.add_run(
                Run(
                    run_id=f"run_{n:05d}",
                    archive_sha256=hashlib.sha256(f"a{n}".encode()).hexdigest(),
                    archive_size=1,
                    archive_format="tar",
                    problem=spec.get("problem", "01_fp8_gemm"),
                    harness=spec.get("harness", "claude"),
                    model=spec.get("model", "m1"),
                    hardware=spec.get("hardware", "NVIDIA H200"),
                    deck=spec.get("deck", "hard"),
                    started_at=started,
                    started_key=started or EPOCH,
                    peak_fraction=peak,
                    peak_key=peak if peak is not None else NO_PEAK,
                    result={},
                    logs={},
                    transcripts=[],
                    warnings=[],
                    regradable=False,
                ),
                [],
            )
            verdict = spec.get("verdict", Verdict.CLEAN)
            repo.append_verdict(
                run,
                VerdictResult(
                    verdict=verdict,
                    reward_hack=verdict is Verdict.REWARD_HACK,
                    contamination=spec.get("contamination", Contamination.CLEAN),
                    template_mutated=False,
                    correct=True,
                    correct_source="in_run",
                    failure_reason="pass",
                    measurement_status=MeasurementStatus.IN_RUN_CONTENDED,
                    publish_grade=spec.get("publish", False),
                    metric=None,
                    reasons=["test"],
                    justification={},
                    produced_by=Producer.OPERATOR,
                ),
            )


def all_pages(client: TestClient, **params: Any) -> list[str]:
    out: list[str] = []
    cursor = None
    while True:
        q = dict(params)
        if cursor:
            q["cursor"] = cursor
        body = client.get("/runs", params=q).json()
        out.extend(r["run_id"] for r in body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return out


def test_pagination_is_stable_and_complete(svc: Services, client: TestClient) -> None:
    # Ties on started_at (every 3 runs share one), some unknown started_at, some without a peak.
    specs = [
        {
            "n": n,
            "started_at": None if n % 10 == 0 else T0 + timedelta(minutes=n // 3),
            "peak": None if n % 4 == 0 else round(0.01 * (n % 17), 4),
        }
        for n in range(1, 48)
    ]
    add_runs(svc, specs)
    for sort in ("started_at", "ingested", "peak_fraction", "run_id"):
        for order in ("asc", "desc"):
            full = client.get("/runs", params={"sort": sort, "order": order, "limit": 500}).json()["items"]
            paged = all_pages(client, sort=sort, order=order, limit=7)
            assert paged == [r["run_id"] for r in full], (sort, order)
            assert len(paged) == 47 and len(set(paged)) == 47
    desc = all_pages(client, sort="started_at", order="desc", limit=100)
    assert desc[-4:] == ["run_00040", "run_00030", "run_00020", "run_00010"]  # unknown start sorts oldest
    by_peak = client.get("/runs", params={"sort": "peak_fraction", "order": "desc", "limit": 1}).json()
    assert by_peak["items"][0]["peak_fraction"] == max(s["peak"] for s in specs if s["peak"] is not None)

    # New runs arriving while a client pages (newest first) never shift or repeat the pages.
    first = client.get("/runs", params={"limit": 10}).json()
    add_runs(svc, [{"n": 100 + i, "started_at": T0 + timedelta(days=30, minutes=i)} for i in range(5)])
    rest = all_pages(client, limit=10, cursor=first["next_cursor"])
    seen = [r["run_id"] for r in first["items"]] + rest
    assert len(seen) == 47 and len(set(seen)) == 47


def test_bad_cursor_is_400(client: TestClient, svc: Services) -> None:
    add_runs(svc, [{"n": n, "started_at": T0} for n in range(3)])
    cursor = client.get("/runs", params={"limit": 1}).json()["next_cursor"]
    assert cursor
    assert client.get("/runs", params={"cursor": "garbage!"}).status_code == 400
    # A cursor issued for another sort order is refused, not silently misapplied.
    assert client.get("/runs", params={"cursor": cursor, "sort": "run_id"}).status_code == 400
    assert client.get("/runs", params={"limit": 0}).status_code == 422


def test_filters(svc: Services, client: TestClient) -> None:
    add_runs(
        svc,
        [
            {"n": 1, "model": "m1", "harness": "claude", "problem": "01_fp8_gemm", "started_at": T0},
            {"n": 2, "model": "m2", "harness": "codex", "problem": "01_fp8_gemm", "started_at": T0 + timedelta(days=1),
             "verdict": Verdict.REWARD_HACK},
            {"n": 3, "model": "m2", "harness": "codex", "problem": "07_w4a16_gemm", "started_at": T0 + timedelta(days=2),
             "contamination": Contamination.PASSIVE_EXPOSURE, "publish": True, "hardware": "NVIDIA H100"},
            {"n": 4, "model": "m1", "harness": "opencode", "problem": "07_w4a16_gemm", "deck": "other",
             "started_at": T0 + timedelta(days=3), "verdict": Verdict.FAIL},
        ],
    )

    def ids(**params: Any) -> list[str]:
        r = client.get("/runs", params={**params, "sort": "run_id", "order": "asc"})
        assert r.status_code == 200, r.text
        return [x["run_id"] for x in r.json()["items"]]

    assert ids(model="m2") == ["run_00002", "run_00003"]
    assert ids(model="m1", problem="07_w4a16_gemm") == ["run_00004"]
    assert ids(harness="codex") == ["run_00002", "run_00003"]
    assert ids(deck="other") == ["run_00004"]
    assert ids(hardware="NVIDIA H100") == ["run_00003"]
    assert ids(verdict="reward_hack") == ["run_00002"]
    assert ids(reward_hack="true") == ["run_00002"]
    assert ids(reward_hack="false") == ["run_00001", "run_00003", "run_00004"]
    assert ids(contamination="passive_exposure") == ["run_00003"]
    assert ids(publish_grade="true") == ["run_00003"]
    assert ids(started_from=(T0 + timedelta(days=1)).isoformat(), started_to=(T0 + timedelta(days=3)).isoformat()) == [
        "run_00002",
        "run_00003",
    ]
    assert ids(model="m1", verdict="clean") == ["run_00001"]


def test_verdict_history_is_append_only(svc: Services, client: TestClient) -> None:
    add_runs(svc, [{"n": 1, "started_at": T0}])
    with svc.db.session() as session, session.begin():
        repo = RunRepository(session)
        run = repo.by_run_id("run_00001")
        assert run is not None
        first_id = run.current_verdict_id
        repo.append_verdict(
            run,
            VerdictResult(
                verdict=Verdict.REWARD_HACK, reward_hack=True, contamination=Contamination.CLEAN,
                template_mutated=False, correct=False, correct_source="regrade", failure_reason="audit_empirical_failed",
                measurement_status=MeasurementStatus.SEQUENTIAL_ISOLATED_EMPIRICAL_FAILED, publish_grade=False,
                metric=None, reasons=["probe failed"], justification={"verdict": ["same_storage_overwrite"]},
                produced_by=Producer.REGRADE,
            ),
        )
    history = client.get("/runs/run_00001/verdicts").json()
    assert [v["verdict"] for v in history] == ["clean", "reward_hack"]
    assert history[0]["id"] == first_id and history[0]["produced_by"] == "operator"
    detail = client.get("/runs/run_00001").json()
    assert detail["verdict"] == "reward_hack" and detail["current_verdict"]["id"] == history[1]["id"]
    assert client.get("/runs", params={"reward_hack": "true"}).json()["items"][0]["run_id"] == "run_00001"
