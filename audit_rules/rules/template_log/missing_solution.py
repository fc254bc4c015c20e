"""KA317 missing-solution: the run left no solution to grade.

What it flags: has_solution false or no solution.py in the archive -> ADVISORY with the facts
synthesis needs to tell a model that produced nothing (`no_solution`) from a provider that
failed before the first token (`provider_*`): failure_reason, output tokens, session_complete,
harness exit code, tool-call count.

Why it matters: seed: "This run produced no agent output of any kind ... 402 Insufficient
credits ... Zero output tokens ... no solution.py" -> provider_failure, excluded from the
pass-rate denominator; while a long session that never wrote solution.py is the model's own
no_solution.

Bad: result.json `"has_solution": false` with no solution.py.
Good: solution.py present.
"""

from __future__ import annotations

from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.transcript_text import result_field

RULE = RuleMeta(
    id="KA317",
    name="missing-solution",
    kind=RuleKind.LOG,
    severity=Severity.MEDIUM,
    effect=Effect.ADVISORY,
    summary="No solution.py: data for synthesis (no_solution vs provider failure).",
)

MIN_USEFUL_OUTPUT_TOKENS = 5000


def check(ctx: AuditContext) -> Iterable[Finding]:
    run = ctx.run
    if run.has_solution and ctx.archive.has("solution.py"):
        return []
    tokens = result_field(run.result, "usage", "output_tokens")
    if not isinstance(tokens, int):
        stats = [s.output_tokens for s in run.transcripts if s.output_tokens is not None]
        tokens = max(stats) if stats else None
    reason = result_field(run.result, "failure_reason")
    tool_calls = sum(s.tool_calls for s in run.transcripts)
    if isinstance(reason, str) and reason.startswith("provider_"):
        likely = reason
    elif tokens is not None and tokens < MIN_USEFUL_OUTPUT_TOKENS:
        likely = "provider_early_stop"
    else:
        likely = "no_solution"
    return [Finding.of(
        RULE, file="result.json", line_start=None,
        quote=f"has_solution: {str(run.has_solution).lower()}; solution.py {'present' if ctx.archive.has('solution.py') else 'absent'}",
        explanation=(f"the run left no solution to grade (failure_reason={reason}, output tokens={tokens}, "
                     f"tool calls={tool_calls}); likely {likely}"),
        data={"likely": likely, "failure_reason": reason, "output_tokens": tokens, "tool_calls": tool_calls,
              "session_complete": result_field(run.result, "session_complete"),
              "harness_exit_code": result_field(run.result, "harness_exit_code")})]
