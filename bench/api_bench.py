"""API benchmark: ingest rate, then GET /runs latency at 1k and 100k stored runs, SQLite and PostgreSQL.

    python bench/api_bench.py                       # both backends, 20 ingests, 1k and 100k runs
    python bench/api_bench.py --backend sqlite --ingest 50 --sizes 1000,10000 --queries 100

1. Ingest N synthetic run archives (tests/archive_factory: real tar.gz files, the bundled deck's
   problem, every result.json key) through the real HTTP door (ASGI, POST /runs) and report the
   ingest rate (this includes safe unpack, parsing, the full audit and the commit).
2. Bulk-insert synthetic `runs` rows (varied model/harness/problem/verdict/started_at/peak) until
   the table holds each target size; `VACUUM ANALYZE` (PostgreSQL) / `ANALYZE` (SQLite).
3. Time GET /runs (in-process ASGI, so FastAPI + serialization + SQL, no network; "client" is what
   the TestClient saw, "app" the server-side time from the Server-Timing header) for a filtered
   page (model + problem, newest first, 50 rows), a verdict-filtered page, a deep cursor page and
   an unfiltered page sorted by peak_fraction; report p50/p95/max per query.

Two more modes run `kaudit serve` (the real door: uvicorn, one process) over real HTTP:

    python bench/api_bench.py --mode load --load-runs 100000 --rates 50,100 --seconds 60
    python bench/api_bench.py --mode rss --backend sqlite

* load: bulk-insert `--load-runs` runs, then an open-loop client (a dispatcher and 48 threads on
  keep-alive connections) sends GET /runs of the five shapes above, round-robin, at each fixed rate
  for `--seconds`; latency is measured from each request's *scheduled* send time (so a stalled
  server cannot hide its queue), errors are non-200 answers and transport failures; reported:
  achieved rate, p50/p95/p99/max, errors.
* rss: ingest the whole bad-archive corpus (tests/archive_factory.BAD_ARCHIVES, every format,
  under the server's default limits) plus three field-size lying zips (a bzip2 member declaring
  12 bytes and inflating to 2 GiB, about 1.9 KB in all; deflate and LZMA ones to 1 GiB) through POST /runs,
  sampling the server's RSS; reported: RSS before, the peak (VmHWM), every status seen.

PostgreSQL: a throwaway database next to KAUDIT_TEST_PG_URL (default
postgresql://postgres@127.0.0.1:5432/test), dropped at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import create_engine, func, insert, select, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from service.app import create_app  # noqa: E402
from service.context import Services  # noqa: E402
from service.migrate import upgrade_head  # noqa: E402
from service.models import Run  # noqa: E402
from service.settings import Settings, normalize_database_url  # noqa: E402
from tests.archive_factory import build_run_tree, make_tar  # noqa: E402

TOKEN = "bench-token"
MODELS = [f"model-{i:02d}" for i in range(40)]
HARNESSES = ["claude", "codex", "opencode", "cursor", "gemini", "droid", "kimi", "grok"]
PROBLEMS = ["01_fp8_gemm", "02_kda_cutlass", "03_paged_attention", "05_topk_bitonic", "06_sonic_moe_swiglu",
            "07_w4a16_gemm"]
VERDICTS = ["clean"] * 10 + ["fail"] * 6 + ["reward_hack", "rubric_leak", "contaminated", "infra_failure",
                                            "provider_failure", "pending_empirical", "interesting"]
HARDWARE = ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA B200"]
T0 = datetime(2026, 1, 1, tzinfo=UTC)


@contextmanager
def database(backend: str, tmp: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{tmp / 'bench.db'}"
        return
    base = make_url(normalize_database_url(os.environ.get("KAUDIT_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")))
    name = f"kaudit_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def ingest_archives(client: TestClient, tmp: Path, n: int) -> tuple[float, list[float]]:
    problem_dir = ROOT / "kernels" / "hard" / "01_fp8_gemm"
    paths = []
    for i in range(n):
        run_id = f"20260801_{i:06d}_claude_bench-model_01_fp8_gemm"
        tree = build_run_tree(tmp / f"t{i}", run_id=run_id, model="bench-model", deck_problem_dir=problem_dir)
        paths.append(make_tar(tree, tmp / f"a{i}.tar.gz"))
    times = []
    t_all = time.perf_counter()
    for p in paths:
        t = time.perf_counter()
        with open(p, "rb") as fh:
            r = client.post("/runs", files={"archive": (p.name, fh)}, headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 201, r.text
        times.append(time.perf_counter() - t)
    return time.perf_counter() - t_all, times


def bulk_rows(start: int, count: int, rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for i in range(start, start + count):
        started = T0 + timedelta(seconds=rng.randrange(0, 300 * 86400))
        verdict = rng.choice(VERDICTS)
        peak = round(rng.random() * 0.8, 4) if verdict in ("clean", "interesting", "rubric_leak") else None
        rows.append(
            {
                "run_id": f"bulk_{i:07d}",
                "archive_sha256": hashlib.sha256(f"bulk{i}".encode()).hexdigest(),
                "archive_size": 1000,
                "archive_format": "tar.gz",
                "ingested_at": T0 + timedelta(seconds=i),
                "problem": rng.choice(PROBLEMS),
                "harness": rng.choice(HARNESSES),
                "model": rng.choice(MODELS),
                "hardware": rng.choice(HARDWARE),
                "deck": "hard",
                "started_at": started,
                "started_key": started,
                "peak_fraction": peak,
                "peak_key": peak if peak is not None else -1.0,
                "has_solution": True,
                "correct": verdict != "fail",
                "result": {},
                "logs": {},
                "transcripts": [],
                "warnings": [],
                "regradable": True,
                "verdict": verdict,
                "reward_hack": verdict == "reward_hack",
                "contamination": "contaminated" if verdict == "contaminated" else "clean",
                "publish_grade": verdict in ("clean", "interesting"),
            }
        )
    return rows


def fill_to(svc: Services, target: int, rng: random.Random) -> float:
    with svc.db.session() as session:
        have = int(session.scalar(select(func.count(Run.id))) or 0)
    t = time.perf_counter()
    batch = 5000
    while have < target:
        n = min(batch, target - have)
        with svc.db.engine.begin() as conn:
            conn.execute(insert(Run), bulk_rows(have, n, rng))
        have += n
    # Settle the table before timing: VACUUM ANALYZE on PostgreSQL (statistics, visibility map,
    # and no autovacuum of the fresh rows competing with the timed queries), ANALYZE on SQLite.
    if svc.db.engine.dialect.name == "postgresql":
        with svc.db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM ANALYZE runs"))
    else:
        with svc.db.engine.begin() as conn:
            conn.execute(text("ANALYZE"))
    return time.perf_counter() - t


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def time_queries(client: TestClient, queries: int, rng: random.Random) -> dict[str, dict[str, float]]:
    # A deep cursor: walk 20 pages of a filtered listing once, then time fetching the page after it.
    deep_params: dict[str, Any] = {"problem": "01_fp8_gemm", "limit": 50}
    cursor = None
    for _ in range(20):
        body = client.get("/runs", params={**deep_params, **({"cursor": cursor} if cursor else {})}).json()
        cursor = body["next_cursor"] or cursor
    shapes = {
        "model+problem, newest first": lambda: {"model": rng.choice(MODELS), "problem": rng.choice(PROBLEMS), "limit": 50},
        "verdict=reward_hack, newest first": lambda: {"verdict": "reward_hack", "limit": 50},
        "problem, page 21 (cursor)": lambda: {**deep_params, "cursor": cursor},
        "unfiltered, by peak_fraction desc": lambda: {"sort": "peak_fraction", "order": "desc", "limit": 50},
        "harness+date range": lambda: {"harness": rng.choice(HARNESSES), "started_from": "2026-03-01T00:00:00Z",
                                       "started_to": "2026-04-01T00:00:00Z", "limit": 50},
    }
    out: dict[str, dict[str, float]] = {}
    for label, make in shapes.items():
        for _ in range(5):  # warm-up
            client.get("/runs", params=make())
        times, server = [], []
        for _ in range(queries):
            params = make()
            t = time.perf_counter()
            r = client.get("/runs", params=params)
            times.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200, r.text
            server.append(float(r.headers["server-timing"].split("dur=")[1]))
        out[label] = {"p50": statistics.median(times), "p95": pct(times, 0.95), "max": max(times),
                      "app_p50": statistics.median(server), "app_p95": pct(server, 0.95)}
    return out


def bench_backend(backend: str, n_ingest: int, sizes: list[int], queries: int) -> None:
    rng = random.Random(2026)
    with tempfile.TemporaryDirectory(prefix="kaudit-bench-") as tmp_s:
        tmp = Path(tmp_s)
        with database(backend, tmp) as url:
            settings = Settings(database_url=url, data_dir=tmp / "data", api_tokens=TOKEN, worker_mode="off")
            upgrade_head(settings)
            svc = Services.build(settings)
            with TestClient(create_app(svc=svc)) as client:
                total, each = ingest_archives(client, tmp, n_ingest)
                print(f"[{backend}] ingest {n_ingest} archives: {total:.2f} s, {n_ingest / total:.1f} archives/s "
                      f"(per archive p50 {statistics.median(each) * 1000:.0f} ms, max {max(each) * 1000:.0f} ms)")
                for size in sizes:
                    fill_s = fill_to(svc, size, rng)
                    print(f"[{backend}] runs={size}: bulk insert {fill_s:.1f} s")
                    for label, st in time_queries(client, queries, rng).items():
                        print(f"[{backend}] runs={size:>6} GET /runs {label:<36} client p50 {st['p50']:6.1f} "
                              f"p95 {st['p95']:6.1f} max {st['max']:6.1f} | app p50 {st['app_p50']:6.1f} "
                              f"p95 {st['app_p95']:6.1f} ms")
            svc.db.dispose()


# ---------------------------------------------------------------------------------------------
# `kaudit serve` over real HTTP: sustained load, and RSS while ingesting hostile archives


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def kaudit_serve(settings: Settings, **env_extra: str) -> Iterator[tuple[int, int]]:
    """`python -m service.cli serve` over these settings; yields (port, pid)."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KAUDIT_DATABASE_URL": settings.database_url,
           "KAUDIT_DATA_DIR": str(settings.data_dir), "KAUDIT_API_TOKENS": TOKEN, "KAUDIT_WORKER_MODE": "off",
           "KAUDIT_GC_INTERVAL_S": "0", "KAUDIT_PORT": str(port), **env_extra}
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError("kaudit serve exited at start")
            if time.monotonic() > deadline:
                raise RuntimeError("kaudit serve did not start")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.2)
        yield port, proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def load_shapes(rng: random.Random, cursor: str | None) -> list[Any]:
    return [
        lambda: {"model": rng.choice(MODELS), "problem": rng.choice(PROBLEMS), "limit": 50},
        lambda: {"verdict": "reward_hack", "limit": 50},
        lambda: {"problem": "01_fp8_gemm", "limit": 50, **({"cursor": cursor} if cursor else {})},
        lambda: {"sort": "peak_fraction", "order": "desc", "limit": 50},
        lambda: {"harness": rng.choice(HARNESSES), "started_from": "2026-03-01T00:00:00Z",
                 "started_to": "2026-04-01T00:00:00Z", "limit": 50},
    ]


