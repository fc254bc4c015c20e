"""The first hour as a new operator meets it: clear answers instead of silent or misleading ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from service.app import create_app
from service.cli import app as cli_app
from service.context import Services
from service.runs.repository import hardware_matches
from service.worker.engine import JobProcessor
from tests.archive_factory import DEFAULT_RUN_ID
from tests.service.conftest import AUTH, TOKEN
from tests.service.test_api import good_archive, upload

RTX = "NVIDIA RTX PRO 6000 Blackwell Server Edition"


def test_upload_without_configured_tokens_says_so(make_services: Any, tmp_path: Path) -> None:
    svc = make_services(api_tokens="")
    with TestClient(create_app(svc=svc)) as client:
        r = upload(client, good_archive(tmp_path), headers=AUTH)
        assert r.status_code == 403
        assert "no API tokens are configured" in r.json()["detail"] and "KAUDIT_API_TOKENS" in r.json()["detail"]


@pytest.mark.parametrize(
    ("query", "stored", "hit"),
    [
        ("RTX PRO 6000", RTX, True), ("rtx pro 6000", RTX, True), ("RTX PRO 600", RTX, False),
        ("H100", "NVIDIA H100 80GB HBM3", True), ("H100 SXM", "NVIDIA H100 80GB HBM3", True),
        ("H100 PCIe", "NVIDIA H100 80GB HBM3", False), ("H200", "NVIDIA H200", True), ("H20", "NVIDIA H200", False),
        ("H100", "NVIDIA H200", False), (RTX, RTX, True),
    ],
)
def test_hardware_short_names(query: str, stored: str, hit: bool) -> None:
    assert hardware_matches(query, stored) is hit


def test_hardware_and_enum_filters_over_http(client: TestClient, tmp_path: Path) -> None:
    assert upload(client, good_archive(tmp_path, result={"hardware": RTX})).status_code == 201
    for q in ("RTX PRO 6000", RTX, "rtx pro 6000"):
        assert [r["run_id"] for r in client.get("/runs", params={"hardware": q}).json()["items"]] == [DEFAULT_RUN_ID]
    assert client.get("/runs", params={"hardware": "H100"}).json()["items"] == []
    bad = client.get("/runs", params={"verdict": "bogus"})
    assert bad.status_code == 422 and "allowed: clean" in bad.json()["detail"] and "reward_hack" in bad.json()["detail"]
    assert client.get("/runs", params={"contamination": "bogus"}).status_code == 422
    assert client.get("/runs", params={"verdict": "clean"}).status_code == 200
    page = client.get("/", params={"hardware": "RTX PRO 6000"})
    assert f"/ui/runs/{DEFAULT_RUN_ID}" in page.text


def test_failed_regrade_repost_says_what_happened(make_services: Any, tmp_path: Path, database_url: str) -> None:
    # A GPU-less host: the real regrade ends infra_failure (no CUDA device); one attempt, so the job fails.
    svc: Services = make_services(worker_device="cuda", worker_max_attempts=1, gpu_busy_timeout_s=1)
    with TestClient(create_app(svc=svc)) as client:
        assert upload(client, good_archive(tmp_path)).status_code == 201
        first = client.post(f"/runs/{DEFAULT_RUN_ID}/regrade", headers=AUTH)
        assert first.status_code == 202
        job_id = first.json()["job"]["id"]
        assert JobProcessor(svc.settings, svc.db, gpu=0).run_once(svc.settings.worker_gpu_pool) == job_id
        job = client.get(f"/jobs/{job_id}").json()
        assert job["state"] == "failed" and "no_cuda_device" in job["error"], job
        again = client.post(f"/runs/{DEFAULT_RUN_ID}/regrade", headers=AUTH)
        assert again.status_code == 409, again.text
        body = again.json()
        assert body["reason"] == "previous_job_failed" and body["job"]["id"] == job_id
        assert "force" in body["detail"] and "no_cuda_device" in body["detail"]
        forced = client.post(f"/runs/{DEFAULT_RUN_ID}/regrade", headers=AUTH, json={"force": True})
        assert forced.status_code == 202 and forced.json()["job"]["id"] != job_id
    env = {"KAUDIT_DATABASE_URL": database_url, "KAUDIT_DATA_DIR": str(svc.settings.data_dir), "KAUDIT_API_TOKENS": TOKEN}
    out = CliRunner().invoke(cli_app, ["regrade", DEFAULT_RUN_ID], env=env)
    assert out.exit_code == 2 and "already failed" in out.output and "--force" in out.output


def test_wait_prints_the_job_error(make_services: Any, tmp_path: Path, database_url: str) -> None:
    import threading

    svc: Services = make_services(worker_device="cuda", worker_max_attempts=1, gpu_busy_timeout_s=1)
    with TestClient(create_app(svc=svc)) as client:
        assert upload(client, good_archive(tmp_path)).status_code == 201
    env = {"KAUDIT_DATABASE_URL": database_url, "KAUDIT_DATA_DIR": str(svc.settings.data_dir), "KAUDIT_API_TOKENS": TOKEN,
           "KAUDIT_WORKER_DEVICE": "cuda", "KAUDIT_WORKER_MAX_ATTEMPTS": "1"}
    proc = JobProcessor(svc.settings, svc.db, gpu=0)
    done = threading.Event()

    def work() -> None:  # a worker beside the waiting CLI: bounded, stops when the CLI returns
        for _ in range(100):
            if done.is_set() or proc.run_once(svc.settings.worker_gpu_pool) is not None:
                return
            done.wait(0.2)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    out = CliRunner().invoke(cli_app, ["regrade", DEFAULT_RUN_ID, "--wait"], env=env)
    done.set()
    worker.join(timeout=30)
    assert out.exit_code == 1, out.output
    assert "state=failed" in out.output and "error:" in out.output and "no_cuda_device" in out.output


def test_cli_says_where_a_new_database_goes(tmp_path: Path) -> None:
    env = {"KAUDIT_DATA_DIR": str(tmp_path / "elsewhere"), "KAUDIT_DATABASE_URL": ""}
    out = CliRunner().invoke(cli_app, ["runs", "list"], env=env)
    assert out.exit_code == 0, out.output
    assert f"no database at {tmp_path / 'elsewhere' / 'kaudit.db'}" in out.output
    again = CliRunner().invoke(cli_app, ["runs", "list", "--verdict", "bogus"], env=env)
    assert again.exit_code == 2 and "allowed: clean" in again.output
    assert json.loads(CliRunner().invoke(cli_app, ["runs", "list", "--json"], env=env).stdout)["items"] == []


def test_check_without_cuda_has_its_own_exit_code(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a CUDA device")
    sol = Path(__file__).resolve().parents[3] / "kernels" / "hard" / "01_fp8_gemm" / "examples" / "genuine_triton.py"
    out = CliRunner().invoke(cli_app, ["check", str(sol), "--problem", "01_fp8_gemm", "--device", "cuda"])
    assert out.exit_code == 3 and "no_cuda_device" in out.output
    out = CliRunner().invoke(cli_app, ["bench", str(sol), "--problem", "01_fp8_gemm", "--device", "cuda"])
    assert out.exit_code == 3 and "no_cuda_device" in out.output
