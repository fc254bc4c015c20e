"""KA316 lock-starvation: the check never ran because another session held the GPU lock.

What it flags: gpu_lock.log `lock_timeout` events; or a check that timed out
(failure_reason check_timeout or check_exit_code 124) whose check log is empty or missing
while gpu_lock.log shows a long wait (>= 10 minutes, or a wait that never got the lock)
-> INFRA, at the lock_timeout / wait line.

Why it matters: seed: "a sibling fp8_gemm session held the bench GPU lock ~4h and check.py
timed out waiting (check.contended.log is 0 bytes; failure_reason=check_timeout is a
lock-starvation artifact, infra not model fault)". Such a run is re-graded, never failed.

Bad: `... lock_timeout pid=812 cmd=check` with check.log of 0 bytes.
Good: `wait`, `start` two seconds later, `end`; check.log PASS.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.transcript_text import result_field

RULE = RuleMeta(
    id="KA316",
    name="lock-starvation",
    kind=RuleKind.LOG,
    severity=Severity.HIGH,
    effect=Effect.INFRA,
    summary="GPU lock timeout / starvation left the check log empty: infrastructure, re-grade.",
)

LONG_WAIT_S = 600.0


def _t(s: str) -> datetime | None:
    try:
        return datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None


def unserved_waits(lock: Any) -> list[tuple[int, float | None]]:
    """(line, seconds waited until the log's end or a timeout) for waits never followed by a start."""
    events = list(getattr(lock, "events", []) or [])
    open_waits: dict[Any, Any] = {}
    for e in events:
        if e.event == "wait":
            open_waits[e.pid] = e
        elif e.event in ("start", "reentrant_after_wait"):
            open_waits.pop(e.pid, None)
    end = _t(events[-1].time) if events else None
    out: list[tuple[int, float | None]] = []
    for e in open_waits.values():
        t0 = _t(e.time)
        out.append((e.line, (end - t0).total_seconds() if end and t0 else None))
    return out


def _empty(ctx: AuditContext, name: str) -> bool:
    f = ctx.archive.files.get(name)
    return f is None or f.size == 0 or not ctx.archive.read_text(name).strip()


def check(ctx: AuditContext) -> Iterable[Finding]:
    run = ctx.run
    lock = run.gpu_lock
    if lock is None:
        return []
    out: list[Finding] = []
    check_name = "check.contended.log" if ctx.archive.has("check.contended.log") else "check.log"
    check_empty = _empty(ctx, check_name)
    reason = result_field(run.result, "failure_reason")
    contended_exit = result_field(run.result, "regrade", "contended", "check_exit_code")
    timed_out = reason == "check_timeout" or run.result.get("check_exit_code") == 124 or contended_exit == 124
    data_base = {"check_log": check_name, "check_log_empty": check_empty, "failure_reason": reason,
                 "max_wait_s": getattr(lock, "max_wait_seconds", 0.0), "infra_kind": "lock_starvation"}
    for e in getattr(lock, "events", []) or []:
        if e.event == "lock_timeout":
            out.append(Finding.of(
                RULE, file="gpu_lock.log", line_start=e.line,
                quote=f"{e.time} lock_timeout pid={e.pid} cmd={e.cmd}",
                severity=Severity.HIGH if check_empty or timed_out else Severity.MEDIUM,
                explanation=(f"the GPU lock timed out for `{e.cmd}`"
                             + (f" and {check_name} is empty" if check_empty else "")
                             + ": another session held the GPU; the run was starved, not judged"),
                data=data_base | {"cmd": e.cmd}))
    if not out and timed_out and check_empty:
        waits = unserved_waits(lock)
        long_waits = [(ln, s) for ln, s in waits if s is None or s >= LONG_WAIT_S]
        served_long = getattr(lock, "max_wait_seconds", 0.0) >= LONG_WAIT_S
        if long_waits or served_long:
            line = long_waits[0][0] if long_waits else None
            secs = long_waits[0][1] if long_waits else getattr(lock, "max_wait_seconds", None)
            out.append(Finding.of(
                RULE, file="gpu_lock.log", line_start=line,
                quote=f"wait{'' if secs is None else f' {secs:.0f} s'} without the lock; {check_name} empty",
                explanation=(f"the check timed out with an empty {check_name} while gpu_lock.log shows a "
                             + (f"{secs / 3600:.1f} h " if secs else "")
                             + "wait for the lock: lock starvation, infrastructure not model fault"),
                data=data_base | {"wait_s": secs}))
    return out