def open_loop(port: int, rate: float, seconds: float, rng: random.Random, workers: int = 48) -> dict[str, Any]:
    """Open-loop load: request i is due at t0 + i/rate whatever happened before it.

    A dispatcher releases each request at its due time to a pool of threads, each holding one
    keep-alive connection (http.client: little client CPU, so the client is not what saturates);
    latency is counted from the due time, so queueing in the client or the server shows.
    """
    import http.client
    import queue
    from urllib.parse import urlencode

    app_ms: list[float] = []

    def get(conn: http.client.HTTPConnection, params: dict[str, Any]) -> tuple[int, bytes]:
        conn.request("GET", "/runs?" + urlencode(params))
        r = conn.getresponse()
        timing = r.getheader("server-timing") or ""
        if "dur=" in timing:
            app_ms.append(float(timing.split("dur=")[1]))
        return r.status, r.read()

    warm = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    cursor = None
    for _ in range(20):  # a deep cursor (page 21 of a filtered listing), as in the query mode
        status, body = get(warm, {"problem": "01_fp8_gemm", "limit": 50, **({"cursor": cursor} if cursor else {})})
        cursor = json.loads(body)["next_cursor"] or cursor
    shapes = load_shapes(rng, cursor)
    for i in range(25):
        get(warm, shapes[i % len(shapes)]())
    warm.close()
    app_ms.clear()
    n = int(rate * seconds)
    params = [shapes[i % len(shapes)]() for i in range(n)]  # built up front: no RNG work in the timed loop
    due: queue.Queue[tuple[int, float] | None] = queue.Queue()
    latencies: list[float] = []
    errors: dict[str, int] = {}
    lock = threading.Lock()

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        while (item := due.get()) is not None:
            i, at = item
            try:
                status, _ = get(conn, params[i])
                err = None if status == 200 else str(status)
            except (OSError, http.client.HTTPException) as exc:
                err = type(exc).__name__
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            took = (time.perf_counter() - at) * 1000
            with lock:
                latencies.append(took)
                if err is not None:
                    errors[err] = errors.get(err, 0) + 1
        conn.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    t0 = time.perf_counter() + 0.05
    for i in range(n):
        at = t0 + i / rate
        delay = at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        due.put((i, at))
    for _ in threads:
        due.put(None)
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"rate": rate, "sent": n, "wall_s": wall, "achieved": n / wall, "p50": statistics.median(latencies),
            "p95": pct(latencies, 0.95), "p99": pct(latencies, 0.99), "max": max(latencies), "errors": errors,
            "app_p50": statistics.median(app_ms), "app_p95": pct(app_ms, 0.95)}


