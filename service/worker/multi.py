"""One worker process per GPU: `kaudit worker --gpus all` / `--gpus 0,1` (the supervisor) and `--gpus N` (one GPU).

Why processes, not threads: a CUDA context, a crashed driver call or a leaked allocation belongs to
a process; one process per GPU, pinned with CUDA_VISIBLE_DEVICES, cannot touch another GPU, and a
worker that dies takes only its own GPU's job with it (the lease brings that job back).

* The supervisor (`run_supervisor`) starts `kaudit worker --gpus <g>` once per physical GPU index
  `g` with CUDA_VISIBLE_DEVICES=<g>, restarts a child that dies, and on SIGTERM/SIGINT stops them
  all (SIGTERM, then SIGKILL after a grace period). `--gpus all` asks nvidia-smi which GPUs exist.
* A single-GPU worker (`run_gpu_worker`) registers itself in `workers` (service.worker.registry),
  heart-beats and refreshes the waiting reasons of queued jobs, and takes ONE job at a time from
  its pool: on PostgreSQL through Procrastinate (pg_queue, one slot), on SQLite (or with --once) by
  polling the jobs table. Each regrade takes that GPU's own flock (graders.gpu_lock, the path
  template with the PHYSICAL index, as the harness uses it), so jobs never share a GPU even with a
  second worker or a harness session on the same host. What the slot was (worker id, GPU index,
  CUDA_VISIBLE_DEVICES, lock file) is added to each measurement's provenance next to the lock
  wait the regrade measured (`lock_wait_s`).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from graders.results import GradeResult
from service.db import Database
from service.settings import Settings
from service.worker.engine import JobProcessor, RegradeFn
from service.worker.registry import RegistryBeat, WorkerRegistry

log = logging.getLogger(__name__)

RESTART_DELAY_S = 5.0
STOP_GRACE_S = 20.0


class GpuSpecError(ValueError):
    pass


def detect_gpus(nvidia_smi: str = "nvidia-smi") -> list[tuple[int, str]]:
    """(physical index, name) of every GPU nvidia-smi lists; GpuSpecError when it cannot tell."""
    if shutil.which(nvidia_smi) is None:
        raise GpuSpecError("--gpus all: nvidia-smi is not on PATH, so the GPUs cannot be listed; name them "
                           "(--gpus 0,1), or use KAUDIT_WORKER_DEVICE=cpu with --gpus 0,1 for CPU slots")
    try:
        out = subprocess.run([nvidia_smi, "--query-gpu=index,name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise GpuSpecError(f"--gpus all: nvidia-smi failed: {exc}") from exc
    gpus = []
    for line in out.splitlines():
        idx, _, name = line.partition(",")
        if idx.strip().isdigit():
            gpus.append((int(idx.strip()), name.strip()))
    if not gpus:
        raise GpuSpecError("--gpus all: nvidia-smi lists no GPU")
    return gpus


def parse_gpus(spec: str | None, default: list[int], nvidia_smi: str = "nvidia-smi") -> list[int]:
    if spec is None:
        return list(default)
    if spec.strip() == "all":
        return [i for i, _ in detect_gpus(nvidia_smi)]
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts):
        raise GpuSpecError(f"bad --gpus {spec!r}: expected all, or GPU indices such as 0,1")
    out = [int(p) for p in parts]
    if len(set(out)) != len(out):
        raise GpuSpecError(f"bad --gpus {spec!r}: a GPU is named twice (jobs never share a GPU)")
    return out


# ---------------------------------------------------------------------------------------------
# One GPU


def worker_id_for(gpu: int, device: str) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{'gpu' if device == 'cuda' else 'cpu'}{gpu}"


def slot_provenance(inner: RegradeFn, worker_id: str, gpu: int, settings: Settings) -> RegradeFn:
    """Wrap the regrade so each measurement records which slot graded it (next to its lock wait)."""

    def regrade(*args: Any, **kwargs: Any) -> GradeResult:
        grade = inner(*args, **kwargs)
        if grade.provenance is not None:
            grade.provenance.extra["worker"] = {
                "worker_id": worker_id, "gpu_slot": gpu,
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "lock_file": settings.gpu_lock_path.format(gpu=gpu) if kwargs.get("device") == "cuda" else None,
                "lock_wait_s": grade.provenance.lock_wait_s,
            }
        return grade

    return regrade


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    # The job in progress is abandoned like a crash: its lease expires and another worker retries
    # it (attempt counted); nothing half-written exists (the outcome is one transaction).
    raise SystemExit(128 + signum)


def run_gpu_worker(settings: Settings, gpu: int, pool: str, once: bool = False,
                   regrade_fn: RegradeFn | None = None) -> int:
    """The worker of ONE GPU (physical index `gpu`): register, heart-beat, one job at a time."""
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)  # pin this process (a sandboxed grader is pinned again)
    device = settings.worker_device
    worker_id = worker_id_for(gpu, device)
    if regrade_fn is None:
        from graders.regrade import regrade

        regrade_fn = regrade
    fn = slot_provenance(regrade_fn, worker_id, gpu, settings)
    db = Database(settings)
    registry = WorkerRegistry(db, settings)
    registry.register(worker_id, pool, gpu, device)
    beat = RegistryBeat(registry, [worker_id], settings.worker_poll_interval_s)
    beat.start()
    log.info("worker %s: pool %s, %s %s, CUDA_VISIBLE_DEVICES=%s", worker_id, pool, device, gpu,
             os.environ["CUDA_VISIBLE_DEVICES"])
    try:
        if not settings.is_sqlite and not once:
            from service.worker import pg_queue

            return pg_queue.run(settings, [gpu], pool, fn, worker_ids={gpu: worker_id, None: worker_id})
        signal.signal(signal.SIGTERM, _raise_exit)
        proc = JobProcessor(settings, db, gpu=gpu, regrade_fn=fn, worker_id=worker_id)
        while True:
            job_id = proc.run_once(pool)
            registry.beat(worker_id)
            if once:
                return 0
            if job_id is None:
                time.sleep(settings.worker_poll_interval_s)
    finally:
        beat.stop()
        db.dispose()


# ---------------------------------------------------------------------------------------------
# The supervisor


class Supervisor:
    """Start, watch and stop one `kaudit worker --gpus <g>` process per GPU."""

    def __init__(self, gpus: list[int], pool: str, *, once: bool = False, argv0: list[str] | None = None,
                 env: dict[str, str] | None = None, say: Callable[[str], None] | None = None) -> None:
        self.gpus, self.pool, self.once = gpus, pool, once
        self.argv0 = argv0 or [sys.executable, "-m", "service.cli"]
        self.env = dict(env if env is not None else os.environ)
        self.say = say or (lambda line: print(line, flush=True))
        self.children: dict[int, subprocess.Popen[bytes]] = {}
        self.stopping = threading.Event()

    def _spawn(self, gpu: int) -> subprocess.Popen[bytes]:
        env = {**self.env, "CUDA_VISIBLE_DEVICES": str(gpu), "KAUDIT_AUTO_MIGRATE": "false"}
        cmd = [*self.argv0, "worker", "--gpus", str(gpu), "--pool", self.pool, *(["--once"] if self.once else [])]
        proc = subprocess.Popen(cmd, env=env)
        self.say(f"gpu {gpu}: worker pid {proc.pid} (CUDA_VISIBLE_DEVICES={gpu}, pool {self.pool})")
        return proc

    def stop(self, *_: Any) -> None:
        self.stopping.set()

    def run(self) -> int:
        for g in self.gpus:
            self.children[g] = self._spawn(g)
        codes: dict[int, int] = {}
        try:
            while not self.stopping.is_set():
                for g, proc in list(self.children.items()):
                    code = proc.poll()
                    if code is None:
                        continue
                    if self.once:
                        codes[g] = code
                        del self.children[g]
                        continue
                    self.say(f"gpu {g}: worker pid {proc.pid} exited with {code}; restarting in {RESTART_DELAY_S:.0f} s")
                    if self.stopping.wait(RESTART_DELAY_S):
                        break
                    self.children[g] = self._spawn(g)
                if self.once and not self.children:
                    break
                self.stopping.wait(0.5)
        finally:
            self._stop_children()
        return max(codes.values(), default=0) if self.once else 0

    def _stop_children(self) -> None:
        for proc in self.children.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for g, proc in self.children.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.say(f"gpu {g}: worker pid {proc.pid} did not stop in {STOP_GRACE_S:.0f} s; killing it")
                proc.kill()
                proc.wait(timeout=10)


def run_supervisor(gpus: list[int], pool: str, once: bool = False) -> int:
    sup = Supervisor(gpus, pool, once=once)
    signal.signal(signal.SIGTERM, sup.stop)
    signal.signal(signal.SIGINT, sup.stop)
    return sup.run()
