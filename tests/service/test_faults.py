"""Server faults: a full disk (a real 1 MiB tmpfs, real ENOSPC) is a 507 with nothing stored;
`kaudit gc` and the periodic task remove what killed ingests and regrades leave behind, and never
a blob a live ingest is about to reference (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from service.app import create_app
from service.context import Services
from service.gc import GarbageCollector
from service.models import Artifact, Job, Run, utcnow
from tests.archive_factory import DEFAULT_RUN_ID
from tests.service.conftest import staging_leftovers, table_counts
from tests.service.test_api import good_archive, upload
from tests.service.test_cli import env, run  # noqa: F401  (fixture)

HOUR = 3600.0


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs (root only; skipped, never faked, where mounting is not allowed)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): needs root")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _hex_text(n_bytes: int, seed: int) -> str:
    return random.Random(seed).randbytes(n_bytes // 2).hex()


def test_disk_full_is_507_with_nothing_stored(make_services: Any, tiny_fs: Path, tmp_path: Path) -> None:
    svc = make_services(data_dir=tiny_fs / "data")
    # 1) the upload itself does not fit (incompressible 1.5 MiB): the spool write fails
    big = good_archive(tmp_path / "a", extra_files={"scratch/blob.bin": os.urandom(3 << 19)})
    # 2) the upload fits, its unpacked files do not (hex text gzips to about half)
    wide = good_archive(tmp_path / "b", extra_files={"scratch/notes.txt": _hex_text(900_000, 1)})
    assert big.stat().st_size > 1 << 20 and wide.stat().st_size < 600_000
    with TestClient(create_app(svc=svc)) as client:
        deck_blobs = svc.blobs.all_keys()  # the bundled deck, stored at start
        st = os.statvfs(tiny_fs)
        free = st.f_bavail * st.f_frsize
        assert big.stat().st_size > free > wide.stat().st_size + 100_000  # wide's spool fits, its files do not
        for arc in (big, wide):
            r = upload(client, arc)
            assert r.status_code == 507, r.text
            assert r.json()["reason"] == "insufficient_storage" and "nothing was stored" in r.json()["detail"]
        assert 'kaudit_rejections_total{reason="insufficient_storage"}' in client.get("/metrics").text
        assert table_counts(svc) == {"runs": 0, "artifacts": 0}
        assert svc.blobs.all_keys() == deck_blobs and staging_leftovers(svc) == []
        assert not any((svc.blobs.root / ".tmp").iterdir()) if (svc.blobs.root / ".tmp").exists() else True
        # Space back: the same upload is stored whole (nothing half-stored was in its way).
        subprocess.run(["mount", "-o", "remount,size=16m", str(tiny_fs)], check=True)
        ok = upload(client, wide)
        assert ok.status_code == 201, ok.text
    assert table_counts(svc)["runs"] == 1
    with svc.db.session() as session:
        keys = set(session.scalars(select(Artifact.blob_key)).all())
    assert keys | deck_blobs == svc.blobs.all_keys()


def _age(path: Path, seconds: float) -> None:
    t = time.time() - seconds
    for p in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(p, (t, t), follow_symlinks=False)


def test_gc_removes_leftovers_and_orphans_only(
    env: dict[str, str], svc: Services, tmp_path: Path  # noqa: F811
) -> None:
    with TestClient(create_app(svc=svc)) as client:
        assert upload(client, good_archive(tmp_path)).status_code == 201
    stored = svc.blobs.all_keys()
    for key in stored:  # referenced blobs, however old, stay
        _age(svc.blobs.path(key), 10 * HOUR)
    staging, scratch = svc.settings.staging_dir, svc.settings.scratch_dir
    (staging / "upload-dead").write_bytes(b"x" * 1000)
    (staging / "dead-unpack" / "files").mkdir(parents=True)
    (staging / "dead-unpack" / "files" / "result.json").write_text("{}")
    (staging / "live-unpack").mkdir()
    (staging / "live-unpack" / "f").write_text("being written")
    _age(staging / "upload-dead", 2 * HOUR)
    _age(staging / "dead-unpack", 2 * HOUR)
    _age(staging / "live-unpack", 2 * HOUR)
    (staging / "live-unpack" / "g").write_text("just now")  # the newest file decides
    with svc.db.session() as session, session.begin():
        run_pk = session.scalars(select(Run.id)).one()
        running = Job(run_id=run_pk, state="running", idempotency_key=f"t:{uuid.uuid4().hex}", probes=[],
                      progress={}, lease_expires_at=utcnow() + timedelta(minutes=5))
        dead = Job(run_id=run_pk, state="failed", idempotency_key=f"t:{uuid.uuid4().hex}", probes=[], progress={})
        session.add_all([running, dead])
    scratch.mkdir(parents=True)
    for name in (f"kaudit-job{running.id}-live", f"kaudit-job{dead.id}-dead", "kaudit-job999999-gone"):
        (scratch / name / "work").mkdir(parents=True)
        (scratch / name / "work" / "solution.py").write_text("x = 1\n")
        _age(scratch / name, 2 * HOUR)
    orphan, _ = svc.blobs.put_bytes(b"no row references me")
    young_orphan, _ = svc.blobs.put_bytes(b"an ingest may be about to reference me")
    _age(svc.blobs.path(orphan), 2 * HOUR)

    dry = run(env, "gc", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["removed"]["blobs"] == [orphan] and svc.blobs.exists(orphan)

    done = run(env, "gc", "--json")
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert sorted(report["removed"]["staging"]) == ["dead-unpack", "upload-dead"]
    assert sorted(report["removed"]["scratch"]) == sorted([f"kaudit-job{dead.id}-dead", "kaudit-job999999-gone"])
    assert report["removed"]["blobs"] == [orphan] and report["bytes_freed"] > 1000
    assert sorted(p.name for p in staging.iterdir()) == ["live-unpack"]
    assert [p.name for p in scratch.iterdir()] == [f"kaudit-job{running.id}-live"]
    assert svc.blobs.all_keys() == stored | {young_orphan}
    with TestClient(create_app(svc=svc)) as client:  # the run still serves every file
        detail = client.get(f"/runs/{DEFAULT_RUN_ID}").json()
        for art in detail["artifacts"]:
            assert client.get(f"/runs/{DEFAULT_RUN_ID}/files/{art['path']}").status_code == 200


def test_gc_beside_live_ingests_never_loses_a_blob(make_services: Any, tmp_path: Path) -> None:
    """Each archive reuses a blob that sits in the store as an old orphan: gc runs in a loop
    meanwhile; afterwards every artifact's blob exists and the one true orphan is gone."""
    svc = make_services()
    archives = []
    for i in range(8):
        shared = f"shared sidecar {i}\n" * 50
        arc = good_archive(tmp_path / f"a{i}", run_id=f"{DEFAULT_RUN_ID}_{i}",
                           extra_files={"scratch/shared.txt": shared})
        key, _ = svc.blobs.put_bytes(shared.encode())
        _age(svc.blobs.path(key), 2 * HOUR)
        archives.append(arc)
    lonely, _ = svc.blobs.put_bytes(b"lonely orphan")
    _age(svc.blobs.path(lonely), 2 * HOUR)
    collector = GarbageCollector(svc.settings, svc.db, svc.blobs, min_age_s=HOUR)
    stop = threading.Event()
    passes = 0

    def loop() -> None:
        nonlocal passes
        while not stop.is_set():
            collector.run()
            passes += 1

    t = threading.Thread(target=loop)
    t.start()
    try:
        with TestClient(create_app(svc=svc)) as client:
            for arc in archives:
                assert upload(client, arc).status_code == 201
    finally:
        stop.set()
        t.join()
    collector.run()
    assert passes >= 2
    with svc.db.session() as session:
        keys = set(session.scalars(select(Artifact.blob_key)).all())
    assert all(svc.blobs.exists(k) for k in keys), "gc removed a blob a committed artifact references"
    assert not svc.blobs.exists(lonely) and table_counts(svc)["runs"] == 8


def test_periodic_gc_runs_in_the_service(make_services: Any) -> None:
    svc = make_services(gc_interval_s=0.2, worker_mode="off")
    svc.settings.staging_dir.mkdir(parents=True)
    leftover = svc.settings.staging_dir / "upload-killed"
    leftover.write_bytes(b"half an upload")
    _age(leftover, 2 * HOUR)
    with TestClient(create_app(svc=svc, start_worker=True)):
        deadline = time.monotonic() + 10
        while leftover.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    assert not leftover.exists()
