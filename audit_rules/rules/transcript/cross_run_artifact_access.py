"""KA201 cross-run-artifact-access: a tool INPUT reaches another run's artefacts.

What it flags: a tool call whose input (shell command, Read/Edit/Write path, grep/find
arguments, patch) names another run's folder or run id -- `outputs/runs/<other_run_id>/...`,
another run's torch-extension cache, a copy of another run's `.venv/bin/ninja` -- and a broad
read over `outputs/runs/*` whose output then carries another run's content. The run's own id
is never contamination.

Why it matters: seed audits excluded cells that found a completed foreign run of the same
problem and read its result, benchmark and solution.py before writing their own ("direct
foreign implementation and performance-artifact access invalidates benchmark independence").
Copying build tooling from a sibling run (`cp .../07_w4a16_gemm/repo/.venv/bin/ninja`) is
access too, but to tooling, not answers: it is recorded with `artifact_kind: tooling` and
medium severity so synthesis may treat it as exposure rather than answer contamination.
Naming a foreign run only in a listing command (`ls outputs/runs/<id>`) reads no content: it
is recorded as passive exposure with `artifact_kind: listing`.

Bad::

    {"type":"tool_use","name":"Bash","input":{"command":"cat outputs/runs/20260803_194356_claude_x_03_paged_attention/solution.py"}}

Good::

    {"type":"tool_use","name":"Bash","input":{"command":"cat outputs/runs/<this run's id>/check.log"}}
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.transcript_text import (
    RUNS_DIR_RE,
    CallInfo,
    RunIdentity,
    analyze_call,
    artifact_kind,
    clip,
    foreign_in_event_text,
    run_identity,
)
from ingest.model import EventKind, TranscriptEvent

# Enum members as module constants: on Python 3.11 `EventKind.X` goes through EnumType.__getattr__'s
# slow path (~0.13 us an access), several times per event on a 400k-event transcript.
_K_TOOL_CALL = EventKind.TOOL_CALL
_K_TOOL_RESULT = EventKind.TOOL_RESULT

RULE = RuleMeta(
    id="KA201",
    name="cross-run-artifact-access",
    kind=RuleKind.TRANSCRIPT,
    severity=Severity.CRITICAL,
    effect=Effect.CONTAMINATION,
    summary="A tool input reads, copies or lists another run's artefacts (solution, result, logs, cache, tooling).",
)

MAX_FINDINGS = 50
_LISTING_PROGS = frozenset({"ls", "tree", "du", "stat", "find", "fd", "realpath", "readlink", "file", "exa", "eza"})
_LISTING_TOOLS = frozenset({"ls", "list", "list_dir", "glob"})
_CONTENT_PROGS = frozenset(
    {"cat", "head", "tail", "less", "more", "grep", "rg", "egrep", "awk", "sed", "cp", "rsync", "tar", "diff", "python", "python3", "bat", "nl", "xxd", "strings", "md5sum", "jq"}
)
_SEVERITY = {
    "solution": Severity.CRITICAL,
    "result": Severity.CRITICAL,
    "logs": Severity.CRITICAL,
    "transcript": Severity.CRITICAL,
    "build_cache": Severity.CRITICAL,
    "other": Severity.HIGH,
    "tooling": Severity.MEDIUM,
}


def _after_id(text: str, run_id: str) -> str:
    i = text.find(run_id)
    if i < 0:
        return ""
    rest = text[i + len(run_id) :]
    m = re.match(r"[^\s'\"`;|&<>()]*", rest)
    return m.group(0) if m else ""


class Checker:
    KINDS = frozenset({EventKind.TOOL_CALL, EventKind.TOOL_RESULT})  # the only kinds feed() acts on

    def __init__(self, ctx: AuditContext) -> None:
        self.ident: RunIdentity = run_identity(ctx.run, ctx.archive, ctx.other_run_ids)
        self.findings: list[Finding] = []
        self.seen: set[tuple[str, str, int]] = set()
        self.exposed: dict[str, int] = {}  # foreign id -> first tool-output line that showed it
        self.pending: dict[str | None, tuple[TranscriptEvent, str]] = {}  # broad reads awaiting output

    def feed(self, event: TranscriptEvent) -> None:
        kind = event.kind
        if kind is _K_TOOL_CALL:
            self._call(event)
        elif kind is _K_TOOL_RESULT:
            self._result(event)

    def _call(self, event: TranscriptEvent) -> None:
        info = analyze_call(event)
        text = info.text
        foreign = info.foreign(self.ident)
        if not foreign and "outputs/runs" not in text:
            return
        info.ensure_shell()
        progs = {sc.prog for sc in info.commands}
        tool = info.tool.lower()
        listing_only = (tool in _LISTING_TOOLS) or (bool(progs) and progs <= _LISTING_PROGS and "-exec" not in text)
        for fid in foreign:
            rest = _after_id(text, fid)
            kind = "listing" if listing_only else artifact_kind(rest)
            if kind == "listing" and not listing_only:
                kind = "other"
            self._emit(event, fid, kind, clip(info.command or text), discovered=self.exposed.get(fid))
        if not foreign and "outputs/runs" in text and not listing_only and self._broad_read(info):
            # A broad read (`grep -r x outputs/runs/`, `cat outputs/runs/*/solution.py`): judged
            # by what came back.
            self.pending[event.call_id] = (event, clip(info.command or text))

    @staticmethod
    def _broad_read(info: CallInfo) -> bool:
        """A content read whose target is outputs/runs itself or a glob over its run folders."""

        def broad(arg: str) -> bool:
            for m in RUNS_DIR_RE.finditer(arg):
                comp = (m.group(1) or "").split("/", 1)[0]
                if not comp or any(ch in comp for ch in "*?[{$"):
                    return True
            return False

        if info.command is None:
            return broad(info.text)
        return any(sc.prog not in _LISTING_PROGS and any(broad(a) for a in sc.argv[1:]) for sc in info.commands)

    def _result(self, event: TranscriptEvent) -> None:
        text = event.text
        if not text:
            return
        foreign = foreign_in_event_text(self.ident, event)
        if not foreign:
            self.pending.pop(event.call_id, None)
            return
        hit = None
        if event.call_id in self.pending:
            hit = self.pending.pop(event.call_id)
        elif None in self.pending:
            hit = self.pending.pop(None)
        if hit is not None:
            call, quote = hit
            for fid in foreign:
                kind = artifact_kind(_after_id(text, fid))
                if kind == "listing":
                    kind = "other"
                self._emit(call, fid, kind, quote, broad=True, discovered=self.exposed.get(fid))
            return
        for fid in foreign:
            self.exposed.setdefault(fid, event.line)

    def _emit(
        self,
        event: TranscriptEvent,
        fid: str,
        kind: str,
        quote: str,
        *,
        broad: bool = False,
        discovered: int | None = None,
    ) -> None:
        key = (fid, kind, event.line)
        if key in self.seen or len(self.findings) >= MAX_FINDINGS:
            return
        self.seen.add(key)
        data = {"foreign_run_id": fid, "artifact_kind": kind, "broad_read": broad, "topic": "contamination"}
        if discovered is not None:
            data["discovered_at_line"] = discovered
        if kind == "listing":
            effect, severity = Effect.PASSIVE_EXPOSURE, Severity.LOW
            why = (
                f"the tool input lists another run's folder ({fid}) but reads no file content; deliberate "
                "browsing of a foreign run, recorded as exposure, not use"
            )
        elif kind == "tooling":
            effect, severity = Effect.CONTAMINATION, Severity.MEDIUM
            why = (
                f"the tool input copies or runs build tooling from another run ({fid}); this reaches a foreign "
                "run's folder but takes tooling, not answers (no solution, result or log of that run)"
            )
        else:
            effect, severity = Effect.CONTAMINATION, _SEVERITY.get(kind, Severity.HIGH)
            how = "a broad read over outputs/runs returned" if broad else "the tool input reaches"
            why = (
                f"{how} another run's {kind.replace('_', ' ')} ({fid}); using a foreign run's artefacts "
                "breaks the independence of this run's result"
            )
        if discovered is not None:
            why += f" (that run id was first shown by tool output at line {discovered}, then followed up)"
        self.findings.append(
            Finding.of(
                RULE,
                file=event.source,
                line_start=event.line,
                quote=quote,
                explanation=why,
                effect=effect,
                severity=severity,
                data=data,
            )
        )

    def finish(self) -> Iterable[Finding]:
        return list(self.findings)
