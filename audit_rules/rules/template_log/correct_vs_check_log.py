"""KA312 correct-vs-check-log: result.json's `correct` disagrees with the check log or exit code.

What it flags: `correct: true` while check.log's last line is not `PASS` (or there is no
check.log, or it is empty) or `check_exit_code` is non-zero; `correct: false` while check.log
passes with exit code 0. The pre-regrade pair (regrade.contended.correct vs
check.contended.log) is compared the same way when both exist.

Why it matters: correct is defined by the check (exit 0 and exactly one `PASS`, last). A
record that says otherwise was written by something other than the check -- a harness bug,
a hand edit, a regrade whose logs were not kept -- and its correctness cannot be trusted
without a regrade.

Bad: `"correct": true` with check.log ending `FAIL: shape 1 ... tolerance exceeded`.
Good: `"correct": true`, `"check_exit_code": 0`, check.log ending `PASS`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.transcript_text import last_nonblank_line, result_field

RULE = RuleMeta(
    id="KA312",
    name="correct-vs-check-log",
    kind=RuleKind.LOG,
    severity=Severity.HIGH,
    effect=Effect.ADVISORY,
    summary="result.json correct disagrees with check.log's last line or check_exit_code.",
)


def _compare(correct: Any, exit_code: Any, log: Any, log_name: str, key: str, reason: Any) -> list[Finding]:
    if not isinstance(correct, bool):
        return []
    out: list[Finding] = []
    lines = list(getattr(log, "lines", []) or []) if log is not None else []
    last = getattr(log, "last_line", None) if log is not None else None
    passed = bool(getattr(log, "passed", False)) if log is not None else False
    at = last_nonblank_line(lines)
    data = {"correct": correct, "check_exit_code": exit_code, "last_line": last, "log": log_name,
            "failure_reason": reason, "topic": "correctness_record"}
    if correct:
        if log is None or last is None:
            out.append(Finding.of(
                RULE, file="result.json", line_start=None, quote=f"{key}: true", severity=Severity.MEDIUM,
                explanation=f"result.json says {key}=true but {log_name} is missing or empty: nothing backs the claim",
                data=data | {"kind": "no_log"}))
        elif not passed:
            out.append(Finding.of(
                RULE, file=log_name, line_start=at, quote=last,
                explanation=f"result.json says {key}=true but {log_name} ends with `{last}`, not a single PASS",
                data=data | {"kind": "log_not_pass"}))
        if isinstance(exit_code, int) and exit_code != 0:
            out.append(Finding.of(
                RULE, file="result.json", line_start=None, quote=f"check_exit_code: {exit_code}",
                explanation=f"result.json says {key}=true but the check exited with code {exit_code}",
                data=data | {"kind": "exit_code"}))
    elif log is not None and passed and exit_code in (0, None):
        out.append(Finding.of(
            RULE, file=log_name, line_start=at, quote=last or "", severity=Severity.MEDIUM,
            explanation=(f"result.json says {key}=false (failure_reason={reason}) but {log_name} ends with PASS"
                         + (" and exit code 0" if exit_code == 0 else "")),
            data=data | {"kind": "log_pass_but_incorrect"}))
    return out


def check(ctx: AuditContext) -> Iterable[Finding]:
    run = ctx.run
    r = run.result
    out = _compare(r.get("correct"), r.get("check_exit_code"), run.check_log, "check.log", "correct",
                   r.get("failure_reason"))
    if run.check_contended_log is not None:
        out += _compare(result_field(r, "regrade", "contended", "correct"),
                        result_field(r, "regrade", "contended", "check_exit_code"),
                        run.check_contended_log, "check.contended.log", "regrade.contended.correct", None)
    return out
