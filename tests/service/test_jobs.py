"""POST /runs/{id}/regrade and GET /jobs/{id}: idempotent enqueue, force, probe sets, auth."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select, text

from service.context import Services
from tests.archive_factory import DEFAULT_RUN_ID
from tests.service.conftest import AUTH
from tests.service.test_api import good_archive, upload


def test_regrade_enqueue_is_idempotent(client: TestClient, svc: Services, tmp_path: Path) -> None:
    assert upload(client, good_archive(tmp_path)).status_code == 201
    url = f"/runs/{DEFAULT_RUN_ID}/regrade"
    first = client.post(url, headers=AUTH)
    assert first.status_code == 202, first.text
    job = first.json()["job"]
    assert first.json()["created"] is True
    assert job["state"] == "queued" and job["attempts"] == 0 and job["run_id"] == DEFAULT_RUN_ID
    assert job["max_attempts"] == svc.settings.worker_max_attempts

    again = client.post(url, headers=AUTH, json={})
    assert again.status_code == 202
    assert again.json()["job"]["id"] == job["id"] and again.json()["created"] is False

    same_set = client.post(url, headers=AUTH, json={"probes": list(reversed(job["probes"]))})
    assert same_set.json()["job"]["id"] == job["id"]  # a probe SET: order does not matter

    other = client.post(url, headers=AUTH, json={"probes": ["repeat_calls"]})
    assert other.json()["created"] is True and other.json()["job"]["id"] != job["id"]

    forced = client.post(url, headers=AUTH, json={"force": True})
    assert forced.json()["created"] is True and forced.json()["job"]["force"] is True
    # One queued forced regrade per run: a second is refused with a reason, naming the queued one.
    forced2 = client.post(url, headers=AUTH, json={"force": True})
    assert forced2.status_code == 409 and forced2.json()["reason"] == "force_regrade_pending"
    assert forced2.json()["job"]["id"] == forced.json()["job"]["id"] and "still queued" in forced2.json()["detail"]
    with svc.db.engine.begin() as conn:  # the worker took it: the next forced regrade is accepted
        conn.execute(text("UPDATE jobs SET state = 'running' WHERE id = :id"), {"id": forced.json()["job"]["id"]})
    forced3 = client.post(url, headers=AUTH, json={"force": True})
    assert forced3.status_code == 202 and forced3.json()["job"]["id"] != forced.json()["job"]["id"]
    assert 'kaudit_rejections_total{reason="force_regrade_pending"}' in client.get("/metrics").text

    got = client.get(f"/jobs/{job['id']}")
    assert got.status_code == 200
    assert got.json()["state"] == "queued" and got.json()["progress"] == {}
    assert client.get("/jobs/999999").status_code == 404

    assert client.post(url, headers=AUTH, json={"probes": ["no_such_probe"]}).status_code == 422
    assert client.post("/runs/nope/regrade", headers=AUTH).status_code == 404
    assert client.post(url).status_code == 401
    assert client.post(url, headers={"Authorization": "Bearer wrong"}).status_code == 403
    assert 'kaudit_jobs{state="queued"} 3.0' in client.get("/metrics").text


def test_run_without_solution_is_not_regradable(client: TestClient, tmp_path: Path) -> None:
    arc = good_archive(tmp_path, solution=None, result={"has_solution": False, "correct": None,
                                                       "failure_reason": "no_solution", "peak_fraction": None})
    body = upload(client, arc).json()
    assert body["regradable"] is False and "solution" in body["not_regradable_reason"]
    r = client.post(f"/runs/{DEFAULT_RUN_ID}/regrade", headers=AUTH)
    assert r.status_code == 409 and r.json()["reason"] == "not_regradable"  # the run's state, not the request


def test_one_queued_forced_regrade_is_held_by_the_database(client: TestClient, svc: Services, tmp_path: Path) -> None:
    """Two concurrent forced requests both pass the app's check; the partial unique index refuses the second."""
    import uuid

    import pytest
    from sqlalchemy.exc import IntegrityError

    from service.models import Job, Run

    assert upload(client, good_archive(tmp_path)).status_code == 201
    with svc.db.session() as session:
        run_pk = session.scalars(select(Run.id)).one()

    def forced(state: str = "queued") -> Job:
        return Job(run_id=run_pk, state=state, idempotency_key=f"t:{uuid.uuid4().hex}", force=True, probes=[],
                   progress={})

    with svc.db.session() as session, session.begin():
        session.add_all([forced(), forced("running"), forced("succeeded")])  # one queued + others: fine
    with pytest.raises(IntegrityError), svc.db.session() as session, session.begin():
        session.add(forced())
    with svc.db.session() as session, session.begin():  # an unforced queued job is not limited
        session.add(Job(run_id=run_pk, state="queued", idempotency_key=f"t:{uuid.uuid4().hex}", force=False,
                        probes=[], progress={}))


def test_requests_differing_only_in_gpu_pool_are_distinct_jobs(svc: Services, tmp_path: Path) -> None:
    """Over real HTTP into the ASGI app (httpx ASGITransport, the app's own lifespan run)."""
    import anyio
    import httpx

    from service.app import create_app

    archive = good_archive(tmp_path)
    url = f"/runs/{DEFAULT_RUN_ID}/regrade"

    async def scenario() -> dict[str, Any]:
        app = create_app(svc=svc)
        async with app.router.lifespan_context(app):
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://kaudit") as c:
                with open(archive, "rb") as fh:
                    up = await c.post("/runs", headers=AUTH, files={"archive": (archive.name, fh.read())})
                assert up.status_code == 201, up.text
                out: dict[str, Any] = {}
                for name, body in (("default", {}), ("a", {"gpu_pool": "pool-a"}), ("b", {"gpu_pool": "pool-b"}),
                                   ("a_again", {"gpu_pool": "pool-a"}), ("explicit_default", {"gpu_pool": "default"}),
                                   ("a_hardened", {"gpu_pool": "pool-a", "mode": "hardened"})):
                    r = await c.post(url, headers=AUTH, json=body)
                    assert r.status_code == 202, (name, r.text)
                    out[name] = r.json()
                return out

    got = anyio.run(scenario)
    ids = {name: r["job"]["id"] for name, r in got.items()}
    assert got["default"]["created"] and got["a"]["created"] and got["b"]["created"], got
    assert len({ids["default"], ids["a"], ids["b"]}) == 3  # the pool alone makes them distinct jobs
    assert got["a"]["job"]["gpu_pool"] == "pool-a" and got["b"]["job"]["gpu_pool"] == "pool-b"
    assert ids["a_again"] == ids["a"] and got["a_again"]["created"] is False  # still idempotent per pool
    assert ids["explicit_default"] == ids["default"] and got["explicit_default"]["created"] is False
    assert got["a_hardened"]["created"] and ids["a_hardened"] not in (ids["a"], ids["b"])  # mode too
