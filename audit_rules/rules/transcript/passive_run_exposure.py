"""KA202 passive-run-exposure: another run id appears only in tool OUTPUT.

What it flags: a foreign run id that shows up in what a tool returned -- a `ps` listing of
concurrent sessions, the GPU lock owner file (`pid<TAB>RUN_DIR`), a directory listing -- and
that no later tool input follows up (KA201 owns the follow-ups). One finding per foreign id,
at the first output line that showed it.

Why it matters: shared boxes run several sessions at once; seed audits repeatedly clear cells
whose transcripts hold sibling run ids "only in ps/process-listing tool output showing the
concurrent sessions' cmdlines -- the known false-positive class, not reads". Recording it as
passive exposure keeps the evidence without disqualifying the run, and lets a publish
tripwire tell exposure from use.

Bad (exposure recorded)::

    {"type":"tool_result","content":"12345 python check.py --run-dir outputs/runs/20260721_130209_grok_grok-5_mega"}

Good (nothing recorded)::

    {"type":"tool_result","content":"12345 python check.py --run-dir outputs/runs/<this run's id>"}
"""

from __future__ import annotations

from collections.abc import Iterable

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.transcript_text import analyze_call, clip, foreign_in_event_text, run_identity
from ingest.model import EventKind, TranscriptEvent

# Enum members as module constants: on Python 3.11 `EventKind.X` goes through EnumType.__getattr__'s
# slow path (~0.13 us an access), several times per event on a 400k-event transcript.
_K_TOOL_CALL = EventKind.TOOL_CALL
_K_TOOL_RESULT = EventKind.TOOL_RESULT

RULE = RuleMeta(
    id="KA202",
    name="passive-run-exposure",
    kind=RuleKind.TRANSCRIPT,
    severity=Severity.INFO,
    effect=Effect.PASSIVE_EXPOSURE,
    summary="Another run's id is seen only in tool output (ps listing, lock owner file, listing), never used.",
)

MAX_IDS = 30


def _context(text: str, fid: str) -> str:
    i = text.find(fid)
    line_start = text.rfind("\n", 0, i) + 1
    line_end = text.find("\n", i)
    line = text[line_start : line_end if line_end >= 0 else len(text)]
    low = text.lower()
    if "\t" in line and line.split("\t", 1)[0].strip().isdigit():
        return "lock_owner"
    if any(k in low for k in (" pid ", "\npid", "ppid", "/usr/bin/", "bwrap", "python ", "%cpu", "uid ")):
        return "process_listing"
    return "listing_or_output"


class Checker:
    KINDS = frozenset({EventKind.TOOL_CALL, EventKind.TOOL_RESULT})  # the only kinds feed() acts on

    def __init__(self, ctx: AuditContext) -> None:
        self.ident = run_identity(ctx.run, ctx.archive, ctx.other_run_ids)
        self.first: dict[str, tuple[TranscriptEvent, str, str]] = {}
        self.accessed: set[str] = set()

    def feed(self, event: TranscriptEvent) -> None:
        kind = event.kind
        if kind is _K_TOOL_RESULT:
            text = event.text
            if text:
                for fid in foreign_in_event_text(self.ident, event):
                    if fid not in self.first and len(self.first) < MAX_IDS:
                        i = text.find(fid)
                        snippet = text[max(0, i - 120) : i + len(fid) + 80]
                        self.first[fid] = (event, clip(snippet), _context(text, fid))
        elif kind is _K_TOOL_CALL:
            self.accessed.update(analyze_call(event).foreign(self.ident))

    def finish(self) -> Iterable[Finding]:
        out: list[Finding] = []
        for fid, (event, quote, where) in self.first.items():
            if fid in self.accessed:
                continue  # a tool input followed it up: KA201's finding
            out.append(
                Finding.of(
                    RULE,
                    file=event.source,
                    line_start=event.line,
                    quote=quote,
                    explanation=(
                        f"another run's id ({fid}) appears only in tool output ({where.replace('_', ' ')}); no tool "
                        "input of this session reaches that run, so this is passive exposure, not contamination"
                    ),
                    data={"foreign_run_id": fid, "context": where, "topic": "contamination"},
                )
            )
        return out