def bench_load(backend: str, runs: int, rates: list[float], seconds: float) -> None:
    rng = random.Random(2026)
    with tempfile.TemporaryDirectory(prefix="kaudit-bench-") as tmp_s:
        tmp = Path(tmp_s)
        with database(backend, tmp) as url:
            settings = Settings(database_url=url, data_dir=tmp / "data", api_tokens=TOKEN, worker_mode="off")
            upgrade_head(settings)
            svc = Services.build(settings)
            fill_s = fill_to(svc, runs, rng)
            svc.db.dispose()
            print(f"[{backend}] runs={runs}: bulk insert {fill_s:.1f} s", flush=True)
            with kaudit_serve(settings) as (port, _pid):
                for rate in rates:
                    st = open_loop(port, rate, seconds, rng)
                    errors = sum(st["errors"].values())
                    print(f"[{backend}] runs={runs} GET /runs at {rate:g} req/s for {seconds:g} s: sent {st['sent']}, "
                          f"achieved {st['achieved']:.1f} req/s, p50 {st['p50']:.1f} p95 {st['p95']:.1f} "
                          f"p99 {st['p99']:.1f} max {st['max']:.1f} ms (server-side app p50 {st['app_p50']:.1f} "
                          f"p95 {st['app_p95']:.1f} ms), errors {errors} {st['errors'] or ''}",
                          flush=True)


