"""Escape attempts against the bubblewrap sandbox, run for real: as root (how the service runs on
these machines) and as a plain user (the service as uid 65534, inside a root-made wrapper that only
lets it reach the interpreter under /root).

Each attack runs at the solution's import inside a real `check` step, writes what it saw into
`report.json` beside itself (the step's only writable folder), and the test checks the host:
nothing written outside, no secret read, the parent alive, no process left. The deck the attacks
aim at is a copy in tmp_path, so a failure of the sandbox could never damage the repository.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from graders.sandbox import SANDBOX_BWRAP, Sandbox, SandboxConfig, bwrap_works, prepare_workspace
from tests.regrade.conftest import FP8, ROOT

pytestmark = [
    pytest.mark.skipif(not bwrap_works()[0], reason="bubblewrap unusable on this host: scripts/bootstrap.sh installs it"),
    pytest.mark.slow,
]

SECRET = "kaudit-test-secret-3f9c1b7e"
HONEST_MODEL = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=torch.float8_e4m3fn))
        self.register_buffer("weight_scale", torch.ones(N))

    def forward(self, x):
        return ((x.float() @ self.weight.float().T) * self.weight_scale).to(torch.bfloat16)
'''
PRELUDE = '''
import json, os, pathlib
REPORT = {}
HERE = pathlib.Path(__file__).resolve().parent
def report(**kw):
    # atomic: an attack may be killed mid-report (its own kills end the step), and a truncated
    # report.json must never replace the last whole one
    REPORT.update(kw)
    tmp = HERE / "report.json.tmp"
    tmp.write_text(json.dumps(REPORT))
    os.replace(tmp, HERE / "report.json")
'''

ATTACKS: dict[str, str] = {
    # the escape: remount the read-only deck bind writable, then /etc, then write there
    "remount": '''
import ctypes
libc = ctypes.CDLL("libc.so.6", use_errno=True)
MS_REMOUNT, MS_BIND = 32, 4096
out = {}
for target in (DECK, "/etc", "/"):
    rc = libc.mount(None, target.encode(), None, MS_REMOUNT | MS_BIND, None)
    out[target] = [rc, ctypes.get_errno()]
    rc = libc.mount(target.encode(), b"/tmp", None, MS_BIND, None)
    out[target + " bind"] = [rc, ctypes.get_errno()]
out["unshare"] = [libc.unshare(0x10000000 | 0x00020000), ctypes.get_errno()]
written, errors = [], {}
for p in (DECK + "/pwned.txt", "/etc/pwned.txt"):
    try:
        open(p, "w").write("x")
        written.append(p)
    except OSError as exc:
        errors[p] = str(exc)
report(mount=out, written=written, errors=errors, uid=os.getuid(), euid=os.geteuid(),
       caps=[l.strip() for l in open("/proc/self/status") if l.startswith(("Cap", "NoNewPrivs", "Seccomp:"))])
''',
    # writes anywhere but its own folders
    "write_outside": '''
targets = [DECK + "/x.txt", "/usr/pwned.txt", "/etc/pwned.txt", HOSTTMP + "/pwned.txt", GRADERS + "/pwned.py",
           "/pwned.txt", "/root/pwned.txt", "/tmp/inside-only.txt"]
written = []
for p in targets:
    try:
        pathlib.Path(p).parent.mkdir(parents=True, exist_ok=True)
        open(p, "w").write("x")
        written.append(p)
    except OSError:
        pass
try:
    shadow = open("/etc/shadow").read()[:20]
except OSError as exc:
    shadow = None
report(written=written, shadow=shadow)
''',
    # the service's secrets: its environ through /proc (pid 1, the parent, every visible pid)
    "read_environ": '''
seen = {}
for pid in ["1", "self", str(os.getppid())] + [p for p in os.listdir("/proc") if p.isdigit()]:
    try:
        seen[pid] = open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace")
    except OSError as exc:
        seen[pid] = f"ERR {exc.errno}"
report(environ=seen, env=dict(os.environ), pids=sorted(p for p in os.listdir("/proc") if p.isdigit()))
os._exit(0)
''',
    # take the service down: the parent, pid 1, every process it may signal
    "kill_parent": '''
import signal
report(ppid=os.getppid(), kill={"pending": True})  # before the kills: the step may end with them
res = {}
for name, pid in (("ppid", os.getppid()), ("one", 1)):
    try:
        os.kill(pid, signal.SIGKILL)
        res[name] = "sent"
    except OSError as exc:
        res[name] = exc.errno
report(kill=res, ppid=os.getppid())
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
''',
    # a daemon that leaves the session and is meant to outlive the step
    "setsid_daemon": '''
import time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            (HERE / "alive.txt").write_text(str(time.time()))
            time.sleep(0.1)
    os._exit(0)
time.sleep(1.5)
report(daemon="started")
os._exit(0)
''',
    # one huge allocation (the step's memory cap is 1 GiB here)
    "alloc_4g": '''
try:
    block = bytearray(4 << 30)
    report(alloc="succeeded")
except MemoryError:
    report(alloc="MemoryError")
os._exit(0)
''',
    # RSS spread over processes that each stay under the address-space cap
    "alloc_spread": '''
import time
report(alloc="spreading")
for i in range(8):
    if os.fork() == 0:
        # a child that hits the address-space cap (it inherits the grader's mappings) must end
        # here: an exception escaping into the forked grader would report on the result channel
        # (channel_tampered) instead of leaving the RSS watchdog to decide
        try:
            chunks = []
            for _ in range(12):
                chunks.append(bytearray(b"x" * (64 << 20)))
                time.sleep(0.05)
            time.sleep(60)
        finally:
            os._exit(0)
time.sleep(60)
''',
    # a fork bomb (each failed fork sleeps, so the test does not burn the shared host's cores)
    "fork_bomb": '''
import ctypes, time
ctypes.CDLL("libc.so.6").prctl(15, b"kaudit-bomb", 0, 0, 0)
forks = failed = 0
for _ in range(4000):
    try:
        pid = os.fork()
    except OSError:
        failed += 1
        report(forks=forks, failed=failed)
        if failed > 50:
            break
        time.sleep(0.01)
        continue
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    forks += 1
report(forks=forks, failed=failed)
time.sleep(60)
''',
}


def _solution(tmp: Path, attack: str, deck: Path) -> Path:
    src = PRELUDE + textwrap.dedent(f"""
        DECK = {str(deck)!r}
        HOSTTMP = {str(tmp)!r}
        GRADERS = {str(ROOT / "graders")!r}
    """) + ATTACKS[attack] + HONEST_MODEL
    sol = tmp / "sol" / "solution.py"
    sol.parent.mkdir(parents=True)
    sol.write_text(src)
    return sol


def _deck_copy(tmp: Path) -> Path:
    deck = tmp / "deck" / "hard" / FP8.name
    shutil.copytree(FP8, deck, ignore=shutil.ignore_patterns("__pycache__", "examples"))
    return deck


def _before(deck: Path) -> set[str]:
    return {str(p.relative_to(deck)) for p in deck.rglob("*")}


def run_attack(tmp: Path, attack: str, **config: Any) -> tuple[Any, dict[str, Any], Path, Path]:
    """Run the attack in a real bwrap `check` step; (step result, report, workspace, deck)."""
    deck = _deck_copy(tmp)
    sol = _solution(tmp, attack, deck)
    ws = prepare_workspace(sol, tmp / "ws")
    cfg = {"device": "cpu", "timeout_s": 120.0, "mode": "bwrap", **config}
    sb = Sandbox(ws, SandboxConfig(**cfg), [deck])
    assert sb.mode == SANDBOX_BWRAP
    res = sb.run("check", {"solution": str(ws.solution), "problem_dir": str(deck), "device": "cpu",
                           "shapes": "small"})
    path = ws.work / "report.json"
    rep = json.loads(path.read_text()) if path.is_file() else {}
    return res, rep, ws.work, deck


def test_remount_escape_is_refused(tmp_path: Path) -> None:
    deck_files = _before(FP8)
    res, rep, _work, deck = run_attack(tmp_path, "remount")
    assert rep, f"the attack never ran: {res.detail} {res.stderr_tail}"
    assert rep["written"] == [], rep
    assert all(v[0] == -1 for v in rep["mount"].values()), rep["mount"]
    assert not (deck / "pwned.txt").exists() and not Path("/etc/pwned.txt").exists()
    assert rep["uid"] == 65534 and rep["euid"] == 65534
    caps = {line.split(":")[0]: line.split(":")[1].strip() for line in rep["caps"]}
    assert caps["CapEff"] == caps["CapPrm"] == caps["CapBnd"] == "0000000000000000"
    assert caps["NoNewPrivs"] == "1" and caps["Seccomp"] == "2"
    assert _before(FP8) == deck_files
    assert res.ok and res.result is not None and res.result["passed"], res.detail  # contained, graded as usual


def test_writes_outside_the_step_folders_fail(tmp_path: Path) -> None:
    res, rep, work, deck = run_attack(tmp_path, "write_outside")
    assert rep, f"the attack never ran: {res.detail} {res.stderr_tail}"
    # only the sandbox's private /tmp (a tmpfs that dies with the step) took a write
    assert "/tmp/inside-only.txt" in rep["written"], rep
    assert all(p.startswith("/tmp/") for p in rep["written"]), rep
    assert rep["shadow"] is None
    for p in (deck / "x.txt", Path("/usr/pwned.txt"), Path("/etc/pwned.txt"), tmp_path / "pwned.txt",
              ROOT / "graders" / "pwned.py", Path("/pwned.txt"), Path("/root/pwned.txt"),
              Path("/tmp/inside-only.txt")):
        assert not p.exists(), p


def test_no_secret_in_the_environment_or_through_proc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAUDIT_API_TOKENS", SECRET)
    monkeypatch.setenv("KAUDIT_DATABASE_URL", f"postgresql://u:{SECRET}@db/x")
    res, rep, _work, _deck = run_attack(tmp_path, "read_environ")
    assert rep, f"the attack never ran: {res.detail} {res.stderr_tail}"
    assert SECRET not in json.dumps(rep)
    assert not any(k.startswith("KAUDIT_") for k in rep["env"]), rep["env"].keys()
    # a fresh /proc of the step's own PID namespace: a handful of the step's processes only
    assert len(rep["pids"]) < 10, rep["pids"]


def test_killing_the_parent_ends_only_the_step(tmp_path: Path) -> None:
    sentinel = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        res, rep, _work, _deck = run_attack(tmp_path, "kill_parent")
        assert sentinel.poll() is None, "a process outside the sandbox was killed"
        # the step itself ends without a result: a fail for the solution, never a pass
        assert not res.ok and res.error in ("no_result", "no_start", "channel_tampered"), res.error
        assert rep.get("ppid") is not None and rep["ppid"] != os.getpid()
    finally:
        sentinel.kill()
        sentinel.wait()


def test_setsid_daemon_dies_with_the_step(tmp_path: Path) -> None:
    res, rep, work, _deck = run_attack(tmp_path, "setsid_daemon")
    alive = work / "alive.txt"
    assert alive.exists(), "the daemon never ran: the test would prove nothing"
    before = alive.read_text()
    time.sleep(0.8)
    assert alive.read_text() == before, "a setsid() daemon outlived the step"


def test_a_4gib_allocation_is_stopped(tmp_path: Path) -> None:
    res, rep, _work, _deck = run_attack(tmp_path, "alloc_4g", mem_limit_mib=1024)
    assert rep.get("alloc") == "MemoryError", rep


def test_memory_spread_over_processes_is_killed(tmp_path: Path) -> None:
    t = time.monotonic()
    res, rep, _work, _deck = run_attack(tmp_path, "alloc_spread", mem_limit_mib=1024, timeout_s=90.0)
    assert rep.get("alloc") == "spreading", rep
    assert res.mem_killed and res.error == "memory", (res.error, res.detail, res.peak_rss_mib)
    assert time.monotonic() - t < 60


def _bomb_left() -> list[int]:
    left = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == "kaudit-bomb":
                    left.append(int(entry))
            except OSError:
                continue
    return left


def test_fork_bomb_is_capped_and_reaped(tmp_path: Path) -> None:
    res, rep, _work, _deck = run_attack(tmp_path, "fork_bomb", timeout_s=12.0, pids_limit=128)
    assert rep, f"the bomb never ran: {res.detail} {res.stderr_tail}"
    assert rep["failed"] > 0 and rep["forks"] < 200, rep  # RLIMIT_NPROC stopped it
    assert res.timed_out
    time.sleep(0.5)
    assert _bomb_left() == []


def test_the_memory_cap_is_clamped_to_the_host() -> None:
    from graders.sandbox import MEM_FRACTION, host_mem_mib, mem_cap_mib

    assert mem_cap_mib(65536) <= host_mem_mib() * MEM_FRACTION + 1
    assert mem_cap_mib(None) == mem_cap_mib(0) == max(256, int(host_mem_mib() * MEM_FRACTION))
    assert mem_cap_mib(512) == 512


# ---------------------------------------------------------------------------------------------
# The same attacks with the service as a plain user (uid 65534): the driver runs in a root-made
# wrapper that exposes the host as it is, except /root (where this host's interpreter lives) is
# reachable; inside it the sandbox takes its unprivileged path (one bwrap, user namespace).

_DRIVER = '''
import json, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from tests.regrade.test_sandbox_escape import run_attack
tmp = Path({tmp!r})
res, rep, work, deck = run_attack(tmp, {attack!r}, **{config!r})
targets = [deck / "x.txt", deck / "pwned.txt", tmp / "pwned.txt", Path("/usr/pwned.txt"), Path("/etc/pwned.txt"),
           Path("/pwned.txt"), Path("/tmp/inside-only.txt"), Path({root!r}) / "graders" / "pwned.py"]
print(json.dumps({{"ok": res.ok, "error": res.error, "rep": rep, "uid": __import__("os").getuid(),
                  "mem_killed": res.mem_killed, "timed_out": res.timed_out,
                  "host_written": [str(p) for p in targets if p.exists()]}}))
'''


def _as_plain_user(attack: str, config: dict[str, Any]) -> dict[str, Any]:
    if os.geteuid() != 0:
        pytest.skip("needs root to start the plain-user service (the suite runs as root in CI)")
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="kaudit-plain-", dir="/tmp"))
    try:
        os.chown(tmp, 65534, 65534)
        py = sys.executable
        wrap = ["bwrap", "--dev-bind", "/", "/", "--tmpfs", "/root"]
        for d in ("/root/.pyenv",):
            if Path(d).is_dir():
                wrap += ["--ro-bind", d, d]
        wrap += ["--chdir", str(tmp)]
        drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                "--bounding-set=-all"]
        code = _DRIVER.format(root=str(ROOT), tmp=str(tmp), attack=attack, config=config)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT), "HOME": str(tmp),
               "TRITON_INTERPRET": "1", "KAUDIT_API_TOKENS": SECRET}
        proc = subprocess.run([*wrap, *drop, py, "-c", code], capture_output=True, text=True, timeout=300,
                              env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        out["tmp"] = str(tmp)
        assert out["uid"] == 65534
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_plain_user_remount_and_writes_are_refused() -> None:
    out = _as_plain_user("remount", {})
    rep = out["rep"]
    assert rep and rep["written"] == [] and all(v[0] == -1 for v in rep["mount"].values()), rep
    caps = {line.split(":")[0]: line.split(":")[1].strip() for line in rep["caps"]}
    assert caps["CapEff"] == "0000000000000000" and caps["NoNewPrivs"] == "1" and caps["Seccomp"] == "2"
    assert out["host_written"] == []
    out = _as_plain_user("write_outside", {})
    assert "/tmp/inside-only.txt" in out["rep"]["written"], out["rep"]
    assert all(p.startswith("/tmp/") for p in out["rep"]["written"]), out["rep"]  # its own tmpfs only
    assert out["host_written"] == [] and out["rep"]["shadow"] is None


def test_plain_user_secrets_kill_and_bomb_are_contained() -> None:
    out = _as_plain_user("read_environ", {})
    assert out["rep"] and SECRET not in json.dumps(out["rep"])
    out = _as_plain_user("kill_parent", {})  # returning at all: the service (the driver) survived
    assert out["rep"]["kill"], out
    assert out["ok"] or out["error"] in ("no_result", "no_start", "channel_tampered")
    out = _as_plain_user("fork_bomb", {"timeout_s": 12.0, "pids_limit": 128})
    assert out["rep"]["failed"] > 0 and out["timed_out"], out
    time.sleep(0.5)
    assert _bomb_left() == []
