"""gpu_lock.log: the harness's GPU-lock events, and what they say about the run.

Grammar (one event per line)::

    <iso-time> wait|start|end|lock_timeout|reentrant_after_wait pid=<n> cmd=<c> [args=...] [status=<n> elapsed_s=<x>]

Derived: acquisitions (start lines), wait seconds (wait -> start of the same pid), active
seconds (start -> end of the same pid), lock timeouts (lock starvation: an infrastructure
failure, not the model's fault) and reentrant acquisitions after a wait. Unknown lines are
kept, never fatal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

EVENTS = ("wait", "start", "end", "lock_timeout", "reentrant_after_wait")
_KEYS = ("pid", "cmd", "args", "status", "elapsed_s")
_LINE = re.compile(r"^(\S+)\s+(" + "|".join(EVENTS) + r")\b\s*(.*)$")
_KEY_AT = re.compile(r"(?:^|\s)(" + "|".join(_KEYS) + r")=")


@dataclass(frozen=True)
class GpuLockEvent:
    line: int  # 1-based
    time: str
    event: str
    pid: int | None
    cmd: str | None
    args: str | None
    status: int | None
    elapsed_s: float | None
    fields: dict[str, str]


@dataclass
class GpuLockLog:
    events: list[GpuLockEvent]
    acquisitions: int  # start lines
    wait_seconds: float  # sum over wait -> start pairs
    active_seconds: float  # sum over start -> end pairs
    lock_timeouts: int
    reentrant: bool  # any reentrant_after_wait line
    waits: list[float] = field(default_factory=list)  # each wait, in order
    max_wait_seconds: float = 0.0
    unfinished: int = 0  # start lines with no end (the holder died or the log was cut)
    unparsed: list[str] = field(default_factory=list)


def _split_fields(rest: str) -> dict[str, str]:
    """`pid=1 cmd=python check.py args=--x y status=0` -> fields; values may hold spaces."""
    marks = [(m.group(1), m.start(1), m.end()) for m in _KEY_AT.finditer(rest)]
    out: dict[str, str] = {}
    for i, (key, _kstart, vstart) in enumerate(marks):
        vend = marks[i + 1][1] if i + 1 < len(marks) else len(rest)
        out[key] = rest[vstart:vend].strip()
    return out


def _parse_time(s: str) -> datetime | None:
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


def _to_int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _to_float(v: str | None) -> float | None:
    try:
        return float(v) if v is not None else None
    except ValueError:
        return None


def parse_gpu_lock_log(text: str) -> GpuLockLog:
    events: list[GpuLockEvent] = []
    unparsed: list[str] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        s = raw.strip()
        if not s:
            continue
        m = _LINE.match(s)
        if not m:
            unparsed.append(raw)
            continue
        fields = _split_fields(m.group(3))
        events.append(
            GpuLockEvent(
                line=no,
                time=m.group(1),
                event=m.group(2),
                pid=_to_int(fields.get("pid")),
                cmd=fields.get("cmd"),
                args=fields.get("args"),
                status=_to_int(fields.get("status")),
                elapsed_s=_to_float(fields.get("elapsed_s")),
                fields=fields,
            )
        )

    waiting: dict[int | None, datetime | None] = {}
    holding: dict[int | None, datetime | None] = {}
    waits: list[float] = []
    active = 0.0
    for ev in events:
        t = _parse_time(ev.time)
        if ev.event == "wait":
            waiting[ev.pid] = t
        elif ev.event == "start":
            if ev.pid in waiting:
                w = waiting.pop(ev.pid)
                if w is not None and t is not None:
                    waits.append(max((t - w).total_seconds(), 0.0))
            holding[ev.pid] = t
        elif ev.event == "end":
            if ev.pid in holding:
                st = holding.pop(ev.pid)
                if st is not None and t is not None:
                    active += max((t - st).total_seconds(), 0.0)
                elif ev.elapsed_s is not None:
                    active += ev.elapsed_s
            elif ev.elapsed_s is not None:
                active += ev.elapsed_s
        elif ev.event == "lock_timeout":
            waiting.pop(ev.pid, None)
    return GpuLockLog(
        events=events,
        acquisitions=sum(1 for e in events if e.event == "start"),
        wait_seconds=sum(waits),
        active_seconds=active,
        lock_timeouts=sum(1 for e in events if e.event == "lock_timeout"),
        reentrant=any(e.event == "reentrant_after_wait" for e in events),
        waits=waits,
        max_wait_seconds=max(waits, default=0.0),
        unfinished=len(holding),
        unparsed=unparsed,
    )
