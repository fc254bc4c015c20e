"""The GPU lock: exclusive across processes, dies with its holder, refuses foreign GPU processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from graders import gpu_lock
from graders.gpu_lock import LockConfig, LockTimeout

ROOT = Path(__file__).resolve().parents[2]

HOLDER = """
import sys, time
from graders import gpu_lock
cfg = gpu_lock.LockConfig(path_template=sys.argv[1], refuse_foreign=False)
h = gpu_lock.acquire(0, cfg, run_dir="outputs/runs/holder_run")
print("locked", flush=True)
time.sleep(600)
"""


def _start_holder(template: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, template],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_lock_is_exclusive_across_processes_and_released_on_sigkill(tmp_path: Path) -> None:
    template = str(tmp_path / "gpu{gpu}.lock")
    holder = _start_holder(template)
    try:
        owner = Path(template.format(gpu=0) + ".owner").read_text()
        assert owner == f"{holder.pid}\toutputs/runs/holder_run\n"
        cfg = LockConfig(path_template=template, timeout_s=0.6, poll_s=0.05, refuse_foreign=False)
        t = time.monotonic()
        with pytest.raises(LockTimeout, match="still held"):
            gpu_lock.acquire(0, cfg)
        assert time.monotonic() - t >= 0.5
        # another GPU's lock is independent
        with gpu_lock.gpu_lock(1, cfg) as other:
            assert other.wait_s < 0.5
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # the lock file still exists on disk, but the flock died with the process
    assert Path(template.format(gpu=0)).exists()
    cfg = LockConfig(path_template=template, timeout_s=5, poll_s=0.05, refuse_foreign=False)
    with gpu_lock.gpu_lock(0, cfg, run_dir="kaudit-job-1") as handle:
        assert handle.wait_s < 1.0
        time.sleep(0.05)
        assert Path(template.format(gpu=0) + ".owner").read_text() == f"{os.getpid()}\tkaudit-job-1\n"
    assert handle.hold_s >= 0.05
    assert handle.released_hold_s is not None


def test_waits_for_the_holder_and_records_wait(tmp_path: Path) -> None:
    template = str(tmp_path / "gpu{gpu}.lock")
    holder = _start_holder(template)
    cfg = LockConfig(path_template=template, timeout_s=30, poll_s=0.05, refuse_foreign=False,
                     log_path=str(tmp_path / "gpu_lock.log"))
    killer = subprocess.Popen([sys.executable, "-c", f"import os,time,signal; time.sleep(0.7); os.kill({holder.pid}, 9)"])
    try:
        with gpu_lock.gpu_lock(0, cfg) as handle:
            assert handle.wait_s >= 0.5
    finally:
        killer.wait()
        holder.wait()
    events = [line.split()[1] for line in (tmp_path / "gpu_lock.log").read_text().splitlines()]
    assert events == ["wait", "start", "end"]


def _fake_smi(tmp_path: Path, apps: str) -> str:
    """A stand-in `nvidia-smi` binary (an external tool, not our code) listing the given apps."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  --query-gpu=*) echo "0, GPU-aaaa"; echo "1, GPU-bbbb" ;;\n'
        f"  --query-compute-apps=*) printf '{apps}' ;;\n"
        "esac\n"
    )
    smi.chmod(0o755)
    return str(smi)


def test_refuses_to_start_while_foreign_processes_use_the_gpu(tmp_path: Path) -> None:
    smi = _fake_smi(tmp_path, "1, python3, 20480, GPU-aaaa\\n")
    cfg = LockConfig(path_template=str(tmp_path / "g{gpu}.lock"), timeout_s=0.5, poll_s=0.1, nvidia_smi=smi)
    with pytest.raises(LockTimeout, match="foreign compute processes"):
        gpu_lock.acquire(0, cfg)
    # the flock was released on the way out: a plain acquire without the GPU check succeeds at once
    plain = LockConfig(path_template=str(tmp_path / "g{gpu}.lock"), timeout_s=0.2, refuse_foreign=False)
    gpu_lock.release(gpu_lock.acquire(0, plain))
    # the foreign process sits on GPU 0 only: GPU 1 is idle
    handle = gpu_lock.acquire(1, cfg)
    assert handle.foreign_seen == []
    gpu_lock.release(handle)


def test_own_processes_are_not_foreign(tmp_path: Path) -> None:
    smi = _fake_smi(tmp_path, f"{os.getpid()}, python3, 1024, GPU-aaaa\\n")
    cfg = LockConfig(path_template=str(tmp_path / "g{gpu}.lock"), timeout_s=0.5, poll_s=0.1, nvidia_smi=smi)
    handle = gpu_lock.acquire(0, cfg)
    assert handle.nvidia_smi_available
    gpu_lock.release(handle)


def test_parse_compute_apps() -> None:
    text = "123, python, 2048, GPU-x\n[N/A]\n456, /usr/bin/app, [N/A], GPU-y\n"
    apps = gpu_lock.parse_compute_apps(text)
    assert [(a.pid, a.used_memory_mib, a.gpu_uuid) for a in apps] == [(123, 2048.0, "GPU-x"), (456, None, "GPU-y")]
