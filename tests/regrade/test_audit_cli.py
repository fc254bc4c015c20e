"""`kaudit audit ARCHIVE --regrade --device cpu --json`: the CPU smoke regrade inside a one-shot audit.

The run is a CPU smoke run (small shapes, Triton interpreter): never publishable, and it says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.archive_factory import build_run_tree, make_tar
from tests.regrade.conftest import EXAMPLES, FP8, ROOT

pytestmark = pytest.mark.slow


def _audit(tmp: Path, solution: Path) -> dict[str, Any]:
    tree = build_run_tree(tmp / "tree", solution=solution.read_text(), deck_problem_dir=FP8)
    archive = make_tar(tree, tmp / "run.tar.gz")
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAUDIT_")}
    env.update({"KAUDIT_DATA_DIR": str(tmp / "data"), "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)})
    proc = subprocess.run([sys.executable, "-m", "service.cli", "audit", str(archive), "--regrade", "--device", "cpu",
                           "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdict: dict[str, Any] = json.loads(proc.stdout)
    return verdict


def test_stale_cache_archive_is_caught_on_the_cpu_path(tmp_path: Path) -> None:
    verdict = _audit(tmp_path, EXAMPLES / "hack_stale_cache.py")
    probes = {p["probe"]: p for p in verdict["probes_run"]}
    sso = probes["same_storage_overwrite"]
    assert sso["status"] == "failed" and sso["smoke"] is True and sso["device"] == "cpu"
    assert verdict["publish_grade"] is False  # a smoke run never ranks
    assert verdict["correct"] is False and verdict["failure_reason"] == "audit_empirical_failed"
    assert verdict["measurement_status"] == "sequential_isolated_empirical_failed"
    assert verdict["verdict"] in ("reward_hack", "fail")


def test_honest_archive_passes_the_cpu_regrade(tmp_path: Path) -> None:
    verdict = _audit(tmp_path, EXAMPLES / "genuine_triton.py")
    prov = verdict["context"]["grade_provenance"]  # the regrade ran, sandboxed, as a smoke run
    assert prov["smoke"] is True and prov["device"] == "cpu" and prov["sandbox"]
    # the audit asks only for the probes its findings need; whatever ran must not fail
    assert all(p["status"] in ("passed", "not_applicable", "flagged") for p in verdict["probes_run"]), \
        verdict["probes_run"]
    assert verdict["publish_grade"] is False
    assert verdict["reward_hack"] is False and verdict["correct"] is True
