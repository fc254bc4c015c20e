"""The REST door end to end over real HTTP (ASGI), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.context import Services
from tests.archive_factory import DEFAULT_PROBLEM, DEFAULT_RUN_ID, build_run_tree, make_tar, make_zip
from tests.service.conftest import AUTH, TOKEN, staging_leftovers, table_counts

BUNDLED_PROBLEM_DIR = Path(__file__).resolve().parents[2] / "kernels" / "hard" / DEFAULT_PROBLEM


def good_archive(tmp: Path, name: str = "run.tar.gz", **kwargs: Any) -> Path:
    tree = build_run_tree(tmp / "tree", deck_problem_dir=BUNDLED_PROBLEM_DIR, **kwargs)
    if name.endswith(".zip"):
        return make_zip(tree, tmp / name)
    return make_tar(tree, tmp / name, gz=name.endswith(".gz"))


def upload(client: TestClient, path: Path, headers: dict[str, str] | None = AUTH) -> Any:
    with open(path, "rb") as fh:
        return client.post("/runs", files={"archive": (path.name, fh, "application/octet-stream")}, headers=headers)


def test_upload_found_and_idempotent(client: TestClient, svc: Services, tmp_path: Path) -> None:
    arc = good_archive(tmp_path)
    first = upload(client, arc)
    assert first.status_code == 201, first.text
    body = first.json()
    assert body["run_id"] == DEFAULT_RUN_ID
    assert body["problem"] == DEFAULT_PROBLEM and body["model"] == "claude-opus-4-8" and body["harness"] == "claude"
    assert body["started_at"].startswith("2026-08-01T22:43:38")
    assert body["peak_fraction"] == pytest.approx(0.289)
    assert body["input_tokens"] == 1200 and body["total_cost_usd"] == pytest.approx(1.25)
    assert body["result"]["run_group"] == "20260801_group"  # verbatim result.json
    assert body["template_status"] == "verified" and body["deck"] == "hard"
    assert body["regradable"] is True
    assert body["logs"]["check"]["passed"] is True
    assert body["logs"]["gpu_lock"]["acquisitions"] == 2
    assert body["transcripts"][0]["dialect"] == "claude"
    verdict = body["current_verdict"]
    assert verdict is not None and verdict["produced_by"] in ("audit", "ingest")
    assert body["verdict"] == verdict["verdict"]
    assert [m["status"] for m in body["measurements"]] == ["in_run_contended"]
    assert len(body["measurements"][0]["shapes"]) == 2
    paths = {a["path"] for a in body["artifacts"]}
    assert {"result.json", "solution.py", "check.log", "template_files/check.py"} <= paths

    found = client.get("/runs", params={"model": "claude-opus-4-8", "problem": DEFAULT_PROBLEM})
    assert found.status_code == 200
    assert [r["run_id"] for r in found.json()["items"]] == [DEFAULT_RUN_ID]
    assert client.get("/runs", params={"model": "other-model"}).json()["items"] == []

    counts = table_counts(svc)
    blobs = svc.blobs.all_keys()
    again = upload(client, arc)
    assert again.status_code == 200
    assert again.json()["run_id"] == DEFAULT_RUN_ID
    assert table_counts(svc) == counts and svc.blobs.all_keys() == blobs
    assert staging_leftovers(svc) == []

    detail = client.get(f"/runs/{DEFAULT_RUN_ID}")
    assert detail.status_code == 200 and detail.json()["archive_sha256"] == body["archive_sha256"]
    history = client.get(f"/runs/{DEFAULT_RUN_ID}/verdicts").json()
    assert len(history) == 1 and history[0]["id"] == verdict["id"]
    assert client.get("/runs/nope").status_code == 404


def test_same_run_in_zip_is_a_conflict_not_a_second_run(client: TestClient, svc: Services, tmp_path: Path) -> None:
    assert upload(client, good_archive(tmp_path)).status_code == 201
    counts, blobs = table_counts(svc), svc.blobs.all_keys()
    other = upload(client, good_archive(tmp_path, "run.zip"))  # same run_id, different archive bytes
    assert other.status_code == 409 and other.json()["reason"] == "run_id_conflict"
    assert table_counts(svc) == counts and svc.blobs.all_keys() == blobs


def test_file_endpoint_content_types(client: TestClient, tmp_path: Path) -> None:
    arc = good_archive(
        tmp_path,
        extra_files={"scratch/page.html": "<script>alert(1)</script>", "bin/data.bin": bytes(range(256))},
    )
    assert upload(client, arc).status_code == 201
    text = client.get(f"/runs/{DEFAULT_RUN_ID}/files/solution.py")
    assert text.status_code == 200
    assert text.headers["content-type"] == "text/plain; charset=utf-8"
    assert text.headers["x-content-type-options"] == "nosniff"
    assert "FP8 GEMM" in text.text
    html = client.get(f"/runs/{DEFAULT_RUN_ID}/files/scratch/page.html")
    assert html.headers["content-type"] == "text/plain; charset=utf-8"  # never rendered as HTML
    assert "sandbox" in html.headers["content-security-policy"]
    binary = client.get(f"/runs/{DEFAULT_RUN_ID}/files/bin/data.bin")
    assert binary.headers["content-type"] == "application/octet-stream"
    assert binary.headers["content-disposition"].startswith("attachment")
    assert binary.content == bytes(range(256))
    assert client.get(f"/runs/{DEFAULT_RUN_ID}/files/nope.txt").status_code == 404
    assert client.get(f"/runs/{DEFAULT_RUN_ID}/files/../result.json").status_code == 404


def test_auth(make_services: Any, tmp_path: Path) -> None:
    svc = make_services()
    arc = good_archive(tmp_path)
    with TestClient(create_app(svc=svc)) as client:
        missing = upload(client, arc, headers=None)
        assert missing.status_code == 401 and missing.headers["www-authenticate"] == "Bearer"
        assert upload(client, arc, headers={"Authorization": "Bearer wrong"}).status_code == 403
        assert upload(client, arc, headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
        assert client.post(f"/runs/{DEFAULT_RUN_ID}/regrade").status_code == 401
        assert client.get("/runs").status_code == 200  # reads open by default
    assert table_counts(svc) == {"runs": 0, "artifacts": 0}
    gated = make_services(read_requires_token=True)
    with TestClient(create_app(svc=gated)) as client:
        assert client.get("/runs").status_code == 401
        assert client.get("/runs", headers={"Authorization": "Bearer wrong"}).status_code == 403
        assert client.get("/runs", headers=AUTH).status_code == 200
        assert client.get("/healthz").status_code == 200


def test_upload_over_the_limit_is_413_and_stores_nothing(make_services: Any, tmp_path: Path) -> None:
    svc = make_services(max_archive_bytes=2000)
    arc = good_archive(tmp_path)
    assert arc.stat().st_size > 2000
    with TestClient(create_app(svc=svc)) as client:
        blobs = svc.blobs.all_keys()  # the bundled deck's files, registered at startup
        r = upload(client, arc)
        assert r.status_code == 413
        assert r.json()["reason"] == "total_too_large"
    assert table_counts(svc) == {"runs": 0, "artifacts": 0}
    assert svc.blobs.all_keys() == blobs and staging_leftovers(svc) == []


def test_unknown_problem_is_stored_and_says_why(client: TestClient, tmp_path: Path) -> None:
    run_id = "20260801_224338_claude_claude-opus-4-8_99_unknown_problem"
    tree = build_run_tree(tmp_path / "t", run_id=run_id, problem="99_unknown_problem")
    r = upload(client, make_tar(tree, tmp_path / "u.tar.gz"))
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["problem"] == "99_unknown_problem"
    assert body["regradable"] is False
    assert "99_unknown_problem" in body["not_regradable_reason"]
    regrade = client.post(f"/runs/{run_id}/regrade", headers=AUTH)
    assert regrade.status_code == 409 and "not in any registered deck" in regrade.json()["detail"]
    assert regrade.json()["reason"] == "not_regradable"


def test_failure_while_storing_blobs_leaves_nothing(
    svc: Services, client: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault after some blobs were moved in: the transaction rolls back and those blobs go."""
    real_put = svc.blobs.put_file
    calls = {"n": 0}

    def failing_put(source: Path, sha256: str, *, move: bool = False) -> tuple[str, bool]:
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError("disk full (injected)")
        return real_put(source, sha256, move=move)

    monkeypatch.setattr(svc.blobs, "put_file", failing_put)
    before = svc.blobs.all_keys()
    with pytest.raises(OSError, match="injected"):
        upload(client, good_archive(tmp_path))
    assert calls["n"] == 5
    assert table_counts(svc) == {"runs": 0, "artifacts": 0}
    assert svc.blobs.all_keys() == before
    assert staging_leftovers(svc) == []


