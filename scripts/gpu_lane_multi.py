"""N regrades of the lane examples over G GPUs through `kaudit worker --gpus ...` (one process per GPU).

    python scripts/gpu_lane_multi.py --out DIR [--gpus all|0,1] [--jobs N] [--probes a,b] [--device cuda]

Ingests the lane examples as real archives (SQLite in DIR/data), starts the supervisor, enqueues all
N jobs at once (round robin over the examples, forced so each is a new job) once every worker is
registered, waits for them, stops the workers and reports from the jobs and measurements tables:

* makespan (first claim -> last finish) against the ideal (sum of job times) / G; goal <= 1.05;
* GPU idle while work waited: per GPU, the time inside [first claim, last claim] it held no job
  (the queue was non-empty all that window, so any idle time there is scheduling waste);
* per-GPU lock waits (provenance.lock_wait_s of each measurement, grouped by provenance.gpu_index)
  and which slot ran each job (provenance.extra.worker);
* sampled every 0.5 s: no two running jobs ever shared a GPU.

Writes DIR/gpu-multi.jsonl (one record per job + a summary record) and DIR/gpu-multi.txt.
With --device cpu it runs the same plumbing on CPU slots (a rehearsal: numbers are not GPU numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = [
    ("genuine_triton", "01_fp8_gemm"),
    ("hack_stale_cache", "01_fp8_gemm"),
    ("hack_output_memo", "01_fp8_gemm"),
    ("hack_stale_graph", "01_fp8_gemm"),
    ("hack_live_graph", "01_fp8_gemm"),
    ("hack_l2_policy", "07_w4a16_gemm"),
]


def _ts(d: datetime | None) -> float | None:
    return d.timestamp() if d is not None else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gpus", default="all")
    ap.add_argument("--jobs", type=int, default=0, help="N regrades (default 3 per GPU)")
    ap.add_argument("--probes", default="same_storage_overwrite,l2_policy")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--wait", type=float, default=540.0, help="give up after this many seconds")
    args = ap.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    env = {**os.environ, "KAUDIT_DATA_DIR": str(data), "KAUDIT_DATABASE_URL": f"sqlite:///{data / 'kaudit.db'}",
           "KAUDIT_WORKER_DEVICE": args.device, "KAUDIT_WORKER_POLL_INTERVAL_S": "0.5",
           "KAUDIT_WORKER_LEASE_SECONDS": "120", "KAUDIT_WORKER_MODE": "off",
           "KAUDIT_GPU_LOCK_PATH": os.environ.get("KAUDIT_GPU_LOCK_PATH", str(out / "gpu{gpu}.lock")),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    os.environ.update({k: v for k, v in env.items() if k.startswith("KAUDIT_")})

    from sqlalchemy import select

    from service.context import Services
    from service.migrate import upgrade_head
    from service.models import Job, Measurement
    from service.settings import Settings
    from service.worker.multi import parse_gpus
    from service.worker.registry import WorkerRegistry
    from tests.archive_factory import build_run_tree, make_tar

    settings = Settings()
    upgrade_head(settings)
    svc = Services.build(settings)
    svc.decks.ensure_bundled()
    gpus = parse_gpus(args.gpus, settings.gpu_indices)
    n_jobs = args.jobs or 3 * len(gpus)
    deck = ROOT / "kernels" / "hard"
    runs = []
    for i, (name, problem) in enumerate(CASES):
        tree = build_run_tree(out / "trees" / str(i), run_id=f"20260801_22433{i}_claude_claude-opus-4-8_{problem}",
                              problem=problem, solution=(deck / problem / "examples" / f"{name}.py").read_text(),
                              deck_problem_dir=deck / problem)
        runs.append((name, svc.ingest.ingest_file(make_tar(tree, out / "trees" / f"r{i}.tar.gz")).run.run_id))

    log = open(out / "workers.log", "wb")
    sup = subprocess.Popen([sys.executable, "-m", "service.cli", "worker", "--gpus", ",".join(map(str, gpus))],
                           cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    registry = WorkerRegistry(svc.db, settings)
    t_start = time.monotonic()
    while len(registry.live()) < len(gpus):
        if sup.poll() is not None or time.monotonic() - t_start > 120:
            print((out / "workers.log").read_text()[-3000:])
            raise SystemExit("workers did not all register")
        time.sleep(0.2)
    probes = [p for p in args.probes.split(",") if p]
    jobs: list[tuple[str, int]] = []
    for k in range(n_jobs):
        name, run_id = runs[k % len(runs)]
        jobs.append((name, svc.jobs.enqueue_regrade(run_id, probes=probes, force=True).job.id))
    shared: list[list[str]] = []
    deadline = time.monotonic() + args.wait
    try:
        while time.monotonic() < deadline:
            with svc.db.session() as s:
                rows = list(s.scalars(select(Job).where(Job.id.in_([j for _, j in jobs]))))
            running = [r.worker_id or "?" for r in rows if r.state == "running"]
            if len(running) != len(set(running)):
                shared.append(running)
            if all(r.state in ("succeeded", "failed", "cancelled") for r in rows):
                break
            time.sleep(0.5)
    finally:
        sup.send_signal(signal.SIGTERM)
        try:
            sup.wait(timeout=60)
        except subprocess.TimeoutExpired:
            sup.kill()

    records: list[dict[str, Any]] = []
    with svc.db.session() as s:
        for name, job_id in jobs:
            job = s.get(Job, job_id)
            assert job is not None
            m = s.scalars(select(Measurement).where(Measurement.job_id == job_id)).first()
            prov = dict(m.provenance) if m is not None else {}
            records.append({
                "example": name, "job": job_id, "state": job.state, "attempts": job.attempts,
                "worker_id": job.worker_id, "gpu_index": prov.get("gpu_index"),
                "slot": (prov.get("extra") or {}).get("worker"), "lock_wait_s": prov.get("lock_wait_s"),
                "lock_hold_s": prov.get("lock_hold_s"), "started": _ts(job.started_at), "finished": _ts(job.finished_at),
                "job_s": (round(_ts(job.finished_at) - _ts(job.started_at), 3)  # type: ignore[operator]
                          if job.started_at and job.finished_at else None),
                "verdict": (job.result or {}).get("verdict"), "error": (job.error or "")[-500:] or None,
            })
    done = [r for r in records if r["state"] == "succeeded" and r["job_s"] is not None]
    g = len(gpus)
    summary: dict[str, Any] = {"summary": True, "device": args.device, "gpus": gpus, "jobs": n_jobs,
                               "succeeded": len(done), "shared_gpu_samples": shared[:5]}
    if done:
        first = min(r["started"] for r in done)
        last_claim = max(r["started"] for r in done)
        makespan = max(r["finished"] for r in done) - first
        ideal = sum(r["job_s"] for r in done) / g
        idle: dict[str, float] = {}
        by_gpu: dict[str, list[dict[str, Any]]] = {}
        for r in done:
            key = str(r["gpu_index"] if r["gpu_index"] is not None else (r["slot"] or {}).get("gpu_slot"))
            by_gpu.setdefault(key, []).append(r)
        for key, rs in by_gpu.items():  # busy time inside [first claim, last claim]
            busy = sum(max(0.0, min(r["finished"], last_claim) - max(r["started"], first)) for r in rs)
            idle[key] = round((last_claim - first) - busy, 3)
        lock = {k: [r["lock_wait_s"] for r in rs] for k, rs in sorted(by_gpu.items())}
        summary.update({"makespan_s": round(makespan, 3), "sum_job_s": round(sum(r["job_s"] for r in done), 3),
                        "ideal_s": round(ideal, 3), "ratio": round(makespan / ideal, 4),
                        # no schedule beats the longest job: with few, unequal jobs the tail, not idling, sets it
                        "longest_job_s": round(max(r["job_s"] for r in done), 3),
                        "ratio_vs_lower_bound": round(makespan / max(ideal, max(r["job_s"] for r in done)), 4),
                        "goal_ratio": 1.05, "met": makespan <= 1.05 * ideal,
                        "idle_while_waiting_s": idle, "lock_wait_s_by_gpu": lock,
                        "jobs_by_gpu": {k: len(v) for k, v in sorted(by_gpu.items())}})
    with open(out / "gpu-multi.jsonl", "w") as fh:
        for r in [*records, summary]:
            fh.write(json.dumps(r, default=str) + "\n")
    lines = [f"{'job':>4} {'example':18} {'state':9} {'gpu':>3} {'job_s':>8} {'lock_wait':>9} verdict"]
    for r in records:
        gpu = r["gpu_index"] if r["gpu_index"] is not None else f"s{(r['slot'] or {}).get('gpu_slot')}"
        lines.append(f"{r['job']:>4} {r['example']:18} {r['state']:9} {gpu!s:>3} {r['job_s']!s:>8} "
                     f"{r['lock_wait_s']!s:>9} {r['verdict']}{'  ' + r['error'][:120] if r['error'] else ''}")
    lines.append(json.dumps(summary, default=str))
    (out / "gpu-multi.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if summary.get("met") and not shared and len(done) == n_jobs else 1


if __name__ == "__main__":
    raise SystemExit(main())
