"""scripts/gpu_lane_real.sh --detach / --collect: a lane that outlives one device call.

The device keeps a process that started its own session running between calls while the machine
stays warm; the script copies the tree, starts the lane that way, and hands back what it wrote.
Here the lane is only asked for its help text (no GPU, no archive): what is tested is the hand-off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_lane_real.sh"


def _lane(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable, "KAUDIT_LANE_BG": str(tmp / "bg"), "OUT": str(tmp / "out")}
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def test_detached_lane_is_collected_in_a_later_call(tmp_path: Path) -> None:
    first = _lane(tmp_path, "--detach", "0", "--help")
    # not waited for: the call says it is still running (exit 3) and how to collect it
    assert first.returncode in (0, 3), first.stderr
    assert "detached lane started" in first.stdout
    if first.returncode == 3:
        assert "--collect WAIT" in first.stdout
    second = _lane(tmp_path, "--collect", "120")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "detached lane ended, rc=0" in second.stdout
    log = (tmp_path / "out" / "bg" / "lane.log").read_text()
    assert "usage:" in log and "--per-run" in log  # the lane itself ran, from the copied tree
    assert (tmp_path / "bg" / "tree" / "scripts" / "gpu_lane_real.py").is_file()
    assert not (tmp_path / "bg" / "tree" / ".venv").exists()


def test_collect_without_a_detached_lane_is_a_usage_error(tmp_path: Path) -> None:
    res = _lane(tmp_path, "--collect", "1")
    assert res.returncode == 2 and "no detached lane" in res.stderr