def test_report_rules_decks_health_metrics(client: TestClient, tmp_path: Path) -> None:
    assert upload(client, good_archive(tmp_path)).status_code == 201
    report = client.get(f"/runs/{DEFAULT_RUN_ID}/report.md")
    assert report.status_code == 200
    assert report.headers["content-type"].startswith("text/markdown")
    assert DEFAULT_RUN_ID in report.text
    assert report.headers["x-kaudit-report"] == "rendered"
    again = client.get(f"/runs/{DEFAULT_RUN_ID}/report.md")
    assert again.headers["x-kaudit-report"] == "cache" and again.text == report.text
    rules = client.get("/rules")
    assert rules.status_code == 200 and isinstance(rules.json(), list)
    decks = client.get("/decks").json()
    assert "hard" in {d["name"] for d in decks}
    hard = client.get("/decks/hard").json()
    assert DEFAULT_PROBLEM in hard["problems"]
    assert {f["path"] for f in hard["files"] if f["problem"] == DEFAULT_PROBLEM} >= {"check.py", "problem.yaml"}
    assert all(len(f["sha256"]) == 64 and len(f["md5"]) == 32 for f in hard["files"])
    assert client.get("/decks/nope").status_code == 404
    health = client.get("/healthz").json()
    assert health["status"] == "ok"
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert 'kaudit_ingests_total{outcome="created"}' in metrics.text
    assert 'kaudit_jobs{state="queued"}' in metrics.text
    assert "kaudit_request_seconds_bucket" in metrics.text
    schema = client.get("/openapi.json").json()
    assert "/runs/{run_id}/regrade" in schema["paths"]
    assert "archive" in json.dumps(schema["components"])