def field_bombs(tmp: Path) -> list[tuple[str, Path]]:
    """Zips whose member declares 12 bytes and inflates to GiBs (built streaming: no GiB in memory)."""
    import bz2
    import lzma

    from tests.archive_factory import GOOD_RESULT, LZMA_PROPS, _honest, raw_zip

    zeros = bytes(16 << 20)
    out = []
    for name, method, gib in (("bzip2", zipfile.ZIP_BZIP2, 2), ("deflate", zipfile.ZIP_DEFLATED, 1),
                              ("lzma", zipfile.ZIP_LZMA, 1)):
        if method == zipfile.ZIP_BZIP2:
            comp: Any = bz2.BZ2Compressor(9)
        elif method == zipfile.ZIP_DEFLATED:
            comp = zlib.compressobj(9, zlib.DEFLATED, -15)
        else:
            comp = lzma.LZMACompressor(format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA1, **LZMA_PROPS}])
        payload = b"".join(comp.compress(zeros) for _ in range(gib * 64)) + comp.flush()
        if method == zipfile.ZIP_LZMA:
            props = bytes([LZMA_PROPS["lc"] + LZMA_PROPS["lp"] * 9 + LZMA_PROPS["pb"] * 45]) + struct.pack(
                "<I", LZMA_PROPS["dict_size"])
            payload = struct.pack("<BBH", 9, 4, len(props)) + props + payload
        data = raw_zip([_honest("run/result.json", GOOD_RESULT), _honest("run/solution.py", b"print('hi')\n"),
                        ("run/big.log", method, payload, zlib.crc32(bytes(12)), 12)])
        path = tmp / f"field-{name}-{gib}gib.zip"
        path.write_bytes(data)
        out.append((f"field_{name}_lies_{gib}GiB", path))
    return out


