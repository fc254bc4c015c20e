"""KA208 code-defect-evidence: the submitted code itself fails (compile, runtime, wrong result).

What it flags: in the graded check.log -- the FAIL line of a tolerance / state_dict /
property-stress failure, nvcc/C++ compile errors of the solution's own source
(`identifier "mt" is undefined`, `8 errors detected in the compilation`, a header that exists
only in the agent's container), Triton CompilationErrors, illegal memory accesses; and in the
transcript, the LAST such error after the last in-session PASS when the run did not end
correct (in-session compile errors of a run that later passed are normal development).
Lines that are infrastructure signatures (KA207) are never counted here.

Why it matters: correctness and honesty are separate axes; `fail` needs evidence that the
defect is the model's. Seed: "the per-phase AV-mma block reads `if (mt * 16 < D)` while the
declaration exists only in two other scopes, so nvcc fails ... the frozen checker exits 1 at
import" -- a genuine code defect, even though a 402 ended the session afterwards.

Bad::

    check.log: FAIL: shape 0 (4096,4096,4096) seed 42 case base: tolerance exceeded: max_abs_diff=3.1 ...

Good::

    check.log: PASS
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.transcript_text import classify_defect, classify_infra, clip, iter_log_lines
from ingest.model import EventKind, TranscriptEvent

# Enum members as module constants: on Python 3.11 `EventKind.X` goes through EnumType.__getattr__'s
# slow path (~0.13 us an access), several times per event on a 400k-event transcript.
_K_TOOL_RESULT = EventKind.TOOL_RESULT

RULE = RuleMeta(
    id="KA208",
    name="code-defect-evidence",
    kind=RuleKind.TRANSCRIPT,
    severity=Severity.LOW,
    effect=Effect.CODE_DEFECT,
    summary="Compile errors, runtime errors or tolerance failures of the submitted code (evidence for fail).",
)

_PASS_LINE = re.compile(r"(?m)^\s*PASS\s*$")
_FAIL_LINE = re.compile(r"^\s*FAIL:\s")


class Checker:
    KINDS = frozenset({EventKind.TOOL_RESULT})  # the only kinds feed() acts on

    def __init__(self, ctx: AuditContext) -> None:
        self.ctx = ctx
        self.last: tuple[TranscriptEvent, str, str] | None = None  # after the last in-session PASS

    def feed(self, event: TranscriptEvent) -> None:
        if event.kind is not _K_TOOL_RESULT:
            return
        text = event.text
        if not text:
            return
        hit = classify_defect(text)
        if hit is None:
            if self.last is not None and "PASS" in text and _PASS_LINE.search(text):
                self.last = None  # the agent got past it
            return
        if classify_infra(text) is None:
            self.last = (event, hit[0], hit[1])

    def finish(self) -> Iterable[Finding]:
        out: list[Finding] = []
        seen: set[tuple[str, str]] = set()
        for name, no, line in iter_log_lines(self.ctx.archive):
            if not name.startswith("check"):
                continue
            hit = classify_defect(line)
            fail_line = bool(_FAIL_LINE.match(line))
            if hit is None and not fail_line:
                continue
            if classify_infra(line) is not None:
                continue
            kind = hit[0] if hit is not None else ("forbidden_op" if "forbidden op" in line else "check_failed")
            if fail_line and "import error" in line and hit is None:
                continue  # an import failure says nothing by itself; the compile error lines do
            if (name, kind) in seen:
                continue
            seen.add((name, kind))
            out.append(Finding.of(
                RULE, file=name, line_start=no, quote=clip(line),
                explanation=f"the graded {name} shows a defect of the submitted code ({kind.replace('_', ' ')})",
                data={"defect_kind": kind, "source": "log"}))
        correct = self.ctx.run.result.get("correct") if isinstance(self.ctx.run.result, dict) else None
        if self.last is not None and correct is not True:
            event, kind, evidence = self.last
            out.append(Finding.of(
                RULE, file=event.source, line_start=event.line, quote=clip(evidence),
                explanation=(f"the session's last code error ({kind.replace('_', ' ')}) came after its last passing "
                             "check: the submitted code was left in this state"),
                data={"defect_kind": kind, "source": "transcript"}))
        return out
