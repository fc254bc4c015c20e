"""`kaudit worker --gpus 0,1`: one REAL worker process per GPU slot, on SQLite and PostgreSQL.

On this CPU-only host the slots run the CPU device (Triton interpreter, smoke shapes): what is
checked is what does not need a GPU: one child process per slot with its own CUDA_VISIBLE_DEVICES,
each registered with its GPU index, one job at a time per slot, two slots working at once, the
slot written into the measurement's provenance, and jobs of a GPU pool (kind) that no live worker
serves waiting with that reason (also after the workers stop). Lock waits themselves need a GPU:
scripts/gpu_lane_multi.sh measures them on a multi-GPU host.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from service.cli import app
from service.context import Services
from service.models import Job, Measurement, WorkerRow
from service.worker.registry import LiveWorker, WorkerRegistry, waiting_reason_for
from tests.archive_factory import build_run_tree, make_tar
from tests.regrade.conftest import EXAMPLES, FP8, ROOT
from tests.regrade.test_worker import PROBES, _env, _job, _stop, db_url, services  # noqa: F401

pytestmark = pytest.mark.slow


def test_waiting_reason_names_the_missing_kind_and_busy_pools() -> None:
    h0 = LiveWorker("h:1:gpu0", "h200", 0, "cuda", busy=True)
    h1 = LiveWorker("h:2:gpu1", "h200", 1, "cuda", busy=False)
    assert waiting_reason_for("h200", [h0, h1]) is None
    assert waiting_reason_for("h200", [h0]) == "all 1 worker of GPU pool 'h200' are busy (cuda 0)"
    assert waiting_reason_for("b200", [h0, h1]) == (
        "no live worker serves GPU pool 'b200'; live workers serve 'h200' (2 workers)")
    assert "no live worker at all" in (waiting_reason_for("b200", []) or "")


@pytest.mark.parametrize(("spec", "needle"), [
    ("all", "nvidia-smi is not on PATH"),
    ("0,0", "named twice"),
    ("0,x", "bad --gpus"),
])
def test_bad_gpu_specs_are_refused(spec: str, needle: str, tmp_path: Path) -> None:
    env = {"KAUDIT_DATA_DIR": str(tmp_path / "data"), "PATH": str(tmp_path)}  # no nvidia-smi on this PATH
    out = CliRunner().invoke(app, ["worker", "--gpus", spec, "--once"], env=env)
    assert out.exit_code == 2, out.output
    assert needle in out.stderr


def _ingest(svc: Services, tmp: Path, solution: Path, run_id: str) -> str:
    svc.decks.ensure_bundled()
    tree = build_run_tree(tmp / "tree", run_id=run_id, solution=solution.read_text(), deck_problem_dir=FP8)
    outcome = svc.ingest.ingest_file(make_tar(tree, tmp / "run.tar.gz"))
    assert outcome.run.regradable, outcome.run.not_regradable_reason
    return outcome.run.run_id


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(kv.decode(errors="replace").partition("=")[::2] for kv in raw if b"=" in kv)


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2:].split()[1])


def _until(pred: Any, timeout: float, what: str, sup: subprocess.Popen[bytes], log: Path) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        if sup.poll() is not None:
            break
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}\n{log.read_text(errors='replace')[-4000:]}")


# No worker dies in this test, so no lease may lapse: test_worker's 4 s lease (there for its SIGKILL
# takeovers) let a busy 2-core host or a SQLite write lock stall a heartbeat past it, and the slot that
# finished first then took the other slot's still-running job over (oldest claimable first): one
# job on two slots, attempts 2, and the worker_id checks below failing on SQLite.
LEASE_S = "120"


def test_one_worker_process_per_gpu_slot_and_waiting_reasons(
    services: Any, db_url: str, tmp_path: Path  # noqa: F811
) -> None:
    svc: Services = services()
    registry = WorkerRegistry(svc.db, svc.settings)
    run_a = _ingest(svc, tmp_path / "a", EXAMPLES / "hack_output_memo.py", "20260801_000001_claude_m_01_fp8_gemm")
    run_b = _ingest(svc, tmp_path / "b", EXAMPLES / "genuine_triton.py", "20260801_000002_claude_m_01_fp8_gemm")

    # No worker at all yet: a job for B200s says why it waits, from the moment it is enqueued.
    # (forced: the idempotency key does not include the pool, so the h200 request below would get it back)
    b200 = svc.jobs.enqueue_regrade(run_a, probes=PROBES, gpu_pool="b200", force=True).job
    assert "no live worker serves GPU pool 'b200'" in (b200.waiting_reason or "")
    assert "no live worker serves GPU pool 'b200'" in (_job(svc, b200.id).waiting_reason or "")

    log = tmp_path / "supervisor.log"
    sup = subprocess.Popen([sys.executable, "-m", "service.cli", "worker", "--gpus", "0,1", "--pool", "h200"],
                           cwd=ROOT, env=_env(db_url, tmp_path / "data", KAUDIT_WORKER_LEASE_SECONDS=LEASE_S),
                           stdout=open(log, "wb"),
                           stderr=subprocess.STDOUT)
    try:
        live: list[LiveWorker] = _until(lambda: len(registry.live()) == 2 and registry.live(), 120,
                                        "two registered workers", sup, log)
        assert sorted(w.gpu_index for w in live) == [0, 1] and {w.gpu_pool for w in live} == {"h200"}
        with svc.db.session() as s:
            rows = {r.gpu_index: r for r in s.scalars(select(WorkerRow).where(WorkerRow.state != "stopped"))}
        pids = {g: r.pid for g, r in rows.items()}
        assert len(set(pids.values())) == 2 and sup.pid not in pids.values()
        for g, pid in pids.items():  # one child process per GPU, pinned to it
            assert _ppid(pid) == sup.pid
            assert _environ(pid).get("CUDA_VISIBLE_DEVICES") == str(g)

        # A worker's beat refreshes the reason: the kind is still missing, and it names what is served.
        _until(lambda: "live workers serve 'h200' (2 workers)" in (_job(svc, b200.id).waiting_reason or ""), 30,
               "the b200 job's reason to name the live pool", sup, log)

        ja = svc.jobs.enqueue_regrade(run_a, probes=PROBES, gpu_pool="h200").job
        jb = svc.jobs.enqueue_regrade(run_b, probes=PROBES, gpu_pool="h200").job
        assert len({b200.id, ja.id, jb.id}) == 3
        _until(lambda: all(_job(svc, j).state != "queued" for j in (ja.id, jb.id)), 60,
               "both h200 jobs to be claimed", sup, log)
        # Both slots busy: a third job says so when it is enqueued.
        # (run_b: run_a already has a forced job queued, and one queued forced regrade per run is the limit)
        jc = svc.jobs.enqueue_regrade(run_b, probes=PROBES, gpu_pool="h200", force=True).job
        if jc.state == "queued" and all(_job(svc, j).state == "running" for j in (ja.id, jb.id)):
            assert "all 2 workers of GPU pool 'h200' are busy" in (jc.waiting_reason or ""), jc.waiting_reason

        seen_overlap = False
        deadline = time.monotonic() + 420
        while True:  # sample: a slot never holds two jobs
            with svc.db.session() as s:
                running = [j for j in s.scalars(select(Job).where(Job.state == "running"))]
            owners = [j.worker_id for j in running]
            assert len(owners) == len(set(owners)) <= 2, owners
            seen_overlap |= len(owners) == 2
            if all(_job(svc, j).state in ("succeeded", "failed") for j in (ja.id, jb.id, jc.id)):
                break
            assert time.monotonic() < deadline and sup.poll() is None, log.read_text(errors="replace")[-4000:]
            time.sleep(0.2)
        assert seen_overlap
        jobs = {j: _job(svc, j) for j in (ja.id, jb.id, jc.id)}
        tail = log.read_text(errors="replace")[-4000:]
        assert all(j.state == "succeeded" for j in jobs.values()), ({j.id: j.error for j in jobs.values()}, tail)
        # one claim each: a job taken over from a live slot would have run on two slots at once
        assert [j.attempts for j in jobs.values()] == [1, 1, 1], ({j.id: j.progress for j in jobs.values()}, tail)
        assert jobs[ja.id].worker_id != jobs[jb.id].worker_id, tail
        assert jobs[ja.id].waiting_reason is None and jobs[jc.id].waiting_reason is None
        with svc.db.session() as s:
            for j in jobs.values():
                m = s.scalars(select(Measurement).where(Measurement.job_id == j.id)).one()
                slot = m.provenance["extra"]["worker"]
                assert slot["worker_id"] == j.worker_id
                assert slot["cuda_visible_devices"] == str(slot["gpu_slot"]) and slot["gpu_slot"] in (0, 1)
                assert "lock_wait_s" in slot and "lock_wait_s" in m.provenance
        assert _job(svc, b200.id).state == "queued" and _job(svc, b200.id).attempts == 0
    finally:
        _stop(sup)
    # Stopped workers are no longer live: the reason says there is no worker at all. Read as
    # GET /jobs/{id} reads it (the reason is refreshed at read time): two workers stopping at the
    # same moment may each refresh while the other still looked live, and the last word they
    # leave in the row can name a worker that is gone by now.
    assert registry.live() == []
    with svc.db.session() as s:
        assert {r.state for r in s.scalars(select(WorkerRow))} == {"stopped"}
    got = svc.jobs.get_with_run_id(b200.id)
    assert got is not None
    assert "no live worker at all" in (got[0].waiting_reason or "")
