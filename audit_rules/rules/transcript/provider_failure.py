"""KA206 provider-failure: the model's API failed, or the session stopped before doing work.

What it flags: provider errors surfaced in the stream (error events, claude's synthetic
"API Error: 402 Insufficient credits" message, an error result line): insufficient credits /
402, rate limits / 429, model not found, provider unavailable / overloaded / 5xx / api_error;
and an early stop below 5,000 output tokens with no solution or an incomplete session.
`data["failure_reason"]` uses the result.json vocabulary (provider_insufficient_credits,
provider_rate_limited, provider_unavailable, provider_early_stop).

Why it matters: a provider failure is not the model's failure on the problem; such runs leave
the pass-rate denominator ("a provider-side truncation before the first token, not a model
failure"). But the seeds are explicit that a late 402 does not excuse a real attempt: "647,516
output tokens and 19 in-session check.py executions far exceed the 5,000-token minimum-useful
threshold and a full solution exists" -> the code defect stands. Such a 402 is reported as
ADVISORY context, not PROVIDER.

Bad::

    {"type":"assistant","message":{"content":[{"type":"text","text":"API Error: 402 Insufficient credits."}]},"isApiErrorMessage":true}

Good::

    {"type":"result","subtype":"success","usage":{"output_tokens":64000}}
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.transcript_text import clip
from ingest.model import EventKind, Role, TranscriptEvent

# Enum members as module constants: on Python 3.11 `EventKind.X` goes through EnumType.__getattr__'s
# slow path (~0.13 us an access), several times per event on a 400k-event transcript.
_K_ERROR = EventKind.ERROR
_K_REASONING = EventKind.REASONING
_K_TEXT = EventKind.TEXT
_K_TOOL_CALL = EventKind.TOOL_CALL
_K_TOOL_RESULT = EventKind.TOOL_RESULT
_K_USAGE = EventKind.USAGE
_R_ASSISTANT = Role.ASSISTANT
_R_ERROR = Role.ERROR

RULE = RuleMeta(
    id="KA206",
    name="provider-failure",
    kind=RuleKind.TRANSCRIPT,
    severity=Severity.HIGH,
    effect=Effect.PROVIDER,
    summary="Provider/API failure (402 credits, 429, model not found, unavailable) or early stop < 5,000 tokens.",
)

MIN_USEFUL_OUTPUT_TOKENS = 5000
PROVIDER_PATTERNS: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("provider_insufficient_credits", "insufficient_credits",
     re.compile(r"\b402\b|insufficient[ _](?:credits?|balance|funds|quota)|credit balance is too low|out of credits|add more (?:credits )?using|payment required", re.I)),
    ("provider_rate_limited", "rate_limited",
     re.compile(r"\b429\b|rate[ _-]?limit|too many requests|usage limit (?:reached|exceeded)|quota exceeded", re.I)),
    ("provider_unavailable", "model_not_found",
     re.compile(r"model[ _]not[ _]found|model .{0,60}(?:does not exist|not found|is not available)|unknown model|no endpoints found", re.I)),
    ("provider_unavailable", "unavailable",
     re.compile(r"\b(?:500|502|503|504|529)\b|overloaded|service unavailable|provider (?:is )?(?:unavailable|error)|upstream (?:error|connect)|internal server error|bad gateway|api_error|api error|connection (?:error|refused|reset)", re.I)),
)


def classify_provider(text: str) -> tuple[str, str] | None:
    for reason, detail, pat in PROVIDER_PATTERNS:
        if pat.search(text):
            return reason, detail
    return None


def _tokens(usage: dict[str, Any] | None) -> int | None:
    if not usage:
        return None
    for k in ("output_tokens", "output"):
        v = usage.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


class Checker:
    def __init__(self, ctx: AuditContext) -> None:
        self.ctx = ctx
        self.errors: list[tuple[TranscriptEvent, str, str, str]] = []  # event, reason, detail, text
        self.max_total: int | None = None
        self.step_sum = 0
        self.last: TranscriptEvent | None = None

    def feed(self, event: TranscriptEvent) -> None:
        self.last = event
        kind = event.kind
        if kind is _K_TOOL_RESULT or kind is _K_TOOL_CALL or kind is _K_REASONING:
            return
        if kind is _K_USAGE:
            t = _tokens(event.usage)
            if t is not None:
                if event.usage is not None and "output" in event.usage and "output_tokens" not in event.usage:
                    self.step_sum += t  # opencode: per-step counts
                else:
                    self.max_total = t if self.max_total is None else max(self.max_total, t)
        text = event.text
        if not text:
            return
        is_err = kind is _K_ERROR or event.role is _R_ERROR or (kind is _K_USAGE and event.is_error)
        if not is_err and kind is _K_TEXT and event.role is _R_ASSISTANT and text.startswith("API Error"):
            is_err = True
        if not is_err:
            return
        hit = classify_provider(text)
        if hit is not None and len(self.errors) < 20:
            self.errors.append((event, hit[0], hit[1], text))

    def _output_tokens(self) -> tuple[int | None, str]:
        usage = self.ctx.run.result.get("usage") if isinstance(self.ctx.run.result, dict) else None
        if isinstance(usage, dict):
            t = _tokens(usage)
            if t is not None:
                return t, "result.json usage"
        stats = [s.output_tokens for s in self.ctx.run.transcripts if s.output_tokens is not None]
        if stats:
            return max(stats), "transcript stats"
        if self.max_total is not None or self.step_sum:
            return max(self.max_total or 0, self.step_sum), "transcript usage events"
        return None, "unknown"

    def finish(self) -> Iterable[Finding]:
        run = self.ctx.run
        tokens, token_source = self._output_tokens()
        complete = run.result.get("session_complete") if isinstance(run.result, dict) else None
        out: list[Finding] = []
        seen: set[str] = set()
        for event, reason, detail, text in self.errors:
            if reason in seen:
                continue
            seen.add(reason)
            data = {"failure_reason": reason, "detail": detail, "output_tokens": tokens, "token_source": token_source,
                    "has_solution": run.has_solution}
            real_attempt = tokens is not None and tokens >= MIN_USEFUL_OUTPUT_TOKENS and run.has_solution
            if real_attempt:
                out.append(Finding.of(
                    RULE, file=event.source, line_start=event.line, quote=clip(text),
                    effect=Effect.ADVISORY, severity=Severity.LOW,
                    explanation=(f"provider error ({detail.replace('_', ' ')}) ended the session, but {tokens:,} output tokens "
                                 "were produced and a solution exists: session-termination context only, the graded "
                                 "artifact is judged on its own"),
                    data=data | {"context_only": True}))
            else:
                out.append(Finding.of(
                    RULE, file=event.source, line_start=event.line, quote=clip(text),
                    explanation=(f"the model's provider failed ({detail.replace('_', ' ')}) with "
                                 + (f"only {tokens:,} output tokens" if tokens is not None else "no token count")
                                 + (" and no solution" if not run.has_solution else "")
                                 + ": a provider failure, not an attempt to judge"),
                    data=data | {"context_only": False}))
        if not self.errors and tokens is not None and tokens < MIN_USEFUL_OUTPUT_TOKENS and (
            not run.has_solution or complete is False
        ):
            ev = self.last
            out.append(Finding.of(
                RULE, file=ev.source if ev else "result.json", line_start=ev.line if ev else None,
                quote=clip(ev.text) if ev else "",
                explanation=(f"the session stopped after {tokens:,} output tokens (< {MIN_USEFUL_OUTPUT_TOKENS:,}), "
                             + ("with no solution" if not run.has_solution else "incomplete")
                             + ": an early stop before any useful attempt"),
                data={"failure_reason": "provider_early_stop", "detail": "early_stop", "output_tokens": tokens,
                      "token_source": token_source, "has_solution": run.has_solution, "context_only": False}))
        return out
