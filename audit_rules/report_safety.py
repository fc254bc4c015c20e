"""Archive-derived text in report.md is data, never markup.

Every string in a report that came from an archive (model, harness, problem, hardware, file
names, quotes, transcript names, reasons that quote them) is untrusted: a model name
`<img src=x onerror=...>` would run script in any Markdown viewer that passes HTML through, a
newline in it would start a fake `# Verdict: clean` heading, and three backticks in a quoted
line would close the code fence and turn the rest of the quote into Markdown.

- `inline` folds any line break or control character of a one-line field into a space;
- `code_span` / `fence_for` pick inline-code delimiters / a code fence longer than every backtick run in the quote;
- `escape_html_outside_fences` turns `& < >` into entities everywhere but inside fenced code
  (where a renderer shows them literally anyway); kaudit's own report text uses no HTML.
"""

from __future__ import annotations

import dataclasses
import re
from typing import overload

from ingest.model import ParsedRun

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]+")
_BACKTICKS = re.compile(r"`+")
_FENCE = re.compile(r"^(`{3,})")

@overload
def inline(text: str) -> str: ...
@overload
def inline(text: None) -> None: ...
@overload
def inline(text: str | None) -> str | None: ...


def inline(text: str | None) -> str | None:
    """A one-line field: line breaks and control characters folded into one space."""
    if text is None:
        return text
    return _CONTROL.sub(" ", text)


def inline_run(run: ParsedRun) -> ParsedRun:
    """A copy of `run` whose one-line identity fields cannot break the report's lines."""
    return dataclasses.replace(
        run,
        run_id=inline(run.run_id),
        model=inline(run.model),
        harness=inline(run.harness),
        problem=inline(run.problem),
        hardware=inline(run.hardware),
        started_at=inline(run.started_at),
        finished_at=inline(run.finished_at),
    )


def fence_for(quote: str) -> str:
    """A backtick fence no run of backticks inside `quote` can close."""
    longest = max((len(m.group(0)) for m in _BACKTICKS.finditer(quote)), default=0)
    return "`" * max(3, longest + 1)


def code_span(text: str) -> str:
    """`text` as inline code on one line, delimited by more backticks than it holds."""
    text = inline(text)
    longest = max((len(m.group(0)) for m in _BACKTICKS.finditer(text)), default=0)
    if not longest:
        return f"`{text}`"
    ticks = "`" * (longest + 1)
    return f"{ticks} {text} {ticks}"


def escape_html_outside_fences(markdown: str) -> str:
    out: list[str] = []
    fence: str | None = None
    for line in markdown.split("\n"):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append(line)
            continue
        if fence is not None:
            if line.strip() == fence:
                fence = None
            out.append(line)
            continue
        out.append(line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))
    return "\n".join(out)
