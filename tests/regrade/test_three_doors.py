"""One archive, one verdict, whichever door it came through (issue 12: one verdict pipeline).

Each archive is judged three ways, each with kaudit's CPU regrade (Triton interpreter, small
shapes) and the pipeline's default probe policy:

* the CLI: `kaudit audit ARCHIVE --regrade --device cpu --json` (a subprocess);
* the HTTP service: upload, `POST /runs/{id}/regrade`, the CPU worker claims and runs the job,
  the verdict is read back with `GET /runs/{id}`;
* the library: `audit_rules.engine.audit_path(ARCHIVE, decks, regrade_device="cpu")`.

The verdict fields and the probe outcomes must be identical: a genuine Triton GEMM, a cache hack
(a stale K-padding cache) and a genuine failure (the genuine kernel with a wrong epilogue).

The CLI door's own checks of the CPU smoke regrade (formerly tests/regrade/test_audit_cli.py, which
ran the same two archives through the same command a second time) are made on the CLI's verdict
here: a smoke run never ranks and says so, the cache hack fails its probe on the CPU path, the
genuine kernel passes whatever the audit asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.config import Config
from fastapi.testclient import TestClient

from audit_rules.engine import audit_path
from ingest.decks import bundled_decks
from service.app import create_app
from service.context import Services
from service.settings import Settings
from service.worker.engine import JobProcessor
from tests.archive_factory import DEFAULT_RUN_ID, build_run_tree, make_tar
from tests.regrade.conftest import EXAMPLES, FP8, ROOT

pytestmark = pytest.mark.slow

TOKEN = "doors-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# The fields that make up "the verdict" (provenance such as producer_detail and timings may differ).
FIELDS = ("verdict", "reward_hack", "contamination", "correct", "correct_source", "failure_reason",
          "measurement_status", "publish_grade", "probes_required")


# A genuine failure: the genuine Triton kernel with its epilogue off by a factor of two.
BUG = ("out = (acc * scale[None, :]).to(tl.bfloat16)", "out = (acc * scale[None, :] * 2.0).to(tl.bfloat16)")


def _archive(tmp: Path, example: str, bug: tuple[str, str] | None) -> Path:
    text = (EXAMPLES / example).read_text()
    if bug is not None:
        assert bug[0] in text
        text = text.replace(*bug)
    tree = build_run_tree(tmp / "tree", solution=text, deck_problem_dir=FP8)
    return make_tar(tree, tmp / f"{example}.tar.gz")


def _summary(v: dict[str, Any]) -> dict[str, Any]:
    out = {k: v[k] for k in FIELDS}
    out["probes"] = sorted((p["probe"], p["status"]) for p in v["probes_run"])
    out["decisive"] = sorted(v["justification"].get("verdict") or [])
    return out


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAUDIT_")}
    env.update({"KAUDIT_DATA_DIR": str(tmp / "cli-data"), "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    return env


def _cli(tmp: Path, archive: Path) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "service.cli", "audit", str(archive), "--regrade", "--device", "cpu",
                           "--json"], cwd=ROOT, env=_env(tmp), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdict: dict[str, Any] = json.loads(proc.stdout)
    return verdict


def _api(tmp: Path, archive: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    url = f"sqlite:///{tmp / 'api.db'}"
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.attributes["database_url"] = url
    command.upgrade(cfg, "head")
    settings = Settings(database_url=url, data_dir=tmp / "api-data", api_tokens=TOKEN, worker_mode="off",
                        worker_device="cpu")
    svc = Services.build(settings)
    try:
        with TestClient(create_app(svc=svc)) as client:
            with open(archive, "rb") as fh:
                up = client.post("/runs", files={"archive": (archive.name, fh, "application/octet-stream")},
                                 headers=AUTH)
            assert up.status_code == 201, up.text
            queued = client.post(f"/runs/{DEFAULT_RUN_ID}/regrade", headers=AUTH)
            assert queued.status_code == 202, queued.text
            job = queued.json()["job"]
            assert job["probes"] == []  # no explicit set: the pipeline's probe policy
            done = JobProcessor(settings, svc.db, gpu=None, device="cpu").run_once(settings.worker_gpu_pool)
            assert done == job["id"]
            state = client.get(f"/jobs/{job['id']}").json()
            assert state["state"] == "succeeded", state
            detail = client.get(f"/runs/{DEFAULT_RUN_ID}").json()
    finally:
        svc.db.dispose()
    verdict: dict[str, Any] = detail["current_verdict"]
    assert verdict["produced_by"] == "regrade"
    return verdict


def _cli_smoke_checks(example: str, bug: tuple[str, str] | None, verdict: dict[str, Any]) -> None:
    """`kaudit audit --regrade --device cpu --json`: a sandboxed CPU smoke run, never publishable."""
    prov = verdict["context"]["grade_provenance"]
    assert prov["smoke"] is True and prov["device"] == "cpu" and prov["sandbox"], prov
    assert verdict["publish_grade"] is False  # a smoke run never ranks
    if example == "hack_stale_cache.py":
        sso = {p["probe"]: p for p in verdict["probes_run"]}["same_storage_overwrite"]
        assert sso["status"] == "failed" and sso["smoke"] is True and sso["device"] == "cpu", sso
        assert verdict["correct"] is False and verdict["failure_reason"] == "audit_empirical_failed"
        assert verdict["measurement_status"] == "sequential_isolated_empirical_failed"
    elif bug is None:  # the genuine kernel: the probes the findings asked for ran, none failed
        assert all(p["status"] in ("passed", "not_applicable", "flagged") for p in verdict["probes_run"]), \
            verdict["probes_run"]
        assert verdict["reward_hack"] is False and verdict["correct"] is True


def _library(archive: Path) -> dict[str, Any]:
    return audit_path(archive, bundled_decks(), regrade_device="cpu").to_dict()


@pytest.mark.parametrize(
    ("example", "bug", "expected"),
    [
        ("genuine_triton.py", None, {"verdict": "clean", "reward_hack": False, "correct": True}),
        ("hack_stale_cache.py", None, {"verdict": "reward_hack", "reward_hack": True, "correct": False}),
        # The genuine failure (BUG) goes through the same three doors by hand (KAUDIT_DOORS_ALL=1):
        # each case costs ~3 CPU minutes here and the CI suite must stay under 15 minutes.
        *([("genuine_triton.py", BUG, {"verdict": "fail", "reward_hack": False, "correct": False,
                                       "failure_reason": "check_failed"})] if os.environ.get("KAUDIT_DOORS_ALL") else []),
    ],
    ids=["genuine", "cache_hack", *(["genuine_fail"] if os.environ.get("KAUDIT_DOORS_ALL") else [])],
)
def test_one_archive_one_verdict_through_every_door(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, example: str,
                                                    bug: tuple[str, str] | None, expected: dict[str, Any]) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    archive = _archive(tmp_path, example, bug)
    library = _summary(_library(archive))
    cli_verdict = _cli(tmp_path, archive)
    _cli_smoke_checks(example, bug, cli_verdict)
    cli = _summary(cli_verdict)
    api = _summary(_api(tmp_path, archive, monkeypatch))
    if example == "hack_stale_cache.py":
        # Its cache is keyed on x.data_ptr(): whether checked_vs_timed's input lands where an earlier
        # probe's input of the same shape lay (and so hits that probe's stale entry) is the
        # allocator's choice in each door's probe process, not something the archive fixes. Seen in
        # a loaded full run: failed through the CLI, passed in the library.
        # Either outcome is a true reading of this hack; every other probe and the verdict must agree.
        for door in (library, cli, api):
            cvt = [st for name, st in door["probes"] if name == "checked_vs_timed"]
            assert cvt in (["passed"], ["failed"]), door["probes"]
            door["probes"] = [pr for pr in door["probes"] if pr[0] != "checked_vs_timed"]
            door["decisive"] = [d for d in door["decisive"] if d != "probe:checked_vs_timed"]
    assert cli == library, (cli, library)
    assert api == library, (api, library)
    for key, value in expected.items():
        assert library[key] == value, (key, library)
    assert library["probes"], "the contract probes ran"
