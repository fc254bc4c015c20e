"""Re-audit benchmark: the 99 real kbh-dev archives, then a store of 1k / 3k / 10k runs.

    python bench/reaudit_bench.py                                  # everything (SQLite)
    python bench/reaudit_bench.py --sizes 1000,3000,10000 --jobs 1,2 --jobs-at-sizes 2
    python bench/reaudit_bench.py --only real --repeat 3

1. Real: a fresh data dir; the three real KBH decks imported with their harness
   (`kbh-hard-{h100,b200,rtxpro6000}`, as ../shared/kbh-dev/README.md says), the 99 archives of
   ../shared/kbh-dev/archives ingested through the ingest service (timed), then
   `kaudit reaudit --jobs J --json` run as an operator runs it: a fresh process (start-up, imports,
   the pool, the per-run DB reads, the judging and the diff all inside the wall time).
2. Store sizes: the 99 real runs are cloned until the store holds each size. A clone is a real
   stored run under a new run_id: its own result.json blob (the run_id rewritten), its own
   solution.py blob (the real solution plus one comment line, so no two clones share it), every
   other stored file shared with the original by content address (exactly what the blob store
   does with identical files), its run row and current verdict row (with findings) copied. So
   clone sizes ARE the real runs' sizes (solution 1-60 KB, the deck's template files, result.json);
   like the public dev archives they hold no transcript, check.log or benchmark.log. Then the whole
   store is re-audited at each size.

Every measurement reports the outer wall time, the re-audit's own wall time, runs/s, the
process-tree peak RSS (the CLI plus its pool, sampled every 20 ms from /proc: the sum over the
tree at the worst moment) and the machine's load average before the run (the dev box is shared).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHARED = ROOT.parent / "shared"
ARCHIVES = Path(os.environ.get("KBH_DEV_ARCHIVES", SHARED / "kbh-dev" / "archives"))
UPSTREAM = Path(os.environ.get("KBH_UPSTREAM", SHARED / "kbh-upstream" / "hard"))
for candidate in (Path("/work/shared/kbh-dev/archives"),):
    if not ARCHIVES.is_dir() and candidate.is_dir():
        ARCHIVES = candidate
if not UPSTREAM.is_dir() and Path("/work/shared/kbh-upstream/hard").is_dir():
    UPSTREAM = Path("/work/shared/kbh-upstream/hard")


def _tree_rss_kib(root_pid: int) -> int:
    """Sum of VmRSS over root_pid and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(pid)
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss[pid] = int(line.split()[1])
                break
    total, stack, seen = 0, [root_pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        total += rss.get(p, 0)
        stack.extend(children.get(p, []))
    return total


def run_cli(env: dict[str, str], *args: str) -> dict[str, Any]:
    import resource

    load = os.getloadavg()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0
    import threading

    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_kib(proc.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)  # the CLI and its reaped pool processes
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"kaudit {' '.join(args)} exited {proc.returncode}:\n{err.decode()[-3000:]}")
    doc = json.loads(out)
    return {"wall_s": round(wall, 3), "reaudit_wall_s": doc["wall_s"], "examined": doc["examined"],
            "changed": doc["changed"], "errors": doc["errors"], "appended": doc["appended"],
            "runs_per_s": round(doc["examined"] / wall, 2), "ms_per_run": round(1000 * wall / max(1, doc["examined"]), 2),
            "cpu_s": round(cpu, 2), "cpu_ms_per_run": round(1000 * cpu / max(1, doc["examined"]), 1),
            "judge_s": doc.get("judge_s"),
            "peak_tree_rss_mib": round(peak / 1024, 1), "load_before": [round(x, 2) for x in load]}


