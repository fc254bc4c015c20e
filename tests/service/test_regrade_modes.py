"""Regrade modes through the service (SQLite and PostgreSQL): `--mode` on the CLI and the API,
refusals with reasons, a real CPU job in both modes whose FAIL line reaches the job, the
measurement, the verdict JSON, report.md and `kaudit regrade --wait`; real decks imported with
`kaudit deck import ... --harness` and found by `kaudit check --deck NAME`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from service.cli import app
from service.context import Services
from service.models import Job, Measurement
from tests.archive_factory import build_run_tree, make_tar
from tests.graders.conftest import OFFICIAL_DECK, OFFICIAL_SOLUTIONS, UPSTREAM, needs_upstream
from tests.service.conftest import AUTH, TOKEN

RUN_ID = "20260801_224338_claude_claude-opus-4-8_tiny_gemm"


@pytest.fixture
def env(database_url: str, svc: Services) -> dict[str, str]:
    return {"KAUDIT_DATABASE_URL": database_url, "KAUDIT_DATA_DIR": str(svc.settings.data_dir),
            "KAUDIT_API_TOKENS": TOKEN, "TRITON_INTERPRET": "1"}


def cli(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, list(args), env=env)


def _ingest_tiny(svc: Services, tmp_path: Path, solution: str, with_harness: bool = True) -> str:
    svc.decks.import_dir(OFFICIAL_DECK / "problems", "tiny", harness=OFFICIAL_DECK / "src" if with_harness else None)
    tree = build_run_tree(tmp_path / "tree", run_id=RUN_ID, problem="tiny_gemm",
                          solution=(OFFICIAL_SOLUTIONS / solution).read_text(),
                          deck_problem_dir=OFFICIAL_DECK / "problems" / "tiny_gemm")
    out = svc.ingest.ingest_file(make_tar(tree, tmp_path / "run.tar.gz"))
    assert out.run.regradable, out.run.not_regradable_reason
    return out.run.run_id


def test_mode_is_validated_and_part_of_the_job(client: TestClient, svc: Services, env: dict[str, str],
                                               tmp_path: Path) -> None:
    run_id = _ingest_tiny(svc, tmp_path, "honest.py", with_harness=False)
    url = f"/runs/{run_id}/regrade"
    assert client.post(url, headers=AUTH, json={"mode": "bogus"}).status_code == 422
    # the deck was imported without its harness, which its check.py/benchmark.py import: refused, saying so
    refused = client.post(url, headers=AUTH, json={"mode": "official"})
    detail = refused.json()["detail"]
    assert refused.status_code == 409 and "--mode official cannot grade tiny_gemm" in detail, detail
    assert "imported without its harness" in detail and "--harness" in detail
    both = client.post(url, headers=AUTH, json={"mode": "both", "probes": ["repeat_calls"]})
    assert both.status_code == 202 and both.json()["job"]["mode"] == "both"
    again = client.post(url, headers=AUTH, json={"mode": "both", "probes": ["repeat_calls"]})
    assert again.json()["created"] is False and again.json()["job"]["id"] == both.json()["job"]["id"]
    hardened = client.post(url, headers=AUTH, json={"mode": "hardened", "probes": ["repeat_calls"]})
    assert hardened.json()["created"] is True and hardened.json()["job"]["mode"] == "hardened"
    default = client.post(url, headers=AUTH, json={"probes": ["repeat_calls"]})
    assert default.json()["created"] is True and default.json()["job"]["mode"] is None
    bad = cli(env, "regrade", run_id, "--mode", "bogus")
    assert bad.exit_code == 2 and "unknown regrade mode 'bogus'" in bad.stderr
    off = cli(env, "regrade", run_id, "--mode", "official")
    assert off.exit_code == 2 and "--mode official cannot grade tiny_gemm" in off.stderr


@pytest.mark.backends("sqlite")  # a CPU regrade end to end: once, on one backend
def test_a_cpu_job_in_both_modes_shows_its_fail_line_everywhere(client: TestClient, svc: Services,
                                                               env: dict[str, str], tmp_path: Path) -> None:
    from service.worker.engine import JobProcessor

    run_id = _ingest_tiny(svc, tmp_path, "clamped.py")
    job_id = svc.jobs.enqueue_regrade(run_id, probes=["repeat_calls"], mode="both").job.id
    proc = JobProcessor(svc.settings, svc.db, gpu=None, device="cpu")
    assert proc.run_once(svc.settings.worker_gpu_pool, job_id) == job_id
    with svc.db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.state == "succeeded", job.error if job else None
        m = session.scalars(select(Measurement).where(Measurement.job_id == job_id)).one()
        prov = dict(m.provenance)
        # kaudit reaudit rebuilds the same record from the stored rows: both modes survive
        from service.reaudit import grade_from_rows

        rebuilt = grade_from_rows(m, [])
        assert (rebuilt.mode, rebuilt.decided_by) == ("both", "official")
        assert rebuilt.official["fail_line"] == prov["official"]["fail_line"]
        assert rebuilt.evidence()["fail_line"] == prov["official"]["fail_line"]
    assert prov["mode"] == "both" and prov["decided_by"] == "official"
    fail = prov["official"]["fail_line"]
    assert fail.startswith("FAIL: shape 0") and "case large_x: tolerance exceeded" in fail
    assert prov["official"]["failure"]["seed"] == 42 and prov["hardened"]["status"] == "fail"
    # GET /jobs/{id}
    got = client.get(f"/jobs/{job_id}").json()
    assert got["mode"] == "both" and got["result"]["verdict"] == "fail"
    assert got["result"]["regrade"]["fail_line"] == fail
    assert got["result"]["regrade"]["probes"][0]["probe"] == "repeat_calls"
    # the verdict JSON and report.md
    detail = client.get(f"/runs/{run_id}").json()
    ev = detail["current_verdict"]["context"]["regrade"]
    assert ev["decided_by"] == "official" and ev["fail_line"] == fail
    assert any(fail in r for r in detail["current_verdict"]["reasons"])
    md = client.get(f"/runs/{run_id}/report.md").text
    assert "## Regrade" in md and "case large_x: tolerance exceeded" in md
    # kaudit regrade --wait on the finished job prints the same evidence
    waited = cli(env, "regrade", run_id, "--mode", "both", "--probes", "repeat_calls", "--wait")
    assert waited.exit_code == 0, waited.output
    assert "verdict=fail" in waited.stdout and "decided_by=official" in waited.stdout
    assert f"official says: {fail}" in waited.stdout and "probe repeat_calls:" in waited.stdout


@needs_upstream
def test_real_decks_import_and_check_finds_them_by_name(env: dict[str, str], tmp_path: Path) -> None:
    for problems, name, harness in (("hard/problems-h100", "kbh-hard-h100", "hard/src"),
                                    ("mega/problems", "kbh-mega", "mega/src"),
                                    ("cuda/problems-h100", "kbh-cuda-h100", "cuda/src")):
        res = cli(env, "deck", "import", str(UPSTREAM / problems), "--name", name, "--harness", str(UPSTREAM / harness))
        assert res.exit_code == 0, res.output
        assert "harness=src" in res.stdout
    listed = cli(env, "deck", "list").stdout
    assert "kbh-mega" in listed and "kbh-cuda-h100" in listed
    sol = tmp_path / "solution.py"
    from tests.graders.test_kbh_decks import FORBIDDEN_W4A16

    sol.write_text(FORBIDDEN_W4A16)
    res = cli(env, "check", str(sol), "--problem", "07_w4a16_gemm", "--deck", "kbh-hard-h100", "--device", "cpu")
    assert res.exit_code == 1
    assert res.stdout.strip().splitlines()[-1] == "FAIL: forbidden op used: torch.nn.functional.linear"
    missing = cli(env, "check", str(sol), "--problem", "07_w4a16_gemm", "--deck", "kbh-nope", "--device", "cpu")
    assert missing.exit_code == 2 and "no deck 'kbh-nope'" in missing.stderr and "kbh-hard-h100" in missing.stderr


@pytest.mark.backends("sqlite")  # a CPU regrade end to end: once, on one backend
def test_audit_regrade_mode_on_the_cli(svc: Services, env: dict[str, str], tmp_path: Path) -> None:
    svc.decks.import_dir(OFFICIAL_DECK / "problems", "tiny", harness=OFFICIAL_DECK / "src")
    tree = build_run_tree(tmp_path / "tree", run_id=RUN_ID, problem="tiny_gemm",
                          solution=(OFFICIAL_SOLUTIONS / "clamped.py").read_text(),
                          deck_problem_dir=OFFICIAL_DECK / "problems" / "tiny_gemm")
    arc = make_tar(tree, tmp_path / "run.tar.gz")
    bad = cli(env, "audit", str(arc), "--regrade", "--device", "cpu", "--mode", "bogus")
    assert bad.exit_code == 2 and "unknown mode 'bogus'" in bad.stderr
    res = cli(env, "audit", str(arc), "--regrade", "--device", "cpu", "--mode", "official")
    assert res.exit_code == 0, res.output
    assert "verdict=fail" in res.stdout and "regrade: mode=official decided_by=official" in res.stdout
    assert "official says: FAIL: shape 0" in res.stdout and "case large_x" in res.stdout
    assert "hardened:" not in res.stdout  # official mode alone runs no hardened grader


@pytest.mark.backends("postgresql")  # a CPU regrade end to end: once, on one backend
def test_a_job_that_passes_after_a_failed_build_says_so_and_is_not_published(
        client: TestClient, svc: Services, env: dict[str, str], tmp_path: Path) -> None:
    """The solution's extension build fails on a missing header (real g++/ninja of this host), it
    falls back to torch and passes both modes: the build fallback reaches the measurement, a
    rebuilt record, GET /jobs/{id}, the verdict (not published), report.md and `regrade --wait`."""
    import shutil

    if shutil.which("ninja") is None:
        pytest.skip("no ninja on this host: torch's extension builder refuses before compiling")
    from service.worker.engine import JobProcessor

    run_id = _ingest_tiny(svc, tmp_path, "build_fallback.py")
    job_id = svc.jobs.enqueue_regrade(run_id, probes=[], mode="both").job.id
    proc = JobProcessor(svc.settings, svc.db, gpu=None, device="cpu")
    assert proc.run_once(svc.settings.worker_gpu_pool, job_id) == job_id
    with svc.db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None and job.state == "succeeded", job.error if job else None
        m = session.scalars(select(Measurement).where(Measurement.job_id == job_id)).one()
        fb = dict(m.provenance)["build_fallback"]
        from service.reaudit import grade_from_rows

        assert grade_from_rows(m, []).build_fallback == fb
    assert m.correct is True and fb["reason"] == "build_dependency_missing"
    assert "official_check" in fb["steps"] and "kaudit_absent" not in str(fb)
    got = client.get(f"/jobs/{job_id}").json()
    assert got["result"]["regrade"]["build_fallback"] == fb
    verdict = client.get(f"/runs/{run_id}").json()["current_verdict"]
    assert verdict["correct"] is True and verdict["publish_grade"] is False
    assert any("failed extension build (build_dependency_missing)" in r for r in verdict["reasons"])
    md = client.get(f"/runs/{run_id}/report.md").text
    assert "**Build fallback:**" in md
    waited = cli(env, "regrade", run_id, "--mode", "both", "--probes", "", "--wait")
    assert waited.exit_code == 0, waited.output
    assert "BUILD FALLBACK: the solution's own output in the official check" in waited.stdout
