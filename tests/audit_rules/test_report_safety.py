"""report.md keeps archive-derived text as data: no HTML, no injected lines, no fence break-outs."""

from __future__ import annotations

from audit_rules.report_safety import code_span, escape_html_outside_fences, fence_for, inline


def test_inline_folds_line_breaks() -> None:
    assert inline("opus\n# Verdict: clean\r\u2028x") == "opus # Verdict: clean x"
    assert inline(None) is None


def test_fence_longer_than_any_backtick_run() -> None:
    quote = "x = 1\n```\n# now markdown?\n`````"
    fence = fence_for(quote)
    assert len(fence) == 6
    doc = escape_html_outside_fences("\n".join([fence, quote, fence, "<b>after</b>"]))
    lines = doc.split("\n")
    assert lines[1:5] == quote.split("\n")  # inside the fence: verbatim
    assert lines[-1] == "&lt;b&gt;after&lt;/b&gt;"


def test_code_span_with_backticks() -> None:
    assert code_span("a.py:3") == "`a.py:3`"
    assert code_span("we`ird.py") == "`` we`ird.py ``"


def test_html_escaped_outside_fences() -> None:
    doc = escape_html_outside_fences("# Audit report\n<img src=x onerror=alert(1)> & co\n```\n<kept>\n```")
    assert doc.split("\n")[1] == "&lt;img src=x onerror=alert(1)&gt; &amp; co"
    assert "<kept>" in doc
