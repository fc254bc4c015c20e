"""The job engine with REAL worker processes on SQLite and PostgreSQL.

A worker killed with SIGKILL mid-job leaves no half verdict; the job is retried (attempts=2) by the
next worker after the lease expires, or failed once it has used its attempts. The PostgreSQL worker
is the Procrastinate one (`kaudit worker`); the SQLite one is the polling loop; the embedded
in-process worker of `kaudit serve` is exercised too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from service.context import Services
from service.models import Job, Measurement, ProbeResultRow, Run, VerdictRow
from service.settings import Settings, normalize_database_url
from tests.archive_factory import build_run_tree, make_tar
from tests.regrade.conftest import EXAMPLES, FP8, ROOT, example_sidecars

pytestmark = pytest.mark.slow

PROBES = ["same_storage_overwrite"]


def _migrate(url: str) -> None:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.attributes["database_url"] = url
    command.upgrade(cfg, "head")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'kaudit.db'}"
        _migrate(url)
        yield url
        return
    base = make_url(normalize_database_url(os.environ.get("KAUDIT_TEST_PG_URL",
                                                          "postgresql://postgres@127.0.0.1:5432/test")))
    name = f"kaudit_worker_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:  # pragma: no cover - CI has PostgreSQL
        admin.dispose()
        pytest.skip(f"PostgreSQL not reachable: {exc.orig}")
    url = base.set(database=name).render_as_string(hide_password=False)
    try:
        _migrate(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _env(url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAUDIT_")}
    env.update({
        "KAUDIT_DATABASE_URL": url, "KAUDIT_DATA_DIR": str(data_dir), "KAUDIT_WORKER_DEVICE": "cpu",
        "KAUDIT_WORKER_LEASE_SECONDS": "4", "KAUDIT_WORKER_POLL_INTERVAL_S": "0.5",
        "KAUDIT_WORKER_MODE": "external", "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT),
    })
    env.update(extra)
    return env


@pytest.fixture
def services(db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Services]]:
    built: list[Services] = []

    def make(**overrides: Any) -> Services:
        for k, v in _env(db_url, tmp_path / "data").items():
            if k.startswith("KAUDIT_"):
                monkeypatch.setenv(k, v)
        svc = Services.build(Settings(**overrides))
        built.append(svc)
        return svc

    yield make
    for svc in built:
        svc.db.dispose()


def _ingest(svc: Services, tmp: Path, solution: Path) -> str:
    svc.decks.ensure_bundled()
    tree = build_run_tree(tmp / "tree", solution=solution.read_text(), deck_problem_dir=FP8,
                          extra_files=example_sidecars(solution))
    outcome = svc.ingest.ingest_file(make_tar(tree, tmp / "run.tar.gz"))
    assert outcome.run.regradable, outcome.run.not_regradable_reason
    return outcome.run.run_id


def _start_worker(url: str, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    log = open(tmp / f"{name}.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "service.cli", "worker", "--gpus", "0"], cwd=ROOT,
                            env=_env(url, tmp / "data"), stdout=log, stderr=subprocess.STDOUT)


def _job(svc: Services, job_id: int) -> Job:
    with svc.db.session() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job


def _wait(svc: Services, job_id: int, pred: Callable[[Job], bool], timeout: float, what: str,
          worker: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = _job(svc, job_id)
        if pred(job):
            return job
        if worker is not None and worker.poll() is not None:
            break
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}: job={_job(svc, job_id).__dict__}\n{tail}")


def _counts(svc: Services, run_id: str) -> dict[str, int]:
    with svc.db.session() as session:
        run_pk = session.scalar(select(Run.id).where(Run.run_id == run_id))
        return {
            "verdicts": int(session.scalar(select(func.count(VerdictRow.id)).where(VerdictRow.run_id == run_pk)) or 0),
            "measurements": int(session.scalar(select(func.count(Measurement.id)).where(Measurement.run_id == run_pk))
                                or 0),
            "probes": int(session.scalar(select(func.count(ProbeResultRow.id)).where(ProbeResultRow.run_id == run_pk))
                          or 0),
        }


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            _kill(proc)


def test_sigkill_mid_job_then_retry_succeeds(services: Callable[..., Services], db_url: str, tmp_path: Path) -> None:
    svc = services()
    run_id = _ingest(svc, tmp_path, EXAMPLES / "hack_stale_cache.py")
    before = _counts(svc, run_id)
    job_id = svc.jobs.enqueue_regrade(run_id, probes=PROBES).job.id
    first = _start_worker(db_url, tmp_path, "w1")
    try:
        running = _wait(svc, job_id, lambda j: j.state == "running" and j.phase in ("check", "benchmark", "probes",
                                                                                     "probes_verify"),
                        240, "the first worker to be mid-job", first, tmp_path / "w1.log")
        assert running.attempts == 1
        _kill(first)
        time.sleep(0.5)
        killed = _job(svc, job_id)
        assert killed.state == "running" and killed.attempts == 1  # the dead worker's lease is still there
        assert _counts(svc, run_id) == before  # no half verdict, measurement or probe row
    finally:
        _kill(first)
    second = _start_worker(db_url, tmp_path, "w2")
    try:
        done = _wait(svc, job_id, lambda j: j.state in ("succeeded", "failed"), 420, "the retry to finish", second,
                     tmp_path / "w2.log")
    finally:
        _stop(second)
    assert done.state == "succeeded", done.error
    assert done.attempts == 2
    assert done.result is not None and done.result["smoke"] is True
    probes = {p["probe"]: p["status"] for p in done.result["probes"]}
    assert probes == {"same_storage_overwrite": "failed"}
    after = _counts(svc, run_id)
    assert after == {"verdicts": before["verdicts"] + 1, "measurements": before["measurements"] + 1,
                     "probes": before["probes"] + 1}
    with svc.db.session() as session:
        verdict = session.scalars(select(VerdictRow).where(VerdictRow.job_id == job_id)).one()
        assert verdict.produced_by == "regrade" and f"regrade job {job_id} attempt 2" in verdict.producer_detail
        m = session.scalars(select(Measurement).where(Measurement.job_id == job_id)).one()
        assert m.source == f"regrade:{job_id}" and m.provenance["smoke"] is True
        assert m.provenance["sandbox"] and m.provenance["grader_version"]


def test_sigkill_after_last_attempt_marks_the_job_failed(services: Callable[..., Services], db_url: str,
                                                        tmp_path: Path) -> None:
    svc = services(worker_max_attempts=1)
    run_id = _ingest(svc, tmp_path, EXAMPLES / "hack_stale_cache.py")
    before = _counts(svc, run_id)
    job_id = svc.jobs.enqueue_regrade(run_id, probes=PROBES).job.id
    assert _job(svc, job_id).max_attempts == 1
    first = _start_worker(db_url, tmp_path, "w1")
    try:
        _wait(svc, job_id, lambda j: j.state == "running" and j.phase in ("check", "benchmark", "probes"), 240,
              "the first worker to be mid-job", first, tmp_path / "w1.log")
    finally:
        _kill(first)
    second = _start_worker(db_url, tmp_path, "w2")
    try:
        done = _wait(svc, job_id, lambda j: j.state in ("succeeded", "failed"), 120, "the job to be failed", second,
                     tmp_path / "w2.log")
    finally:
        _stop(second)
    assert done.state == "failed" and done.attempts == 1
    assert "lease expired" in (done.error or "")
    assert _counts(svc, run_id) == before


def test_inprocess_worker_runs_a_job_and_reports_progress(services: Callable[..., Services], db_url: str,
                                                          tmp_path: Path) -> None:
    from service.worker import start_inprocess_worker

    svc = services(worker_mode="inprocess")
    run_id = _ingest(svc, tmp_path, EXAMPLES / "hack_output_memo.py")
    worker = start_inprocess_worker(svc.settings)
    try:
        job_id = svc.jobs.enqueue_regrade(run_id, probes=PROBES).job.id
        seen_phases: set[str] = set()

        def progressed(job: Job) -> bool:
            if job.phase:
                seen_phases.add(job.phase)
            return job.state in ("succeeded", "failed")

        done = _wait(svc, job_id, progressed, 420, "the in-process worker")
    finally:
        worker.stop()
    assert done.state == "succeeded" and done.attempts == 1, done.error
    assert done.progress.get("phases", {}).get("check") is not None or "check" in seen_phases
    assert done.result is not None and done.result["probes"][0]["status"] == "failed"
    # idempotent enqueue: the same request returns the finished job, a forced one is new
    again = svc.jobs.enqueue_regrade(run_id, probes=PROBES)
    assert not again.created and again.job.id == job_id