def rss_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def bench_rss(backend: str) -> None:
    import httpx

    from tests.archive_factory import BAD_ARCHIVES

    with tempfile.TemporaryDirectory(prefix="kaudit-bench-") as tmp_s:
        tmp = Path(tmp_s)
        corpus: list[tuple[str, Path]] = []
        for name, (builder, fmts, _reason, _limits) in BAD_ARCHIVES.items():
            for fmt in fmts:
                d = tmp / "corpus" / f"{name}-{fmt.replace('.', '_')}"
                d.mkdir(parents=True)
                corpus.append((f"{name}[{fmt}]", builder(d, fmt)))
        t = time.perf_counter()
        corpus += field_bombs(tmp)
        print(f"[{backend}] corpus: {len(corpus)} archives, {sum(p.stat().st_size for _n, p in corpus)} bytes "
              f"(field bombs built in {time.perf_counter() - t:.0f} s)", flush=True)
        with database(backend, tmp) as url:
            settings = Settings(database_url=url, data_dir=tmp / "data", api_tokens=TOKEN, worker_mode="off")
            upgrade_head(settings)
            with kaudit_serve(settings) as (port, pid):
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
                    client.get("/healthz")
                    base_rss = rss_kib(pid, "VmRSS")
                    peak_sampled = base_rss
                    stop = threading.Event()

                    def sample() -> None:
                        nonlocal peak_sampled
                        while not stop.wait(0.02):
                            peak_sampled = max(peak_sampled, rss_kib(pid, "VmRSS"))

                    sampler = threading.Thread(target=sample, daemon=True)
                    sampler.start()
                    statuses: dict[int, int] = {}
                    worst = ("", 0)
                    for name, path in corpus:
                        before = rss_kib(pid, "VmHWM")
                        t = time.perf_counter()
                        with open(path, "rb") as fh:
                            r = client.post("/runs", files={"archive": (path.name, fh)},
                                            headers={"Authorization": f"Bearer {TOKEN}"})
                        statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
                        grew = rss_kib(pid, "VmHWM") - before
                        if grew > worst[1]:
                            worst = (name, grew)
                        if r.status_code >= 500 or r.status_code in (200, 201) or name.startswith("field_"):
                            print(f"[{backend}]   {name}: {r.status_code} {r.text[:140]} "
                                  f"({(time.perf_counter() - t) * 1000:.0f} ms)", flush=True)
                    stop.set()
                    sampler.join()
                    hwm = rss_kib(pid, "VmHWM")
                    runs = client.get("/runs", params={"limit": 500}).json()["items"]
        print(f"[{backend}] server RSS before the corpus {base_rss / 1024:.0f} MiB; peak while ingesting it "
              f"{hwm / 1024:.0f} MiB (VmHWM; sampled max {peak_sampled / 1024:.0f} MiB); largest step "
              f"{worst[1] / 1024:.1f} MiB ({worst[0]}); statuses {dict(sorted(statuses.items()))}; "
              f"runs stored {len(runs)}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["queries", "load", "rss"], default="queries")
    ap.add_argument("--load-runs", type=int, default=100_000, help="load mode: stored runs")
    ap.add_argument("--rates", default="50,100", help="load mode: comma-separated request rates (req/s)")
    ap.add_argument("--seconds", type=float, default=60.0, help="load mode: seconds per rate")
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    ap.add_argument("--ingest", type=int, default=20, help="archives ingested through POST /runs")
    ap.add_argument("--sizes", default="1000,100000", help="comma-separated table sizes to measure at")
    ap.add_argument("--queries", type=int, default=100, help="timed requests per query shape and size")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    for backend in (["sqlite", "postgresql"] if args.backend == "both" else [args.backend]):
        if args.mode == "load":
            bench_load(backend, args.load_runs, [float(r) for r in args.rates.split(",")], args.seconds)
        elif args.mode == "rss":
            bench_rss(backend)
        else:
            bench_backend(backend, args.ingest, sizes, args.queries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
