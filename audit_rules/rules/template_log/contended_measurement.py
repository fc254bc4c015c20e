"""KA315 contended-measurement: where the metric was measured, and under what contention.

What it flags:
* result.json `regrade.mode == "sequential_isolated"` -> INFO with
  data["measurement_status"] = "sequential_isolated" and the superseded in-run figures
  (regrade.contended: correct, peak_fraction, exit codes) listed as provenance;
* no isolated regrade but the in-run measurement shows contention -- gpu_lock.log waits,
  lock timeouts, a reentrant acquisition after a wait -> ADVISORY (medium) with
  data["measurement_status"] = "in_run_contended" and the evidence.
An in-run measurement with no lock wait at all is not flagged (the seeds publish those:
"measured in-run on an idle GPU under the harness GPU lock ... with zero lock wait").

Why it matters: in-run figures on a shared box are taken while sibling sessions compile and
benchmark; the seeds publish the sequential isolated regrade and keep contended figures only
as provenance ("0.0279 is retained only as in-run/contended provenance").

Bad: gpu_lock.log `wait` at 10:00:00 then `start` at 10:42:00, no regrade in result.json.
Good: result.json regrade.mode = sequential_isolated.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.transcript_text import result_field

RULE = RuleMeta(
    id="KA315",
    name="contended-measurement",
    kind=RuleKind.LOG,
    severity=Severity.MEDIUM,
    effect=Effect.ADVISORY,
    summary="Measurement status: in-run under GPU contention vs sequential isolated regrade (superseded figures).",
)

MIN_WAIT_S = 5.0


def contention_evidence(lock: Any) -> tuple[list[str], int | None]:
    """Plain-words evidence of contention from a parsed gpu_lock.log, and the first line showing it."""
    if lock is None:
        return [], None
    ev: list[str] = []
    first: int | None = None
    waits = [w for w in (getattr(lock, "waits", None) or []) if w >= MIN_WAIT_S]
    if waits:
        ev.append(f"{len(waits)} lock wait(s), longest {max(waits):.0f} s, total {sum(waits):.0f} s")
    if getattr(lock, "lock_timeouts", 0):
        ev.append(f"{lock.lock_timeouts} lock timeout(s)")
    if getattr(lock, "reentrant", False):
        ev.append("reentrant acquisition after a wait")
    if ev:
        for e in getattr(lock, "events", []) or []:
            if e.event in ("wait", "lock_timeout", "reentrant_after_wait"):
                first = e.line
                break
    return ev, first


def check(ctx: AuditContext) -> Iterable[Finding]:
    run = ctx.run
    hr = run.harness_regrade()
    if hr is not None and hr.isolated:
        contended = hr.contended
        superseded: list[dict[str, Any]] = []
        if isinstance(contended, dict):
            superseded.append({"source": "in_run", **{k: v for k, v in contended.items() if not isinstance(v, dict | list)}})
        return [Finding.of(
            RULE, file=hr.source, line_start=None, severity=Severity.INFO,
            quote=f"regrade.mode: sequential_isolated (gpu {hr.record.get('gpu_name') or '?'})",
            explanation=("the recorded metric comes from a sequential isolated regrade"
                         + (f"; the in-run figures ({', '.join(f'{k}={v}' for k, v in superseded[0].items() if k != 'source')}) "
                            "are superseded and kept as provenance" if superseded else "")),
            data={"measurement_status": "sequential_isolated", "superseded": superseded,
                  "regrade_at": hr.record.get("at"), "regrade_gpu": hr.record.get("gpu_name")})]
    evidence, first = contention_evidence(run.gpu_lock)
    if not evidence:
        return []
    return [Finding.of(
        RULE, file="gpu_lock.log", line_start=first, quote="; ".join(evidence),
        explanation=("the metric was measured in-run while the GPU was contended (" + "; ".join(evidence)
                     + ") and no isolated regrade supersedes it"),
        data={"measurement_status": "in_run_contended", "evidence": evidence,
              "peak_fraction": result_field(run.result, "peak_fraction"), "superseded": []})]
