"""A classic-BPF seccomp filter for the grading sandbox, written with the stdlib only.

bubblewrap loads it (`bwrap --seccomp FD`) after setting no_new_privs and right before it execs
the grading child, so it binds the child and everything the child starts. It denies what an
unprivileged process has no business calling when it grades a kernel: mount and the new mount
API, namespace creation (unshare, setns, clone with a CLONE_NEW* flag; clone3 answers ENOSYS so
glibc falls back to the clone it can inspect), ptrace and cross-process memory access, bpf,
perf_event_open, the kernel keyring, module loading, kexec, reboot, swap, clock setting, syslog,
userfaultfd, open_by_handle_at. Every denied call fails with EPERM (the process goes on and
reports the failure); a syscall of a foreign ABI (i386 or x32 on x86_64) kills the process.

Only the host architecture's table is emitted (x86_64 or aarch64); on any other architecture
`build_filter()` raises, and the sandbox refuses to start rather than run without the filter.
"""

from __future__ import annotations

import errno
import platform
import struct

# linux/filter.h, linux/seccomp.h, linux/audit.h
_BPF_LD_W_ABS = 0x00 | 0x00 | 0x20
_BPF_JEQ_K = 0x05 | 0x10 | 0x00
_BPF_JGE_K = 0x05 | 0x30 | 0x00
_BPF_JSET_K = 0x05 | 0x40 | 0x00
_BPF_RET_K = 0x06 | 0x00
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_OFF_NR, _OFF_ARCH, _OFF_ARG0_LO = 0, 4, 16  # struct seccomp_data (little endian)

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_X32_SYSCALL_BIT = 0x40000000

# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
CLONE_NS_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

# name -> (x86_64, aarch64); None where the architecture has no such call
DENIED: dict[str, tuple[int | None, int | None]] = {
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "unshare": (272, 97),
    "setns": (308, 268),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "kcmp": (312, 272),
    "pidfd_getfd": (438, 438),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "acct": (163, 89),
    "settimeofday": (164, 170),
    "clock_settime": (227, 112),
    "clock_adjtime": (305, 266),
    "adjtimex": (159, 171),
    "syslog": (103, 116),
    "quotactl": (179, 60),
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
    "iopl": (172, None),
    "ioperm": (173, None),
    "vhangup": (153, 58),
    "lookup_dcookie": (212, 18),
}
CLONE = {"x86_64": 56, "aarch64": 220}
CLONE3 = {"x86_64": 435, "aarch64": 435}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def host_arch() -> str:
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def denied_numbers(arch: str) -> dict[str, int]:
    col = 0 if arch == "x86_64" else 1
    return {name: nrs[col] for name, nrs in DENIED.items() if nrs[col] is not None}  # type: ignore[misc]


def build_filter(arch: str | None = None) -> bytes:
    """The filter program for `arch` (default: this host) as bytes of struct sock_filter."""
    arch = arch or host_arch()
    if arch not in AUDIT_ARCH:
        raise ValueError(f"no seccomp table for architecture {arch!r}")
    eperm = _RET_ERRNO | errno.EPERM
    prog = [
        _insn(_BPF_LD_W_ABS, 0, 0, _OFF_ARCH),
        _insn(_BPF_JEQ_K, 1, 0, AUDIT_ARCH[arch]),
        _insn(_BPF_RET_K, 0, 0, _RET_KILL_PROCESS),
        _insn(_BPF_LD_W_ABS, 0, 0, _OFF_NR),
    ]
    if arch == "x86_64":  # the x32 ABI: same arch token, syscall numbers with bit 30 set
        prog += [_insn(_BPF_JGE_K, 0, 1, _X32_SYSCALL_BIT), _insn(_BPF_RET_K, 0, 0, _RET_KILL_PROCESS)]
    for nr in sorted(set(denied_numbers(arch).values())):
        prog += [_insn(_BPF_JEQ_K, 0, 1, nr), _insn(_BPF_RET_K, 0, 0, eperm)]
    prog += [_insn(_BPF_JEQ_K, 0, 1, CLONE3[arch]), _insn(_BPF_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    prog += [
        _insn(_BPF_JEQ_K, 0, 3, CLONE[arch]),
        _insn(_BPF_LD_W_ABS, 0, 0, _OFF_ARG0_LO),
        _insn(_BPF_JSET_K, 0, 1, CLONE_NS_FLAGS),
        _insn(_BPF_RET_K, 0, 0, eperm),
        _insn(_BPF_RET_K, 0, 0, _RET_ALLOW),
    ]
    if len(prog) > 4096:  # BPF_MAXINSNS
        raise ValueError("seccomp program too long")
    return b"".join(prog)
