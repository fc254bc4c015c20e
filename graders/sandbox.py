"""Run one grading step in a fresh, isolated subprocess and read its result over a private channel.

The solution never runs in the service or worker process. Each step (`check`, `check_verify`,
`bench`, `probe_run`, `probe_verify`, `env`) starts `python -m graders.sandbox_child` pinned to one
GPU, in a scratch copy of the solution and its sidecars, with private Triton and torch-extension
caches, a scrubbed environment, a wall-clock timeout and resource caps taken from the host's size.

bubblewrap is the sandbox (`SANDBOX_BWRAP`). Whatever user the service runs as, the child is an
unprivileged uid with no capability at all:
- a service running as root never hands the child host uid 0: a user namespace created by root
  maps the child to host root (it could read /etc/shadow and is exempt from RLIMIT_NPROC), so an
  outer bwrap binds as root, drops to host uid/gid 65534 (nobody) and an inner, unprivileged bwrap
  adds the user namespace: the child is host uid 65534 with no capability (see `_bwrap_args`);
- bwrap unshares the user namespace (uid 65534 inside, `--cap-drop ALL`, `--disable-userns`),
  the PID, network, IPC and UTS namespaces, mounts a fresh /proc of the new PID namespace (the
  service's /proc/<pid>/environ is not reachable: no secret of the service is in the child's
  environment either), binds the system, the interpreter, kaudit's graders and the deck read-only
  and only the step's scratch folders writable, with size-capped tmpfs /tmp and /dev/shm;
- no_new_privs is set and a seccomp filter (graders.seccomp) denies mount, namespace creation,
  ptrace, process_vm_*, bpf, perf_event_open, keyctl & friends;
- `--die-with-parent` + the PID namespace: every process of the step, a `setsid()` daemon
  included, dies with the step (the namespace's init is killed, the kernel kills the rest);
- rlimits: address space (CPU-only children), processes, CPU seconds, file size, no core dumps;
  and the parent sums the resident set of every process of the step (the child's whole process
  tree, found through the ppid links, plus its session) and kills the step above the cap.
  The memory cap is clamped to a fraction of the host's MemTotal whatever the caller asks.

Without a working bubblewrap a step refuses to start (`SandboxSetupError`) unless the operator set
the explicit unsafe flag (`allow_unsafe=True`, `KAUDIT_ALLOW_UNSAFE_SANDBOX=1`, the CLI's
`--unsafe-no-sandbox`); the step then runs as a plain subprocess in a new session and the
provenance says so ("subprocess (weaker: no namespaces)").

Result channel: the parent creates a pipe, passes its write end to the child (pass_fds) and sends a
random nonce over stdin. The grader reads the nonce BEFORE it imports anything of the solution,
writes a `started` message, and at the end ONE `result` message, both JSON lines carrying the
nonce. The parent never reads results from stdout (a solution printing `PASS` changes nothing),
and rejects a missing, malformed, nonce-less or duplicated message. Code running inside the child
can reach the fd; what decides correctness is therefore computed in a second child that never
imports the solution (`check_verify`, `probe_verify`), from the raw output bytes the solution's
process left in the step's out folder after that process is gone.

What the solution prints (stdout/stderr) is kept bounded (`OUTPUT_TAIL_BYTES`) and is operator-only
output: `StepResult.stdout_tail/stderr_tail` must never be shown to readers (see graders.results).
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

from graders.outputmarks import LineMarks

BWRAP = "bwrap"
SANDBOX_BWRAP = "bwrap"
SANDBOX_SUBPROCESS = "subprocess (weaker: no namespaces)"
UNSAFE_ENV = "KAUDIT_ALLOW_UNSAFE_SANDBOX"  # the operator's explicit "run without bubblewrap" flag

SANDBOX_UID = SANDBOX_GID = 65534  # nobody / nogroup: the uid every sandboxed step runs as
MEM_FRACTION = 0.5  # the memory cap of one step never exceeds this share of the host's MemTotal
OUTPUT_TAIL_BYTES = 4000  # what is kept of a step's stdout/stderr (operator-only)

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
_PR_SET_NO_NEW_PRIVS = 38


@lru_cache(maxsize=1)
def _libc() -> Any:
    import ctypes

    return ctypes.CDLL("libc.so.6", use_errno=True)


class SandboxSetupError(Exception):
    """The sandbox itself could not be prepared (not the solution's fault: infra)."""


class SandboxUnavailable(SandboxSetupError):
    """bubblewrap cannot be used here and the operator did not allow running without it."""


BUILD_DEPS_ENV = "KAUDIT_BUILD_DEPS"
# Where a declared dependency may not be mounted: the sandbox's own kernel/device views.
_DEP_FORBIDDEN = ("/proc", "/dev", "/sys")


def parse_build_deps(text: str) -> tuple[tuple[str, str], ...]:
    """`DEST=SRC[,DEST=SRC...]` -> ((dest, src), ...): a build dependency of the runs (a CUTLASS
    checkout, say) that their original hosts had at DEST and this host has at SRC. Each SRC is
    bound read-only at DEST inside every regrade sandbox (official and hardened), so a solution
    that builds with `-I/workspace/refs/cutlass/include` builds here as it did there.
    ValueError names the entry that is malformed, relative, forbidden or missing."""
    out: list[tuple[str, str]] = []
    for raw in (text or "").split(","):
        entry = raw.strip()
        if not entry:
            continue
        dest, sep, src = entry.partition("=")
        dest, src = dest.strip(), src.strip()
        if not sep or not dest or not src:
            raise ValueError(f"build dependency {entry!r}: expected DEST=SRC")
        if not (dest.startswith("/") and src.startswith("/")):
            raise ValueError(f"build dependency {entry!r}: both paths must be absolute")
        norm = os.path.normpath(dest)
        if norm == "/" or any(norm == f or _below(norm, f) for f in _DEP_FORBIDDEN):
            raise ValueError(f"build dependency {entry!r}: {norm} cannot be a mount point in the sandbox")
        if not os.path.isdir(src):
            raise ValueError(f"build dependency {entry!r}: {src} is not a folder on this host")
        if any(norm == d for d, _ in out):
            raise ValueError(f"build dependency {entry!r}: {norm} is declared twice")
        out.append((norm, os.path.realpath(src)))
    return tuple(out)


def build_deps_from_env() -> tuple[tuple[str, str], ...]:
    return parse_build_deps(os.environ.get(BUILD_DEPS_ENV, ""))


def unsafe_allowed_by_env() -> bool:
    return os.environ.get(UNSAFE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def host_mem_mib() -> int:
    """The host's MemTotal in MiB (a conservative 4 GiB when /proc/meminfo is unreadable)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 4096


def mem_cap_mib(requested: int | None) -> int:
    """The RSS cap of one step: the request clamped to MEM_FRACTION of the host (default: that share)."""
    host_cap = max(256, int(host_mem_mib() * MEM_FRACTION))
    return host_cap if not requested or requested <= 0 else min(int(requested), host_cap)


@dataclass(frozen=True)
class Limits:
    """Resource caps of one step, all derived from the host's size unless set explicitly."""

    mem_mib: int  # resident set of the whole step (watched) and, CPU-only, RLIMIT_AS
    nproc: int  # RLIMIT_NPROC of the sandbox uid (threads count)
    cpu_s: int  # RLIMIT_CPU of each process
    fsize_mib: int  # RLIMIT_FSIZE: the largest file the step may write
    tmpfs_mib: int  # size of the in-memory /tmp and /dev/shm (counted against host memory)

    def to_dict(self) -> dict[str, int]:
        return {"mem_mib": self.mem_mib, "nproc": self.nproc, "cpu_s": self.cpu_s, "fsize_mib": self.fsize_mib,
                "tmpfs_mib": self.tmpfs_mib}


def host_limits(config: SandboxConfig) -> Limits:
    ncpu = os.cpu_count() or 1
    mem = mem_cap_mib(config.mem_limit_mib)
    nproc = config.pids_limit or max(256, 16 * ncpu)
    cpu_s = int(config.cpu_time_s or max(60.0, config.timeout_s * ncpu))
    fsize = config.fsize_limit_mib or 8192
    tmpfs = max(64, min(2048, mem // 8))
    return Limits(mem, nproc, cpu_s, fsize, tmpfs)


@dataclass(frozen=True)
class SandboxConfig:
    device: str = "cpu"  # "cuda" | "cpu"
    gpu: int | None = None  # physical GPU index, pinned with CUDA_VISIBLE_DEVICES
    timeout_s: float = 1800.0
    mem_limit_mib: int | None = None  # resident-set cap of the whole step (clamped to MEM_FRACTION of the host)
    mode: str = "auto"  # "auto" (= bwrap, or the unsafe subprocess when allowed), "bwrap", "subprocess"
    allow_unsafe: bool = False  # the operator's explicit flag: run without bubblewrap when it is unusable
    pids_limit: int | None = None  # RLIMIT_NPROC (default from the host's cores)
    cpu_time_s: float | None = None  # RLIMIT_CPU per process (default: timeout x cores)
    fsize_limit_mib: int | None = None  # RLIMIT_FSIZE (default 8 GiB)
    python: str = sys.executable
    extra_env: tuple[tuple[str, str], ...] = ()
    extra_ro_paths: tuple[str, ...] = ()  # additional read-only binds (e.g. a CUDA toolkit elsewhere)
    # operator-declared build dependencies, (dest, src): src bound read-only at dest (parse_build_deps)
    dep_binds: tuple[tuple[str, str], ...] = ()


@dataclass
class StepResult:
    step: str
    ok: bool  # a valid result message arrived and the step itself reported success
    result: dict[str, Any] | None  # the grader's result payload
    error: str | None  # None | grader_error | solution_exit | no_result | no_start | channel_tampered | timeout
    #                    | memory | setup
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
    # lines of a failed extension build from anywhere in stdout/stderr (graders.outputmarks;
    # operator-only like the tails)
    stdout_marks: list[str] = field(default_factory=list)
    stderr_marks: list[str] = field(default_factory=list)


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


def drops_to_nobody() -> bool:
    """A service running as root drops to SANDBOX_UID on the host before it execs bwrap."""
    return os.geteuid() == 0


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


# In the root case the outer (privileged) bwrap keeps CAP_SETUID/CAP_SETGID for this one line:
# it becomes uid/gid 65534 for good (no groups) and execs the inner, unprivileged bwrap.
_DROP = (f"import os,sys; os.setgroups([]); os.setgid({SANDBOX_GID}); os.setuid({SANDBOX_UID}); "
         f"os.getuid() == {SANDBOX_UID} or os._exit(126); os.execvp(sys.argv[1], sys.argv[1:])")


def _below(path: str, root: str) -> bool:
    """`path` lies strictly below the folder `root`."""
    return path.startswith(root.rstrip("/") + "/")


def _created_dirs(dests: Sequence[str]) -> list[str]:
    """Ancestors of the bind destinations that bwrap must create (made 0755: bwrap's own 0700
    would lock uid 65534 out of a bound interpreter under /root)."""
    binds = set(dests)
    out: set[str] = set()
    for d in dests:
        for anc in Path(d).parents:
            a = str(anc)
            if a in ("/", "/tmp", "/dev", "/proc") or a in binds:
                continue
            if any(_below(a, b) for b in binds):
                continue  # inside a bound host folder: it exists there
            out.add(a)
    return sorted(out, key=lambda x: (x.count("/"), x))


def _bwrap_args(rw: Sequence[Path], ro: Sequence[str], cwd: Path, seccomp_fd: int, tmpfs_mib: int,
                python: str = sys.executable, privileged: bool | None = None,
                dep_binds: Sequence[tuple[str, str]] = ()) -> list[str]:
    """The bwrap command line (without the command).

    Run by a non-root service: one unprivileged bwrap (user namespace mapping the service's uid
    to 65534, no capability). Run by root: an outer bwrap sets up the namespaces and binds as
    root (so it can read an interpreter under /root), drops to host uid 65534 (`_DROP`), and an
    inner unprivileged bwrap adds the user namespace, `--cap-drop ALL` and the seccomp filter: the
    child is then host uid 65534 inside a user namespace, never host uid 0.
    """
    privileged = drops_to_nobody() if privileged is None else privileged
    size = str(tmpfs_mib << 20)
    bw = os.path.realpath(shutil.which(BWRAP) or BWRAP)
    if privileged and not any(_below(bw, r) for r in ro):
        ro = [*ro, os.path.dirname(bw)]  # the inner bwrap runs inside the outer one
    ns = [
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--hostname", "kaudit-sandbox",
        "--proc", "/proc",
        "--dev", "/dev",
        "--perms", "01777", "--size", size, "--tmpfs", "/tmp",
    ]
    binds = [*ro, *map(str, rw)]
    for dest, _ in dep_binds:
        inside = next((p for p in binds if dest == p or _below(dest, p)), None)
        if inside is not None:
            raise SandboxSetupError(f"build dependency {dest}: inside the sandbox's bind of {inside}, where no "
                                    "mount point can be made; declare a destination outside it")
        covers = next((p for p in binds if _below(p, dest)), None)
        if covers is not None:
            raise SandboxSetupError(f"build dependency {dest}: would cover the sandbox's bind of {covers} (the "
                                    "interpreter, the deck or the workspace); declare a narrower destination")
    dests = [*binds, *(d for d, _ in dep_binds)]
    for d in _created_dirs(dests):
        ns += ["--perms", "0755", "--dir", d]
    for p in ro:
        ns += ["--ro-bind", p, p]
    for dest, src in dep_binds:
        ns += ["--ro-bind", src, dest]
    for dev in sorted(Path("/dev").glob("nvidia*")):
        ns += ["--dev-bind", str(dev), str(dev)]
    if Path("/dev/shm").is_dir():
        ns += ["--perms", "01777", "--size", size, "--tmpfs", "/dev/shm"]
    for w in rw:
        ns += ["--bind", str(w), str(w)]
    ns += ["--remount-ro", "/"]  # the sandbox's own root (folders bwrap made) takes no writes either
    confine = [
        "--unshare-user",
        "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_GID),
        "--disable-userns",
        "--cap-drop", "ALL",
        "--seccomp", str(seccomp_fd),
    ]
    if not privileged:
        return [BWRAP, *ns, *confine, "--chdir", str(cwd)]
    # the outer child (root without CAP_DAC_OVERRIDE) may not enter the step's 0700 folders owned
    # by the sandbox uid: it starts in /, the inner bwrap (as that uid) enters the cwd
    outer = [BWRAP, *ns, "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
             "--chdir", "/"]
    inner = [bw, *confine, "--dev-bind", "/", "/", "--die-with-parent", "--chdir", str(cwd)]
    return [*outer, python, "-I", "-c", _DROP, *inner]


def _seccomp_fd() -> int:
    """A memfd holding the seccomp program, positioned at 0 (bwrap reads it to EOF)."""
    from graders.seccomp import build_filter

    prog = build_filter()
    fd = os.memfd_create("kaudit-seccomp", 0)
    os.write(fd, prog)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@lru_cache(maxsize=4)
def bwrap_works(python: str = sys.executable) -> tuple[bool, str]:
    """Probe run: can bwrap start our interpreter with the binds, uid and filter we use? (cached)"""
    if shutil.which(BWRAP) is None:
        return False, "bwrap not installed"
    ro = _ro_paths(())
    try:
        fd = _seccomp_fd()
    except (OSError, ValueError) as exc:
        return False, f"seccomp filter unavailable: {exc}"
    try:
        args = _bwrap_args([], ro, Path("/tmp"), fd, 64, python)
        proc = subprocess.run(
            [*args, python, "-c", "import os; print('bwrap-ok', os.getuid())"],
            capture_output=True,
            text=True,
            timeout=60,
            pass_fds=(fd,),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"bwrap probe failed: {exc}"
    finally:
        os.close(fd)
    if proc.returncode != 0 or f"bwrap-ok {SANDBOX_UID}" not in proc.stdout:
        return False, f"bwrap probe failed (rc={proc.returncode}): {proc.stderr.strip()[-300:]}"
    return True, "ok"


def resolve_mode(mode: str, python: str = sys.executable, allow_unsafe: bool = False) -> tuple[str, str]:
    """The sandbox actually used for `mode` and why.

    `bwrap` and `auto` use bubblewrap; when it is unusable, `auto` falls back to the plain
    subprocess only with the operator's unsafe flag. `subprocess` itself needs the flag too.
    """
    if mode not in ("auto", "bwrap", "subprocess"):
        raise SandboxSetupError(f"unknown sandbox mode {mode!r} (auto, bwrap, subprocess)")
    if mode == "subprocess":
        if not allow_unsafe:
            raise SandboxUnavailable(
                f"sandbox mode 'subprocess' runs untrusted code without bubblewrap: refused without the explicit "
                f"unsafe flag ({UNSAFE_ENV}=1 or --unsafe-no-sandbox)")
        return SANDBOX_SUBPROCESS, "configured (unsafe flag set)"
    works, why = bwrap_works(python)
    if works:
        return SANDBOX_BWRAP, "ok"
    if mode == "bwrap" or not allow_unsafe:
        raise SandboxUnavailable(
            f"bubblewrap unusable ({why}): refusing to run untrusted code without it; install bubblewrap, or set "
            f"{UNSAFE_ENV}=1 / --unsafe-no-sandbox to run it as a plain subprocess (weaker, recorded as such)")
    return SANDBOX_SUBPROCESS, f"unsafe flag set; bubblewrap unusable: {why}"


# ---------------------------------------------------------------------------------------------
# process-tree supervision


def _proc_table() -> dict[int, tuple[int, int, int]]:
    """pid -> (ppid, session, start time) of every process visible in /proc."""
    table: dict[int, tuple[int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
            # fields after comm: state ppid pgrp session ...
            table[int(entry)] = (int(rest[1]), int(rest[3]), int(rest[19]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def step_pids(root: int, table: dict[int, tuple[int, int, int]] | None = None) -> list[int]:
    """Every process of a step: `root`'s descendants (through ppid links, so a `setsid()`ed
    grandchild is found) plus whatever is still in its session."""
    table = _proc_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (ppid, _sid, _start) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = {root} if root in table else set()
    stack = [root]
    while stack:
        for c in children.get(stack.pop(), []):
            if c not in found:
                found.add(c)
                stack.append(c)
    found.update(pid for pid, (_ppid, sid, _start) in table.items() if sid == root)
    return sorted(found)


def _session_pids(sid: int) -> list[int]:
    return [pid for pid, (_ppid, s, _start) in _proc_table().items() if s == sid]


def kill_seen(seen: dict[int, int]) -> None:
    """SIGKILL processes seen in a step that still run: a pid is killed only while its start time
    still matches (never a reused pid of an unrelated process)."""
    table = _proc_table()
    for pid, start in seen.items():
        if pid != os.getpid() and table.get(pid, (0, 0, -1))[2] == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def _rss_mib(pids: Sequence[int]) -> float:
    """Memory of the step's processes: the sum of their proportional set sizes (a page shared by
    forked processes counts once in total, so a forking solution is not over-counted), else RSS."""
    total_kib = 0
    page_kib = os.sysconf("SC_PAGE_SIZE") // 1024
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        total_kib += int(line.split()[1])
                        break
            continue
        except (OSError, IndexError, ValueError):
            pass
        try:
            with open(f"/proc/{pid}/statm", encoding="utf-8") as fh:
                total_kib += int(fh.read().split()[1]) * page_kib
        except (OSError, IndexError, ValueError):
            continue
    return total_kib / 1024


def kill_session(pid: int, known: Sequence[int] = ()) -> None:
    """SIGKILL the step's process group, its process tree and every process still in its session."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for other in {*known, *step_pids(pid)}:
        if other == os.getpid():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(other, signal.SIGKILL)


def _exited(pid: int) -> bool:
    """Has our child `pid` exited? It stays a zombie (not reaped), so its pid is not reused."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _user_tasks(uid: int) -> int:
    """Tasks (threads included: what RLIMIT_NPROC counts) owned by `uid` right now."""
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                st = os.stat(f"/proc/{entry}")
                if st.st_uid == uid:
                    n += max(1, len(os.listdir(f"/proc/{entry}/task")))
            except OSError:
                continue
    return n


def _tail(data: bytes, n: int = OUTPUT_TAIL_BYTES) -> str:
    return data[-n:].decode("utf-8", errors="replace")


def _chown_tree(root: Path) -> None:
    """Hand the step's scratch area to the sandbox uid (only when the service is root)."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            with contextlib.suppress(FileNotFoundError):
                os.lchown(os.path.join(dirpath, name), SANDBOX_UID, SANDBOX_GID)
    os.lchown(root, SANDBOX_UID, SANDBOX_GID)


class Sandbox:
    """Runs grading steps for one regrade (one workspace, one GPU, one sandbox mode)."""

    def __init__(self, workspace: Workspace, config: SandboxConfig, deck_dirs: Sequence[Path]) -> None:
        self.ws = workspace
        self.config = config
        self.deck_dirs = [Path(d).resolve() for d in deck_dirs]
        self.mode, self.mode_reason = resolve_mode(config.mode, config.python, config.allow_unsafe)
        self.limits = host_limits(config)
        self.drop = drops_to_nobody() and self.mode == SANDBOX_BWRAP
        if self.drop:
            _chown_tree(self.ws.root)  # the step's scratch area belongs to the sandbox uid
            if not self.ws.cache.resolve().is_relative_to(self.ws.root.resolve()):
                _chown_tree(self.ws.cache)  # a compile cache shared with the regrade's other steps
        with contextlib.suppress(OSError):
            _libc()  # load before any fork: preexec must not dlopen

    def fresh_dir(self, path: Path) -> Path:
        """(Re)create an empty folder of the workspace the sandbox uid can write."""
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        if self.drop:
            os.chown(path, SANDBOX_UID, SANDBOX_GID)
        return path

    def facts(self) -> dict[str, Any]:
        """What the provenance records about this sandbox."""
        bw = self.mode == SANDBOX_BWRAP
        return {
            "mode": self.mode,
            "reason": self.mode_reason,
            "unsafe_flag": self.config.allow_unsafe,
            "uid": SANDBOX_UID if bw else os.geteuid(),
            "host_uid": SANDBOX_UID if self.drop else os.geteuid(),
            "user_namespace": bw,
            "pid_namespace": bw,
            "network": "none" if bw else "host",
            "capabilities": "none" if bw else ("all (root)" if os.geteuid() == 0 else "none"),
            "no_new_privs": True,
            "seccomp": bw,
            "limits": self.limits.to_dict(),
            # declared build dependencies: bound read-only at their destination under bubblewrap;
            # a plain subprocess sees the host's own paths (nothing can be remapped there)
            "build_deps": [{"dest": d, "src": s_, "bound": bw} for d, s_ in self.config.dep_binds],
        }

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
        lim = self.limits
        cap = None
        if self.config.device != "cuda":
            # address space, not RSS (CUDA reserves terabytes of it: never for a CUDA child); the
            # RSS watcher enforces the real cap, this one stops a single huge allocation at once
            cap = lim.mem_mib << 20
        nproc = lim.nproc
        if not self.drop:
            # the sandbox shares the service's uid: its own tasks count against RLIMIT_NPROC too
            nproc += _user_tasks(os.getuid())

        def setup() -> None:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            resource.setrlimit(resource.RLIMIT_CPU, (lim.cpu_s, lim.cpu_s + 5))
            resource.setrlimit(resource.RLIMIT_FSIZE, (lim.fsize_mib << 20, lim.fsize_mib << 20))
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
            if cap is not None:
                resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
            # die with the worker: a SIGKILLed worker must not leave a grader running on the GPU
            with contextlib.suppress(Exception):
                _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            with contextlib.suppress(Exception):
                _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)

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
        seccomp_fd: int | None = None
        if self.mode == SANDBOX_BWRAP:
            rw = [self.ws.out, self.ws.clean] if trusted else [self.ws.work, self.ws.cache, self.ws.out]
            ro = _ro_paths([*map(str, self.deck_dirs), *self.config.extra_ro_paths])
            try:
                seccomp_fd = _seccomp_fd()
            except (OSError, ValueError) as exc:
                return StepResult(step, False, None, "setup", f"cannot build the seccomp filter: {exc}", None, False,
                                  False, 0.0, self.mode, False)
            try:
                args = _bwrap_args(rw, ro, cwd, seccomp_fd, self.limits.tmpfs_mib, self.config.python,
                                   dep_binds=self.config.dep_binds)
            except SandboxSetupError as exc:
                os.close(seccomp_fd)
                return StepResult(step, False, None, "setup", str(exc), None, False, False, 0.0, self.mode, False)
            cmd = [*args, *cmd]
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
                pass_fds=(w_fd,) if seccomp_fd is None else (w_fd, seccomp_fd),
                start_new_session=True,
                preexec_fn=self._preexec(),  # setrlimit, uid drop, prctl only
            )
        except OSError as exc:
            os.close(r_fd)
            os.close(w_fd)
            if seccomp_fd is not None:
                os.close(seccomp_fd)
            return StepResult(step, False, None, "setup", f"cannot start the sandbox: {exc}", None, False, False,
                              0.0, self.mode, False)
        os.close(w_fd)
        if seccomp_fd is not None:
            os.close(seccomp_fd)
        chunks: dict[str, bytearray] = {"chan": bytearray(), "out": bytearray(), "err": bytearray()}
        marks = {"out": LineMarks(), "err": LineMarks()}
        limit = 8 << 20  # the result channel; stdout/stderr keep a rolling tail of OUTPUT_TAIL_BYTES

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
                if key == "chan":
                    if len(buf) < limit:
                        buf.extend(data[: limit - len(buf)])
                else:
                    marks[key].feed(data)
                    buf.extend(data)
                    if len(buf) > OUTPUT_TAIL_BYTES:
                        del buf[: len(buf) - OUTPUT_TAIL_BYTES]

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
        seen: dict[int, int] = {}  # pid -> start time of every process of the step seen so far
        next_mem_check = 0.0
        while not _exited(proc.pid):  # exited, not reaped: the pid cannot be reused meanwhile
            now = time.monotonic()
            if now - start > timeout:
                timed_out = True
                kill_session(proc.pid)
                break
            if now >= next_mem_check:
                table = _proc_table()
                pids = step_pids(proc.pid, table)
                seen.update({p: table[p][2] for p in pids if p in table and p != proc.pid})
                rss = _rss_mib(pids)
                peak = max(peak, rss)
                if rss > self.limits.mem_mib:
                    mem_killed = True
                    kill_session(proc.pid, pids)
                    break
                next_mem_check = now + 0.25
            time.sleep(0.02)
        # leftovers that daemonised: the step's tree and session (bwrap's PID namespace has
        # already taken every process of the step with it)
        kill_session(proc.pid, [p for p in step_pids(proc.pid) if p != proc.pid])
        proc.wait()
        kill_seen(seen)
        for t in threads:
            t.join(timeout=5)
        with contextlib.suppress(OSError):
            chan_file.close()
        wall = time.monotonic() - start
        res = self._interpret(step, nonce, bytes(chunks["chan"]), proc.returncode, timed_out, mem_killed, wall,
                              bytes(chunks["out"]), bytes(chunks["err"]), peak)
        res.stdout_marks, res.stderr_marks = marks["out"].close(), marks["err"].close()
        return res

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
            return res(False, None, "memory", f"step {step} exceeded the {self.limits.mem_mib} MiB RSS cap",
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
            kind = "solution_exit" if isinstance(payload, dict) and payload.get("solution_exit") else "grader_error"
            return res(False, payload if isinstance(payload, dict) else None, kind,
                       str(result_msg.get("error", "grader error")), True)
        if not isinstance(payload, dict):
            return res(False, None, "channel_tampered", "result payload is not an object", True)
        return res(True, payload, None, "", True)