def test_oversize_body_refused_by_the_upload_guard(make_services: Any, tmp_path: Path) -> None:
    """A body far over the cap is refused by the ASGI guard (413 JSON) before the form is parsed."""
    svc = make_services(max_archive_bytes=1000)
    big = tmp_path / "big.tar"
    big.write_bytes(b"\0" * (200 << 10))
    with TestClient(create_app(svc=svc)) as client:
        r = upload(client, big)
        assert r.status_code == 413
        assert r.json()["reason"] == "total_too_large"
        assert 'kaudit_rejections_total{reason="total_too_large"}' in client.get("/metrics").text
    assert table_counts(svc) == {"runs": 0, "artifacts": 0} and staging_leftovers(svc) == []


def test_chunked_oversize_body_is_cut_off(make_services: Any) -> None:
    """No Content-Length (chunked): the guard counts the stream and answers 413 at the cap."""
    svc = make_services(max_archive_bytes=1000)

    def body() -> Any:
        yield (b'--xx\r\nContent-Disposition: form-data; name="archive"; filename="a.tar"\r\n'
               b"Content-Type: application/octet-stream\r\n\r\n")
        for _ in range(200):
            yield b"\0" * 1024
        yield b"\r\n--xx--\r\n"

    client = TestClient(create_app(svc=svc))
    r = client.post("/runs", content=body(), headers={**AUTH, "content-type": "multipart/form-data; boundary=xx"})
    assert r.request.headers.get("transfer-encoding") == "chunked"
    assert r.status_code == 413 and r.json()["reason"] == "total_too_large"
    assert table_counts(svc) == {"runs": 0, "artifacts": 0} and staging_leftovers(svc) == []


def test_separate_regrade_record_is_stored_as_a_measurement(client: TestClient, tmp_path: Path) -> None:
    """result.regrade.json (the spec's optional separate record): result.json keeps the in-run claim."""
    record = {"at": "2026-08-02T10:00:00+00:00", "host": "gpu-7", "gpu_index": 3, "gpu_name": "NVIDIA H200",
              "mode": "sequential_isolated", "correct": True, "peak_fraction": 0.289}
    arc = good_archive(tmp_path, result={"peak_fraction": 0.21}, extra_files={"result.regrade.json": json.dumps(record)})
    body = upload(client, arc).json()
    by_status = {m["status"]: m for m in body["measurements"]}
    assert by_status["in_run_contended"]["peak_fraction"] == pytest.approx(0.21)
    isolated = by_status["sequential_isolated"]
    assert isolated["peak_fraction"] == pytest.approx(0.289) and isolated["host"] == "gpu-7"
    assert body["current_verdict"]["measurement_status"] == "sequential_isolated"


def test_harness_regrade_record_keeps_contended_figures(client: TestClient, tmp_path: Path) -> None:
    """A result.json rewritten by a harness regrade: both figures are stored, the contended one kept."""
    regrade = {"at": "2026-08-02T10:00:00+00:00", "host": "gpu-7", "gpu_index": 3, "gpu_name": "NVIDIA H200",
               "mode": "sequential_isolated",
               "contended": {"correct": True, "peak_fraction": 0.21, "check_exit_code": 0}}
    arc = good_archive(tmp_path, result={"regrade": regrade, "peak_fraction": 0.289})
    body = upload(client, arc).json()
    by_status = {m["status"]: m for m in body["measurements"]}
    assert set(by_status) == {"in_run_contended", "sequential_isolated"}
    assert by_status["in_run_contended"]["peak_fraction"] == pytest.approx(0.21)
    isolated = by_status["sequential_isolated"]
    assert isolated["peak_fraction"] == pytest.approx(0.289)
    assert (isolated["host"], isolated["gpu_index"], isolated["gpu_name"]) == ("gpu-7", 3, "NVIDIA H200")
