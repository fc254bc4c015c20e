"""Run one grading step in a fresh, isolated subprocess and read its result over a private channel.

The solution never runs in the service or worker process. Each step (`check`, `bench`,
`probe_run`, `probe_verify`, `env`) starts `python -m graders.sandbox_child` in a new session,
pinned to one GPU, in a scratch copy of the solution and its sidecars, with private Triton and
torch-extension caches, a scrubbed environment, a wall-clock timeout that kills the whole process
group, and a memory cap. When bubblewrap works on the host the child also runs in new network and
PID namespaces with a read-only view of the system, the interpreter, kaudit's graders and the
canonical deck, a tmpfs /tmp and only the NVIDIA device nodes; otherwise the step runs as a plain
subprocess and the provenance says so ("subprocess (weaker: no namespaces)").

Result channel: the parent creates a pipe, passes its write end to the child (pass_fds) and sends a
random nonce over stdin. The grader reads the nonce BEFORE it imports anything of the solution,
writes a `started` message, and at the end ONE `result` message, both JSON lines carrying the
nonce. The parent never reads results from stdout (a solution printing `PASS` changes nothing),
and rejects a missing, malformed, nonce-less or duplicated message. See docs/regrade.md for what
this does and does not protect against (code running inside the child can reach the fd; the
correctness-critical probes therefore compare in a second child that never imports the solution).

Memory: RLIMIT_AS caps a CPU-only child (CUDA reserves terabytes of virtual address space, so an
address-space cap would break every CUDA child); every child, CUDA or not, is also watched by the
parent, which sums the resident set of the child's session and kills the group above the cap.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

BWRAP = "bwrap"
SANDBOX_BWRAP = "bwrap"
SANDBOX_SUBPROCESS = "subprocess (weaker: no namespaces)"

GRADERS_DIR = Path(__file__).resolve().parent
KAUDIT_ROOT = GRADERS_DIR.parent

# Sources and small data the solution may load from beside itself (never caches or binaries).
SIDECAR_SUFFIXES = {".py", ".cu", ".cuh", ".cpp", ".cc", ".c", ".h", ".hpp", ".ptx", ".txt", ".json", ".yaml"}
SIDECAR_SKIP_DIRS = {"cache", "bin", "cbin", "tmp", "agent_home", "__pycache__", ".git", "build"}
MAX_SIDECAR_BYTES = 64 << 20

_PASS_ENV = (
    "PATH",
    "LANG",
    "LC_ALL",
    "CUDA_HOME",
    "CUDA_PATH",
    "LD_LIBRARY_PATH",
    "CUDA_MODULE_LOADING",
    "TORCH_CUDA_ARCH_LIST",
    "MAX_JOBS",
    "CC",
    "CXX",
    "TRITON_PTXAS_PATH",
    "OMP_NUM_THREADS",
)


_PR_SET_PDEATHSIG = 1


@lru_cache(maxsize=1)
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL("libc.so.6", use_errno=True)


class SandboxSetupError(Exception):
    """The sandbox itself could not be prepared (not the solution's fault: infra)."""


@dataclass(frozen=True)
class SandboxConfig:
    device: str = "cpu"  # "cuda" | "cpu"
    gpu: int | None = None  # physical GPU index, pinned with CUDA_VISIBLE_DEVICES
    timeout_s: float = 1800.0
    mem_limit_mib: int | None = 32768  # resident-set cap of the whole child session
    mode: str = "auto"  # "auto" (bwrap when it works), "bwrap", "subprocess"
    python: str = sys.executable
    extra_env: tuple[tuple[str, str], ...] = ()
    extra_ro_paths: tuple[str, ...] = ()  # additional read-only binds (e.g. a CUDA toolkit elsewhere)


@dataclass
class StepResult:
    step: str
    ok: bool  # a valid result message arrived and the step itself reported success
    result: dict[str, Any] | None  # the grader's result payload
    error: str | None  # None | grader_error | no_result | no_start | channel_tampered | timeout | memory | setup
    detail: str  # human-readable explanation of `error`
    returncode: int | None
    timed_out: bool
    mem_killed: bool
    wall_s: float
    sandbox: str
    started: bool  # the grader announced itself before importing the solution
    stdout_tail: str = ""
    stderr_tail: str = ""
    peak_rss_mib: float = 0.0


@dataclass
class Workspace:
    """One regrade's scratch area: solution copy, private caches, probe outputs."""

    root: Path
    work: Path  # solution.py + sidecars (the untrusted child's cwd; writable)
    cache: Path  # TRITON_CACHE_DIR / TORCH_EXTENSIONS_DIR parents
    out: Path  # files the untrusted child hands to the trusted one (torch.save of plain tensors)
    clean: Path  # the trusted child's cwd (empty: nothing importable by accident)
    files: list[str] = field(default_factory=list)

    @property
    def solution(self) -> Path:
        return self.work / "solution.py"


def prepare_workspace(solution_dir: Path, root: Path) -> Workspace:
    """Copy solution.py and its sidecars (root-level sources and scratch/) into `root/work`.

    Symlinks are never followed; caches, binaries and agent homes are not copied (we build from
    source in a private cache). `solution_dir` may also be a path to solution.py itself.
    """
    solution_dir = Path(solution_dir)
    if solution_dir.is_file():
        solution_file, base = solution_dir, solution_dir.parent
    else:
        solution_file, base = solution_dir / "solution.py", solution_dir
    if not solution_file.is_file() or solution_file.is_symlink():
        raise FileNotFoundError(f"no solution.py at {solution_file}")
    ws = Workspace(root=root, work=root / "work", cache=root / "cache", out=root / "out", clean=root / "clean")
    for d in (ws.work, ws.cache / "triton", ws.cache / "torch_extensions", ws.out, ws.clean):
        d.mkdir(parents=True, exist_ok=True)
    total = 0

    def copy(src: Path, dst: Path) -> None:
        nonlocal total
        if src.is_symlink() or not src.is_file():
            return
        total += src.stat().st_size
        if total > MAX_SIDECAR_BYTES:
            raise SandboxSetupError(f"sidecars exceed {MAX_SIDECAR_BYTES >> 20} MiB")
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        ws.files.append(str(dst.relative_to(ws.work)))

    archive_root = (base / "result.json").is_file()
    code_suffixes = {".py", ".cu", ".cuh", ".cpp", ".cc", ".c", ".h", ".hpp", ".ptx"}
    scratch = base / "scratch"
    if scratch.is_dir() and not scratch.is_symlink():
        for dirpath, dirnames, filenames in os.walk(scratch, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if d not in SIDECAR_SKIP_DIRS)
            for name in sorted(filenames):
                src = Path(dirpath) / name
                if src.suffix in SIDECAR_SUFFIXES:
                    copy(src, ws.work / src.relative_to(scratch))
    # beside solution.py: every source (a bare solution folder also keeps small data files)
    allowed = code_suffixes if archive_root else SIDECAR_SUFFIXES
    for src in sorted(base.iterdir()):
        if src.suffix in allowed and src.name != "solution.py":
            copy(src, ws.work / src.name)
    copy(solution_file, ws.solution)
    return ws


# ---------------------------------------------------------------------------------------------
# bubblewrap


def _ro_paths(extra: Sequence[str]) -> list[str]:
    """Read-only binds: the system, the interpreter and its packages, kaudit's graders."""
    paths: list[str] = ["/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc", "/opt", "/sys"]
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths.extend(sorted(prefixes))
    for entry in sys.path:
        if not entry or not os.path.isdir(entry):
            continue
        real = os.path.realpath(entry)
        # never the whole kaudit checkout (it may hold the service's data dir): graders only
        if real == str(KAUDIT_ROOT) or str(KAUDIT_ROOT).startswith(real + os.sep) or real == "/":
            continue
        paths.append(real)
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry and os.path.isdir(entry) and os.path.realpath(entry) != str(KAUDIT_ROOT):
            paths.append(os.path.realpath(entry))
    paths.append(str(GRADERS_DIR))
    paths.extend(extra)
    seen: list[str] = []
    for p in paths:
        if p not in seen and os.path.exists(p):
            seen.append(p)
    return seen


def _bwrap_args(rw: Sequence[Path], ro: Sequence[str], cwd: Path) -> list[str]:
    args = [
        BWRAP,
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        "/tmp",
    ]
    for p in ro:
        args += ["--ro-bind", p, p]
    for dev in sorted(Path("/dev").glob("nvidia*")):
        args += ["--dev-bind", str(dev), str(dev)]
    if Path("/dev/shm").is_dir():
        args += ["--tmpfs", "/dev/shm"]
    for w in rw:
        args += ["--bind", str(w), str(w)]
    args += ["--chdir", str(cwd)]
    return args


@lru_cache(maxsize=4)
def bwrap_works(python: str = sys.executable) -> tuple[bool, str]:
    """Probe run: can bwrap start our interpreter with the binds we use? (cached per process)"""
    if shutil.which(BWRAP) is None:
        return False, "bwrap not installed"
    tmp = Path(os.environ.get("TMPDIR", "/tmp"))
    try:
        args = _bwrap_args([], _ro_paths(()), tmp if tmp.is_dir() else Path("/"))
        # chdir into a bound path: the tmpfs /tmp always exists inside
        args[-1] = "/tmp"
        proc = subprocess.run(
            [*args, python, "-c", "import sys; print('bwrap-ok')"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"bwrap probe failed: {exc}"
    if proc.returncode != 0 or "bwrap-ok" not in proc.stdout:
        return False, f"bwrap probe failed (rc={proc.returncode}): {proc.stderr.strip()[-300:]}"
    return True, "ok"


def resolve_mode(mode: str, python: str = sys.executable) -> tuple[str, str]:
    """The sandbox actually used for `mode` and why (auto falls back when bwrap is unusable)."""
    if mode == "subprocess":
        return SANDBOX_SUBPROCESS, "configured"
    works, why = bwrap_works(python)
    if works:
        return SANDBOX_BWRAP, "ok"
    if mode == "bwrap":
        raise SandboxSetupError(f"bubblewrap required but unusable: {why}")
    return SANDBOX_SUBPROCESS, why


# ---------------------------------------------------------------------------------------------
# process-group supervision


def _session_pids(sid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields after comm: state ppid pgrp session ...
        if len(rest) > 3 and int(rest[3]) == sid:
            pids.append(int(entry))
    return pids


def _rss_mib(pids: Sequence[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", encoding="utf-8") as fh:
                total += int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def kill_session(pid: int) -> None:
    """SIGKILL the child's process group and every process still in its session."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for other in _session_pids(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(other, signal.SIGKILL)


def _tail(data: bytes, n: int = 4000) -> str:
    return data[-n:].decode("utf-8", errors="replace")


class Sandbox:
    """Runs grading steps for one regrade (one workspace, one GPU, one sandbox mode)."""

    def __init__(self, workspace: Workspace, config: SandboxConfig, deck_dirs: Sequence[Path]) -> None:
        self.ws = workspace
        self.config = config
        self.deck_dirs = [Path(d).resolve() for d in deck_dirs]
        self.mode, self.mode_reason = resolve_mode(config.mode, config.python)
        with contextlib.suppress(OSError):
            _libc()  # load before any fork: preexec must not dlopen

    def _env(self, trusted: bool) -> dict[str, str]:
        env = {k: os.environ[k] for k in _PASS_ENV if k in os.environ}
        pythonpath = [str(KAUDIT_ROOT)] + [
            p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(KAUDIT_ROOT)
        ]
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(pythonpath),
                "PYTHONDONTWRITEBYTECODE": "1",
                "PYTHONNOUSERSITE": "1",
                "PYTHONHASHSEED": "0",
                "HOME": str(self.ws.clean if trusted else self.ws.work),
                "TMPDIR": "/tmp",
                "TRITON_CACHE_DIR": str(self.ws.cache / "triton"),
                "TORCH_EXTENSIONS_DIR": str(self.ws.cache / "torch_extensions"),
                "NO_PROXY": "*",
                "no_proxy": "*",
            }
        )
        if self.config.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = "" if self.config.gpu is None else str(self.config.gpu)
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""  # a CPU smoke run never touches a GPU
            env["TRITON_INTERPRET"] = "1"
        env.update(dict(self.config.extra_env))
        return env

    def _preexec(self) -> Callable[[], None]:
        cap = None
        if self.config.device != "cuda" and self.config.mem_limit_mib:
            cap = max(self.config.mem_limit_mib * 4, 16384) << 20  # address space, not RSS: generous

        def setup() -> None:
            # die with the worker: a SIGKILLed worker must not leave a grader running on the GPU
            with contextlib.suppress(Exception):
                _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            if cap is not None:
                resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

        return setup

    def run(
        self,
        step: str,
        params: dict[str, Any],
        *,
        trusted: bool = False,
        timeout_s: float | None = None,
        on_progress: Callable[[dict[str, Any]], None] | None = None,
    ) -> StepResult:
        """Run `step` in a fresh child. `trusted` children never see the solution's folder."""
        timeout = self.config.timeout_s if timeout_s is None else timeout_s
        cwd = self.ws.clean if trusted else self.ws.work
        # -P (3.11+): the cwd is not put on sys.path, so a sidecar named like a stdlib or torch
        # module cannot shadow the grader's own imports
        cmd = [self.config.python, *(["-P"] if sys.version_info >= (3, 11) else []), "-m", "graders.sandbox_child"]
        if self.mode == SANDBOX_BWRAP:
            rw = [self.ws.out, self.ws.clean] if trusted else [self.ws.work, self.ws.cache, self.ws.out]
            ro = _ro_paths([*map(str, self.deck_dirs), *self.config.extra_ro_paths])
            cmd = [*_bwrap_args(rw, ro, cwd), *cmd]
        nonce = secrets.token_hex(16)
        r_fd, w_fd = os.pipe()
        hello = json.dumps(
            {"nonce": nonce, "fd": w_fd, "step": step, "params": params, "trusted": trusted}
        ).encode()
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                env=self._env(trusted),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(w_fd,),
                start_new_session=True,
                preexec_fn=self._preexec(),  # prctl + setrlimit only
            )
        except OSError as exc:
            os.close(r_fd)
            os.close(w_fd)
            return StepResult(step, False, None, "setup", f"cannot start the sandbox: {exc}", None, False, False,
                              0.0, self.mode, False)
        os.close(w_fd)
        chunks: dict[str, bytearray] = {"chan": bytearray(), "out": bytearray(), "err": bytearray()}
        limit = 8 << 20

        def progress(data: bytes, pending: bytearray) -> None:
            # progress messages are advisory (never trusted for results): forward them live
            pending.extend(data)
            while b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending[:] = rest
                with contextlib.suppress(Exception):
                    msg = json.loads(line)
                    if isinstance(msg, dict) and msg.get("nonce") == nonce and msg.get("kind") == "progress":
                        on_progress(msg.get("data") or {})  # type: ignore[misc]

        def pump(src: Any, key: str) -> None:
            buf = chunks[key]
            pending = bytearray()
            while True:
                data = src.read(65536) if hasattr(src, "read") else os.read(src, 65536)
                if not data:
                    break
                if key == "chan" and on_progress is not None:
                    progress(data, pending)
                if len(buf) < limit:
                    buf.extend(data[: limit - len(buf)])
                elif key != "chan":
                    del buf[: len(data)]
                    buf.extend(data)

        chan_file = os.fdopen(r_fd, "rb", buffering=0)
        threads = [
            threading.Thread(target=pump, args=(chan_file, "chan"), daemon=True),
            threading.Thread(target=pump, args=(proc.stdout, "out"), daemon=True),
            threading.Thread(target=pump, args=(proc.stderr, "err"), daemon=True),
        ]
        for t in threads:
            t.start()
        assert proc.stdin is not None
        with contextlib.suppress(BrokenPipeError, OSError):
            proc.stdin.write(hello + b"\n")
            proc.stdin.close()
        timed_out = mem_killed = False
        peak = 0.0
        next_mem_check = 0.0
        while proc.poll() is None:
            now = time.monotonic()
            if now - start > timeout:
                timed_out = True
                kill_session(proc.pid)
                break
            if self.config.mem_limit_mib and now >= next_mem_check:
                rss = _rss_mib(_session_pids(proc.pid))
                peak = max(peak, rss)
                if rss > self.config.mem_limit_mib:
                    mem_killed = True
                    kill_session(proc.pid)
                    break
                next_mem_check = now + 0.25
            time.sleep(0.02)
        proc.wait()
        kill_session(proc.pid)  # leftovers that daemonised inside the session
        for t in threads:
            t.join(timeout=5)
        with contextlib.suppress(OSError):
            chan_file.close()
        wall = time.monotonic() - start
        return self._interpret(step, nonce, bytes(chunks["chan"]), proc.returncode, timed_out, mem_killed, wall,
                               bytes(chunks["out"]), bytes(chunks["err"]), peak)

    def _interpret(
        self,
        step: str,
        nonce: str,
        chan: bytes,
        rc: int | None,
        timed_out: bool,
        mem_killed: bool,
        wall: float,
        out: bytes,
        err: bytes,
        peak: float,
    ) -> StepResult:
        def res(ok: bool, result: dict[str, Any] | None, error: str | None, detail: str, started: bool) -> StepResult:
            return StepResult(step, ok, result, error, detail, rc, timed_out, mem_killed, wall, self.mode, started,
                              _tail(out), _tail(err), peak)

        started = False
        result_msg: dict[str, Any] | None = None
        for raw in chan.splitlines():
            if not raw.strip():
                continue
            try:
                msg = json.loads(raw)
            except ValueError:
                return res(False, None, "channel_tampered", "malformed message on the result channel", started)
            if not isinstance(msg, dict) or msg.get("nonce") != nonce:
                return res(False, None, "channel_tampered", "message without the grader's nonce", started)
            kind = msg.get("kind")
            if kind == "progress" and started and result_msg is None:
                continue
            if kind == "started" and not started and result_msg is None:
                started = True
            elif kind == "result" and started and result_msg is None:
                result_msg = msg
            else:
                return res(False, None, "channel_tampered", f"unexpected or duplicate {kind!r} message", started)
        if timed_out:
            return res(False, None, "timeout", f"step {step} exceeded {self.config.timeout_s:.0f}s: process group killed",
                       started)
        if mem_killed:
            return res(False, None, "memory", f"step {step} exceeded the {self.config.mem_limit_mib} MiB RSS cap",
                       started)
        if not started:
            return res(False, None, "no_start",
                       f"the grader never started (rc={rc}): sandbox or interpreter failure: {_tail(err, 600)}", False)
        if result_msg is None:
            return res(False, None, "no_result",
                       f"the process exited (rc={rc}) before the grader reported: the solution ended the process "
                       f"or crashed it", True)
        payload = result_msg.get("result")
        if not result_msg.get("ok"):
            return res(False, payload if isinstance(payload, dict) else None, "grader_error",
                       str(result_msg.get("error", "grader error")), True)
        if not isinstance(payload, dict):
            return res(False, None, "channel_tampered", "result payload is not an object", True)
        return res(True, payload, None, "", True)
