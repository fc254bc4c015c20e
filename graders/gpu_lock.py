"""Exclusive per-GPU lock shared with the benchmark harness.

A regrade must never overlap an agent session or another measurement on the same GPU. The harness
(KernelBench-Hard) serialises GPU use with an exclusive ``flock`` on a per-GPU lock file and
writes ``<lock>.owner`` holding ``pid<TAB>RUN_DIR`` for humans. We take the SAME lock (the path is
a template with ``{gpu}`` that operators point at the harness's lock), so the two exclude each
other, and in addition refuse to start while ``nvidia-smi`` lists compute processes on that GPU
that are not ours (a process that does not use the lock: a stray notebook, a crashed session).

The lock is an ``flock`` on an open file descriptor: the kernel drops it when the process dies
(SIGKILL included), so a stale lock file on disk never blocks anyone; the file's existence means
nothing, only the flock does. The owner file is informational and overwritten by each holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from graders.logformat import gpu_lock_line

DEFAULT_LOCK_TEMPLATE = "/tmp/kaudit-gpu{gpu}.lock"


class LockTimeout(Exception):
    """The lock (or an idle GPU) was not obtained within the configured wait: an infra failure."""


@dataclass(frozen=True)
class LockConfig:
    path_template: str = DEFAULT_LOCK_TEMPLATE  # e.g. "/var/lock/kbh-gpu{gpu}.lock" (the harness's)
    timeout_s: float = 6 * 3600.0  # give up waiting after this long (-> infra_failure, retried)
    poll_s: float = 2.0
    refuse_foreign: bool = True  # also wait while nvidia-smi shows foreign compute processes
    nvidia_smi: str = "nvidia-smi"
    log_path: str | None = None  # optional gpu_lock.log-style event log (spec grammar)

    def path_for(self, gpu: int | str) -> Path:
        return Path(self.path_template.format(gpu=gpu))


@dataclass(frozen=True)
class ComputeApp:
    pid: int
    name: str
    used_memory_mib: float | None
    gpu_uuid: str


@dataclass
class LockHandle:
    gpu: int | str
    path: Path
    fd: int
    wait_s: float
    acquired_monotonic: float
    acquired_at: str
    foreign_seen: list[ComputeApp] = field(default_factory=list)  # what we waited out, for the record
    released_hold_s: float | None = None
    nvidia_smi_available: bool = True

    @property
    def hold_s(self) -> float:
        if self.released_hold_s is not None:
            return self.released_hold_s
        return time.monotonic() - self.acquired_monotonic


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _log_event(config: LockConfig, event: str, extra: str = "") -> None:
    if not config.log_path:
        return
    line = gpu_lock_line(event, pid=os.getpid(), cmd="kaudit-regrade", time=_now_iso(), extra=extra)
    with contextlib.suppress(OSError), open(config.log_path, "a", encoding="utf-8") as fh:
        fh.write(line)


def gpu_uuid_for_index(gpu: int | str, nvidia_smi: str = "nvidia-smi") -> str | None:
    """Map a physical GPU index to its UUID (None when nvidia-smi is absent or the index unknown)."""
    if shutil.which(nvidia_smi) is None:
        return None
    try:
        out = subprocess.run(
            [nvidia_smi, "--query-gpu=index,uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0] == str(gpu):
            return parts[1]
    return None


def compute_apps(nvidia_smi: str = "nvidia-smi") -> list[ComputeApp] | None:
    """Every compute process nvidia-smi lists (all GPUs); None when nvidia-smi cannot be run."""
    if shutil.which(nvidia_smi) is None:
        return None
    try:
        out = subprocess.run(
            [
                nvidia_smi,
                "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_compute_apps(out)


def parse_compute_apps(text: str) -> list[ComputeApp]:
    apps: list[ComputeApp] = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        try:
            mem: float | None = float(parts[2])
        except ValueError:
            mem = None
        apps.append(ComputeApp(pid=int(parts[0]), name=parts[1], used_memory_mib=mem, gpu_uuid=parts[3]))
    return apps


def _own_pids() -> set[int]:
    """Our pid and every descendant (a sandboxed grader we started is not 'foreign')."""
    me = os.getpid()
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        # comm may hold spaces/parentheses: the ppid is the 2nd field after the LAST ')'
        rest = stat[stat.rfind(")") + 2 :].split()
        if len(rest) >= 2:
            children.setdefault(int(rest[1]), []).append(int(entry))
    own, stack = {me}, [me]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in own:
                own.add(child)
                stack.append(child)
    return own


def foreign_compute_apps(gpu: int | str, config: LockConfig) -> list[ComputeApp] | None:
    """Compute processes on this GPU that are not ours; None when that cannot be determined."""
    apps = compute_apps(config.nvidia_smi)
    if apps is None:
        return None
    uuid = gpu_uuid_for_index(gpu, config.nvidia_smi)
    own = _own_pids()
    return [a for a in apps if (uuid is None or a.gpu_uuid == uuid) and a.pid not in own]


def _write_owner(path: Path, run_dir: str) -> None:
    with contextlib.suppress(OSError):
        Path(f"{path}.owner").write_text(f"{os.getpid()}\t{run_dir}\n", encoding="utf-8")


def acquire(
    gpu: int | str,
    config: LockConfig,
    *,
    run_dir: str = "",
    on_wait: Callable[[str], None] | None = None,
) -> LockHandle:
    """Block until the GPU's flock is ours and no foreign compute process runs on it.

    Raises LockTimeout after ``config.timeout_s``. While waiting for foreign processes to leave we
    keep holding the flock, so no harness session can slip in between.
    """
    path = config.path_for(gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    start = time.monotonic()
    deadline = start + config.timeout_s
    announced = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not announced:
                    _log_event(config, "wait")
                    if on_wait:
                        on_wait(f"waiting for GPU lock {path}")
                    announced = True
                if time.monotonic() >= deadline:
                    _log_event(config, "lock_timeout")
                    raise LockTimeout(
                        f"GPU {gpu}: lock {path} still held after {config.timeout_s:.0f}s"
                    ) from None
                time.sleep(min(config.poll_s, max(0.01, deadline - time.monotonic())))
        seen: list[ComputeApp] = []
        smi_ok = True
        if config.refuse_foreign:
            while True:
                foreign = foreign_compute_apps(gpu, config)
                if foreign is None:
                    smi_ok = False
                    break
                if not foreign:
                    break
                seen.extend(a for a in foreign if a not in seen)
                if on_wait:
                    on_wait(f"GPU {gpu} busy: foreign pids {[a.pid for a in foreign]}")
                if time.monotonic() >= deadline:
                    _log_event(config, "lock_timeout")
                    raise LockTimeout(
                        f"GPU {gpu}: foreign compute processes {[(a.pid, a.name) for a in foreign]} "
                        f"still running after {config.timeout_s:.0f}s"
                    )
                time.sleep(config.poll_s)
    except BaseException:
        os.close(fd)  # closing drops the flock if we had it
        raise
    now = time.monotonic()
    _write_owner(path, run_dir)
    _log_event(config, "start")
    return LockHandle(
        gpu=gpu,
        path=path,
        fd=fd,
        wait_s=now - start,
        acquired_monotonic=now,
        acquired_at=_now_iso(),
        foreign_seen=seen,
        nvidia_smi_available=smi_ok,
    )


def release(handle: LockHandle) -> None:
    if handle.released_hold_s is not None:
        return
    handle.released_hold_s = time.monotonic() - handle.acquired_monotonic
    with contextlib.suppress(OSError):
        fcntl.flock(handle.fd, fcntl.LOCK_UN)
    with contextlib.suppress(OSError):
        os.close(handle.fd)


@contextlib.contextmanager
def gpu_lock(
    gpu: int | str,
    config: LockConfig | None = None,
    *,
    run_dir: str = "",
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[LockHandle]:
    cfg = config or LockConfig()
    handle = acquire(gpu, cfg, run_dir=run_dir, on_wait=on_wait)
    try:
        yield handle
    finally:
        release(handle)
        _log_event(cfg, "end", f"elapsed_s={handle.hold_s:.3f}")