def setup_real(data: Path, env: dict[str, str]) -> dict[str, Any]:
    from service.context import Services
    from service.migrate import upgrade_head
    from service.settings import Settings

    if data.exists():
        shutil.rmtree(data)
    settings = Settings(data_dir=data)
    upgrade_head(settings)
    svc = Services.build(settings)
    for hw in ("h100", "b200", "rtxpro6000"):
        svc.decks.import_dir(UPSTREAM / f"problems-{hw}", f"kbh-hard-{hw}", harness=UPSTREAM / "src")
    archives = sorted(ARCHIVES.glob("*.tar.gz"))
    t0 = time.perf_counter()
    for a in archives:
        svc.ingest.ingest_file(a)
    ingest_s = time.perf_counter() - t0
    svc.db.dispose()
    return {"archives": len(archives), "ingest_s": round(ingest_s, 2),
            "archive_bytes": sum(a.stat().st_size for a in archives)}


def grow_store(data: Path, target: int) -> dict[str, Any]:
    """Clone the real runs (see the module docstring) until the store holds `target` runs."""
    from sqlalchemy import func, insert, select

    from service.blobs import BlobStore
    from service.db import Database
    from service.models import Artifact, FindingRow, Run, VerdictRow
    from service.settings import Settings

    settings = Settings(data_dir=data)
    db = Database(settings)
    blobs = BlobStore(settings.blob_dir)
    t0 = time.perf_counter()
    with db.session() as s:
        have = int(s.scalar(select(func.count(Run.id))) or 0)
        base = list(s.scalars(select(Run).where(~Run.run_id.contains("__syn")).order_by(Run.id)))
        arts = {r.id: list(s.scalars(select(Artifact).where(Artifact.run_id == r.id))) for r in base}
        verdicts = {r.id: s.get(VerdictRow, r.current_verdict_id) for r in base}
        findings = {v.id: list(s.scalars(select(FindingRow).where(FindingRow.verdict_id == v.id)))
                    for v in verdicts.values() if v is not None}
        s.expunge_all()
    run_cols = [c.key for c in Run.__table__.columns if c.key not in ("id", "run_id", "archive_sha256",
                                                                      "current_verdict_id")]
    v_cols = [c.key for c in VerdictRow.__table__.columns if c.key not in ("id", "run_id")]
    f_cols = [c.key for c in FindingRow.__table__.columns if c.key not in ("id", "verdict_id")]
    a_cols = [c.key for c in Artifact.__table__.columns if c.key not in ("id", "run_id")]
    k = have
    batch = 250
    while k < target:
        with db.session() as s, s.begin():
            for _ in range(min(batch, target - k)):
                b = base[k % len(base)]
                rid = f"{b.run_id}__syn{k:06d}"
                run = Run(run_id=rid, archive_sha256=hashlib.sha256(f"{b.archive_sha256}:{k}".encode()).hexdigest(),
                          **{c: getattr(b, c) for c in run_cols})
                run.result = {**(b.result or {}), "run_id": rid}
                s.add(run)
                s.flush()
                rows = []
                for a in arts[b.id]:
                    d = {c: getattr(a, c) for c in a_cols}
                    name = a.path.rsplit("/", 1)[-1]
                    if name in ("result.json", "solution.py"):
                        raw = blobs.path(a.blob_key).read_bytes()
                        if name == "result.json":
                            doc = json.loads(raw)
                            doc["run_id"] = rid
                            raw = json.dumps(doc, indent=2).encode()
                        else:
                            raw = raw + f"\n# synthetic clone {k} of {b.run_id}\n".encode()
                        key, _ = blobs.put_bytes(raw)
                        d.update(blob_key=key, sha256=hashlib.sha256(raw).hexdigest(), size=len(raw))
                    rows.append({**d, "run_id": run.id})
                if rows:
                    s.execute(insert(Artifact), rows)
                v = verdicts.get(b.id)
                if v is not None:
                    nv = VerdictRow(run_id=run.id, **{c: getattr(v, c) for c in v_cols})
                    s.add(nv)
                    s.flush()
                    frows = [{**{c: getattr(f, c) for c in f_cols}, "verdict_id": nv.id} for f in findings[v.id]]
                    if frows:
                        s.execute(insert(FindingRow), frows)
                    run.current_verdict_id = nv.id
                k += 1
    if db.engine.dialect.name == "sqlite":
        with db.engine.connect() as c:
            c.exec_driver_sql("ANALYZE")
    db.dispose()
    return {"store_runs": target, "cloned": target - have, "clone_s": round(time.perf_counter() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/kaudit-reaudit-bench"))
    ap.add_argument("--only", choices=("real", "store", "all"), default="all")
    ap.add_argument("--jobs", default="1,2", help="--jobs values for the real archives")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--sizes", default="1000,3000,10000")
    ap.add_argument("--jobs-at-sizes", default="2", help="--jobs values at each store size")
    ap.add_argument("--jobs1-max-size", type=int, default=1000, help="also --jobs 1 at sizes up to this")
    ap.add_argument("--out", type=Path, default=None, help="append JSON lines here")
    ap.add_argument("--reuse", action="store_true", help="keep the workdir's store (the 99 already ingested)")
    ap.add_argument("--sample", choices=("all", "originals"), default="all",
                    help="at each store size re-audit the whole store, or only the 99 original runs (the same "
                         "work at every size: what grows is only the store around it)")
    ap.add_argument("--full-at", default="", help="with --sample originals: also re-audit the whole store at "
                                                  "these sizes (with the first --jobs-at-sizes value)")
    args = ap.parse_args()
    data = args.workdir / "data"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KAUDIT_")},
           "KAUDIT_DATA_DIR": str(data), "PYTHONPATH": str(ROOT)}
    os.environ["KAUDIT_DATA_DIR"] = str(data)
    results: list[dict[str, Any]] = []

    def emit(rec: dict[str, Any]) -> None:
        results.append(rec)
        line = json.dumps(rec)
        print(line, flush=True)
        if args.out:
            with open(args.out, "a") as fh:
                fh.write(line + "\n")

    emit({"host": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "uptime": _uptime()}})
    if not args.reuse:
        emit({"setup": setup_real(data, env)})
    if args.only in ("real", "all"):
        for j in [int(x) for x in args.jobs.split(",")]:
            for r in range(args.repeat):
                emit({"case": "real-99", "jobs": j, "repeat": r, **run_cli(env, "reaudit", "--jobs", str(j), "--json",
                                                                          *_real_filter(data))})
    if args.only in ("store", "all"):
        for size in [int(x) for x in args.sizes.split(",")]:
            emit({"grow": grow_store(data, size)})
            jobs = [int(x) for x in args.jobs_at_sizes.split(",")]
            if size <= args.jobs1_max_size and 1 not in jobs:
                jobs = [1, *jobs]
            for j in jobs:
                if args.sample == "originals":
                    ids = [a for r in _original_ids(data) for a in ("--run-id", r)]
                    emit({"case": f"store-{size}-originals", "jobs": j,
                          **run_cli(env, "reaudit", "--jobs", str(j), "--json", *ids)})
                else:
                    emit({"case": f"store-{size}", "jobs": j, **run_cli(env, "reaudit", "--jobs", str(j), "--json")})
            if args.sample == "originals" and str(size) in args.full_at.split(","):
                emit({"case": f"store-{size}", "jobs": jobs[-1],
                      **run_cli(env, "reaudit", "--jobs", str(jobs[-1]), "--json")})
    emit({"host_after": {"uptime": _uptime()}})
    return 0


def _real_filter(data: Path) -> list[str]:
    """No filter on a store of the 99 alone; their run ids once clones were added (--reuse)."""
    ids = _original_ids(data)
    from sqlalchemy import func, select

    from service.db import Database
    from service.models import Run
    from service.settings import Settings

    db = Database(Settings(data_dir=data))
    try:
        with db.session() as s:
            total = int(s.scalar(select(func.count(Run.id))) or 0)
    finally:
        db.dispose()
    return [] if total == len(ids) else [a for r in ids for a in ("--run-id", r)]


def _original_ids(data: Path) -> list[str]:
    from sqlalchemy import select

    from service.db import Database
    from service.models import Run
    from service.settings import Settings

    db = Database(Settings(data_dir=data))
    try:
        with db.session() as s:
            return list(s.scalars(select(Run.run_id).where(~Run.run_id.contains("__syn")).order_by(Run.id)))
    finally:
        db.dispose()


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    raise SystemExit(main())
