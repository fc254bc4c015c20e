"""KA207 infra-failure: the harness or environment failed, not the submitted code.

What it flags, with the evidence line: missing ninja ("Ninja is required to load C++
extensions"), nvcc unavailable, a CUDA driver too old for the installed torch (cu13 wheel on a
12.8 driver), GPU-lock starvation / lock timeouts, a broken harness venv
(`ModuleNotFoundError: No module named 'torch'` from a freshly created empty .venv), an
orphaned grading wrapper, an OOM caused by a neighbouring process.

Sources and effect:
* the graded logs (check.log, benchmark.log and their .contended copies) -> INFRA: the grade
  was decided by the environment;
* tool output inside the session -> ADVISORY context (the agent usually works around it),
  except when the run has no graded check log and is not correct, where the session's last
  infrastructure error is the best evidence of why -> INFRA.
Genuine defects of the submitted source (nvcc errors in the solution's own code, a missing
header only the agent's container had, wrong results) are KA208's, never infra.

Why it matters: seed cells failed on "Ninja is required" in a fresh repo/.venv, on torch cu130
vs driver 12.8, on a sibling holding the GPU lock for four hours; each was re-graded, not
failed ("infra, not model fault").

Bad::

    {"type":"tool_result","content":"RuntimeError: Ninja is required to load C++ extensions"}

Good::

    {"type":"tool_result","content":"error: identifier \\"mt\\" is undefined"}
"""

from __future__ import annotations

from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.transcript_text import classify_infra, clip, iter_log_lines, log_text
from ingest.model import EventKind, TranscriptEvent

# Enum members as module constants: on Python 3.11 `EventKind.X` goes through EnumType.__getattr__'s
# slow path (~0.13 us an access), several times per event on a 400k-event transcript.
_K_ERROR = EventKind.ERROR
_K_TOOL_RESULT = EventKind.TOOL_RESULT

RULE = RuleMeta(
    id="KA207",
    name="infra-failure",
    kind=RuleKind.TRANSCRIPT,
    severity=Severity.HIGH,
    effect=Effect.INFRA,
    summary="Environment/harness fault: missing ninja/nvcc, driver mismatch, lock starvation, broken venv.",
)


class Checker:
    KINDS = frozenset({EventKind.TOOL_RESULT, EventKind.ERROR})  # the only kinds feed() acts on

    def __init__(self, ctx: AuditContext) -> None:
        self.ctx = ctx
        self.last: dict[str, tuple[TranscriptEvent, str]] = {}  # infra kind -> last event + evidence

    def feed(self, event: TranscriptEvent) -> None:
        kind = event.kind
        if kind is not _K_TOOL_RESULT and kind is not _K_ERROR:
            return
        text = event.text
        if not text:
            return
        hit = classify_infra(text)
        if hit is not None:
            self.last[hit[0]] = (event, hit[1])

    def finish(self) -> Iterable[Finding]:
        out: list[Finding] = []
        archive = self.ctx.archive
        seen_logs: set[tuple[str, str]] = set()
        for name, no, line in iter_log_lines(archive):
            hit = classify_infra(line)
            if hit is None or (name, hit[0]) in seen_logs:
                continue
            seen_logs.add((name, hit[0]))
            out.append(Finding.of(
                RULE, file=name, line_start=no, quote=clip(line),
                explanation=(f"the graded {name} failed on the environment ({hit[0].replace('_', ' ')}), not on the "
                             "submitted code: re-grade, do not fail"),
                data={"infra_kind": hit[0], "source": "log", "evidence": hit[1]}))
        correct = self.ctx.run.result.get("correct") if isinstance(self.ctx.run.result, dict) else None
        check = log_text(archive, "check.log")
        graded_evidence = check is not None and check.strip() != ""
        decisive = correct is not True and not graded_evidence and not out
        for infra_kind, (event, evidence) in self.last.items():
            if decisive:
                effect, sev = Effect.INFRA, Severity.HIGH
                why = (f"the session's environment failed ({infra_kind.replace('_', ' ')}) and no graded check log "
                       "exists: the run was stopped by infrastructure, not judged on its code")
            else:
                effect, sev = Effect.ADVISORY, Severity.LOW
                why = (f"an infrastructure error ({infra_kind.replace('_', ' ')}) appeared during the session; the graded "
                       "result does not rest on it, recorded as context")
            out.append(Finding.of(RULE, file=event.source, line_start=event.line, quote=clip(evidence), explanation=why,
                                  effect=effect, severity=sev,
                                  data={"infra_kind": infra_kind, "source": "transcript", "evidence": evidence}))
        return out
