"""Transcript dialects: sniffing and normalization to one event stream (streamed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ingest.model import Dialect, EventKind, Role, TranscriptEvent, TranscriptStats
from ingest.transcripts import iter_events, read_events, sniff_dialect, transcript_stats

FIX = Path(__file__).parent / "fixtures"


def _write(tmp: Path, lines: list[Any], name: str = "t.jsonl") -> Path:
    p = tmp / name
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return p


def _kinds(events: list[TranscriptEvent]) -> list[tuple[str, str]]:
    return [(e.role.value, e.kind.value) for e in events]


# ---------------------------------------------------------------------------------------------
# claude


def test_claude_fixture() -> None:
    path = FIX / "claude_transcript.jsonl"
    assert sniff_dialect(path) is Dialect.CLAUDE
    events, stats = read_events(path, "transcript.jsonl")
    assert stats.dialect is Dialect.CLAUDE
    assert stats.lines == 14
    assert stats.unparsable_lines == 2  # the banner and the truncated line
    assert stats.json_lines == 12
    assert stats.events == len(events)
    assert [e.index for e in events] == list(range(len(events)))
    assert all(e.source == "transcript.jsonl" and e.dialect is Dialect.CLAUDE for e in events)

    # one event per content block: thinking, text, tool_use from one message (line 3)
    line3 = [e for e in events if e.line == 3]
    assert [e.kind for e in line3] == [EventKind.REASONING, EventKind.TEXT, EventKind.TOOL_CALL]
    assert "checker never mutates" in line3[0].text
    bash = line3[2]
    assert bash.tool_name == "Bash" and bash.call_id == "toolu_01A"
    assert bash.tool_input["command"].startswith("cat problems/01_fp8_gemm/reference.py")
    assert line3[0].usage is not None and line3[0].usage["output_tokens"] == 310

    results = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert [r.call_id for r in results] == ["toolu_01A", "toolu_01B", "toolu_01C", "toolu_01D"]
    assert all(r.role is Role.TOOL for r in results)
    assert "20260801_101500_codex_gpt-5_01_fp8_gemm" in results[1].text  # list-of-blocks content
    assert results[3].is_error and not results[0].is_error

    calls = {e.tool_name: e for e in events if e.kind is EventKind.TOOL_CALL}
    assert calls["Write"].tool_input["file_path"].endswith("/repo/solution.py")
    assert calls["Edit"].tool_input["file_path"] == "problems/01_fp8_gemm/problem.yaml"
    assert stats.tool_calls == 4

    errors = [e for e in events if e.kind is EventKind.ERROR]
    assert any("429" in e.text and "rate_limit" in e.text for e in errors)
    assert any("402" in e.text and "Insufficient credits" in e.text for e in errors)
    assert all(e.is_error and e.role is Role.ERROR for e in errors)

    usage = [e for e in events if e.kind is EventKind.USAGE]
    assert len(usage) == 1 and usage[0].usage is not None
    assert usage[0].usage["total_cost_usd"] == pytest.approx(0.4312)
    assert stats.output_tokens == 1234
    assert events[0].kind is EventKind.META and "init" in events[0].text


def test_claude_user_string_content(tmp_path: Path) -> None:
    p = _write(tmp_path, [{"type": "user", "message": {"role": "user", "content": "please optimise"}}])
    events, _ = read_events(p, "t")
    assert _kinds(events) == [("user", "text")]
    assert events[0].text == "please optimise"


# ---------------------------------------------------------------------------------------------
# codex


def test_codex_fixture() -> None:
    path = FIX / "codex_session.jsonl"
    assert sniff_dialect(path) is Dialect.CODEX
    events, stats = read_events(path, "codex_session.jsonl")
    assert stats.unparsable_lines == 1
    assert events[0].kind is EventKind.META and "cwd=" in events[0].text
    calls = [e for e in events if e.kind is EventKind.TOOL_CALL]
    assert [c.tool_name for c in calls] == ["shell", "shell", "apply_patch"]
    assert calls[0].tool_input["command"][2].startswith("sed -n")  # arguments JSON string decoded
    assert isinstance(calls[2].tool_input, str) and calls[2].tool_input.startswith("*** Begin Patch")
    outs = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert [o.call_id for o in outs] == ["call_A1", "call_A2", "call_A3"]
    assert outs[0].text == "import torch\n# checker\n" and not outs[0].is_error
    assert outs[1].is_error and "ninja" in outs[1].text
    assert "Updated the following files" in outs[2].text
    # reasoning and agent messages appear once although both record families carry them
    reasoning = [e for e in events if e.kind is EventKind.REASONING]
    assert len(reasoning) == 1 and "Planning the kernel" in reasoning[0].text
    finals = [e for e in events if e.kind is EventKind.TEXT and "Triton FP8 GEMM" in e.text]
    assert len(finals) == 1 and finals[0].role is Role.ASSISTANT
    users = [e for e in events if e.role is Role.USER]
    assert len(users) == 1
    usage = [e for e in events if e.kind is EventKind.USAGE]
    assert usage[0].usage is not None and usage[0].usage["output_tokens"] == 3100
    assert usage[0].usage["rate_limits"]["primary"]["used_percent"] == 99.0
    assert stats.output_tokens == 3100
    errors = [e for e in events if e.kind is EventKind.ERROR]
    assert len(errors) == 1 and "429" in errors[0].text
    assert all(e.timestamp and e.timestamp.startswith("2026-08-01") for e in events)


def test_codex_exec_json(tmp_path: Path) -> None:
    lines = [
        {"type": "thread.started", "thread_id": "t1"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "i0", "type": "reasoning", "text": "thinking"}},
        {"type": "item.started", "item": {"id": "i1", "type": "command_execution", "command": "bash -lc ls",
                                          "status": "in_progress"}},
        {"type": "item.completed", "item": {"id": "i1", "type": "command_execution", "command": "bash -lc ls",
                                            "aggregated_output": "a\nb\n", "exit_code": 2, "status": "failed"}},
        {"type": "item.completed", "item": {"id": "i2", "type": "file_change",
                                            "changes": [{"path": "problems/01_fp8_gemm/check.py", "kind": "update"}]}},
        {"type": "item.completed", "item": {"id": "i3", "type": "agent_message", "text": "done"}},
        {"type": "turn.completed", "usage": {"input_tokens": 10, "cached_input_tokens": 0, "output_tokens": 42}},
    ]
    p = _write(tmp_path, lines)
    assert sniff_dialect(p) is Dialect.CODEX
    events, stats = read_events(p, "transcript.jsonl")
    kinds = [e.kind for e in events if e.kind is not EventKind.META]
    assert kinds == [EventKind.REASONING, EventKind.TOOL_CALL, EventKind.TOOL_RESULT, EventKind.TOOL_CALL,
                     EventKind.TEXT, EventKind.USAGE]
    result = next(e for e in events if e.kind is EventKind.TOOL_RESULT)
    assert result.is_error and result.call_id == "i1"
    change = [e for e in events if e.tool_name == "file_change"][0]
    assert change.tool_input["changes"][0]["path"].endswith("check.py")
    assert stats.output_tokens == 42


# ---------------------------------------------------------------------------------------------
# opencode


def test_opencode_fixture() -> None:
    path = FIX / "opencode_transcript.jsonl"
    assert sniff_dialect(path) is Dialect.OPENCODE
    events, stats = read_events(path, "transcript.jsonl")
    assert stats.unparsable_lines == 0
    calls = [e for e in events if e.kind is EventKind.TOOL_CALL]
    assert [c.tool_name for c in calls] == ["bash", "write", "edit"]
    assert calls[0].tool_input["command"].startswith("ls problems/01_fp8_gemm")
    assert calls[2].tool_input["filePath"].endswith("check.py")
    results = [e for e in events if e.kind is EventKind.TOOL_RESULT]
    assert [r.call_id for r in results] == ["call_oc1", "call_oc2", "call_oc3"]
    assert results[2].is_error and "oldString not found" in results[2].text
    assert "SHAPES" in results[0].text
    errors = [e for e in events if e.kind is EventKind.ERROR]
    assert len(errors) == 1 and "402" in errors[0].text and "insufficient credits" in errors[0].text
    usage = [e for e in events if e.kind is EventKind.USAGE]
    assert len(usage) == 2 and usage[0].usage is not None and usage[0].usage["cost"] == pytest.approx(0.0123)
    assert stats.output_tokens == 700 + 300 + 50
    assert any(e.kind is EventKind.REASONING and "timed shapes" in e.text for e in events)
    assert any(e.kind is EventKind.TEXT and e.role is Role.ASSISTANT for e in events)


# ---------------------------------------------------------------------------------------------
# best-effort dialects


def test_gemini(tmp_path: Path) -> None:
    lines = [
        {"type": "init", "timestamp": "2026-08-01T00:00:00Z", "session_id": "g1", "model": "gemini-3-pro"},
        {"type": "message", "role": "user", "content": "optimise"},
        {"type": "message", "role": "assistant", "content": "Looking.", "delta": True},
        {"type": "tool_use", "tool_name": "run_shell_command", "tool_id": "c1", "parameters": {"command": "ls"}},
        {"type": "tool_result", "tool_id": "c1", "status": "error", "output": "denied"},
        {"type": "result", "status": "success", "stats": {"total_tokens": 100, "output_tokens": 33}},
    ]
    p = _write(tmp_path, lines)
    assert sniff_dialect(p) is Dialect.GEMINI
    events, stats = read_events(p, "t")
    call = next(e for e in events if e.kind is EventKind.TOOL_CALL)
    assert call.tool_name == "run_shell_command" and call.tool_input == {"command": "ls"}
    res = next(e for e in events if e.kind is EventKind.TOOL_RESULT)
    assert res.is_error and res.call_id == "c1"
    assert stats.output_tokens == 33


def test_cursor(tmp_path: Path) -> None:
    lines = [
        {"type": "system", "subtype": "init", "session_id": "c", "model": "gpt-5", "cwd": "/w",
         "permissionMode": "default", "apiKeySource": "login"},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}]},
         "session_id": "c"},
        {"type": "tool_call", "subtype": "started", "call_id": "k1",
         "tool_call": {"shellToolCall": {"args": {"command": "nvcc --version"}}}, "session_id": "c"},
        {"type": "tool_call", "subtype": "completed", "call_id": "k1",
         "tool_call": {"shellToolCall": {"args": {"command": "nvcc --version"},
                                         "result": {"success": {"stdout": "release 12.8", "exitCode": 0}}}}},
        {"type": "result", "subtype": "success", "is_error": False, "result": "ok", "duration_ms": 5},
    ]
    p = _write(tmp_path, lines)
    assert sniff_dialect(p) is Dialect.CURSOR
    events, _ = read_events(p, "t")
    call = next(e for e in events if e.kind is EventKind.TOOL_CALL)
    assert call.tool_name == "shell" and call.tool_input == {"command": "nvcc --version"}
    res = next(e for e in events if e.kind is EventKind.TOOL_RESULT)
    assert "release 12.8" in res.text and res.call_id == "k1"


def test_droid(tmp_path: Path) -> None:
    lines = [
        {"type": "system", "subtype": "init", "cwd": "/w", "session_id": "d", "tools": ["Execute"], "model": "m"},
        {"type": "message", "role": "user", "id": "m0", "text": "go", "timestamp": 1, "session_id": "d"},
        {"type": "tool_call", "id": "t1", "messageId": "m1", "toolId": "Execute", "toolName": "Execute",
         "parameters": {"command": "make"}, "timestamp": 2},
        {"type": "tool_result", "id": "t1", "messageId": "m1", "toolId": "Execute", "isError": True,
         "value": "make: *** error", "timestamp": 3},
        {"type": "completion", "finalText": "done", "numTurns": 2, "durationMs": 10,
         "usage": {"input_tokens": 5, "output_tokens": 7}},
    ]
    p = _write(tmp_path, lines)
    assert sniff_dialect(p) is Dialect.DROID
    events, stats = read_events(p, "t")
    assert _kinds(events) == [("system", "meta"), ("user", "text"), ("assistant", "tool_call"),
                              ("tool", "tool_result"), ("system", "usage")]
    assert events[2].tool_input == {"command": "make"} and events[3].is_error
    assert stats.output_tokens == 7


def test_kimi(tmp_path: Path) -> None:
    lines = [
        {"role": "assistant", "content": [{"type": "think", "think": "plan"}, {"type": "text", "text": "ok"}],
         "tool_calls": [{"type": "function", "id": "tc1",
                         "function": {"name": "Shell", "arguments": json.dumps({"command": "ls"})}}]},
        {"role": "tool", "tool_call_id": "tc1", "content": "a b"},
    ]
    p = _write(tmp_path, lines)
    assert sniff_dialect(p) is Dialect.KIMI
    events, _ = read_events(p, "t")
    assert _kinds(events) == [("assistant", "reasoning"), ("assistant", "text"), ("assistant", "tool_call"),
                              ("tool", "tool_result")]
    assert events[2].tool_input == {"command": "ls"} and events[3].call_id == "tc1"


def test_grok_token_deltas(tmp_path: Path) -> None:
    lines = [{"choices": [{"delta": {"content": tok}}]} for tok in ["Hel", "lo ", "wor", "ld"]]
    lines.insert(0, {"choices": [{"delta": {"reasoning_content": "think"}}]})
    p = _write(tmp_path, lines)
    assert sniff_dialect(p) is Dialect.GROK
    events, stats = read_events(p, "t")
    assert [(e.kind, e.text) for e in events] == [(EventKind.REASONING, "think"), (EventKind.TEXT, "Hello world")]
    assert stats.json_lines == 5


def test_plain_text(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text("Welcome to agent\n\nrunning python check.py\nPASS\n")
    assert sniff_dialect(p) is Dialect.PLAIN
    events, stats = read_events(p, "t")
    assert [e.text for e in events] == ["Welcome to agent", "running python check.py", "PASS"]
    assert [e.line for e in events] == [1, 3, 4]
    assert stats.unparsable_lines == 0


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    p.write_text("")
    assert sniff_dialect(p) is Dialect.PLAIN
    assert read_events(p, "t")[0] == []


def test_unknown_json(tmp_path: Path) -> None:
    p = _write(tmp_path, [{"foo": 1}, {"text": "hello"}])
    assert sniff_dialect(p) is Dialect.UNKNOWN
    events, _ = read_events(p, "t")
    assert any(e.text == "hello" for e in events)


def test_garbage_lines_counted_never_fatal(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    good = json.dumps({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text",
                                                                                          "text": "x"}]}})
    p.write_bytes(b"\xff\xfe binary junk\n" + good.encode() + b"\n[1,2]\n{broken\n" + good.encode() + b"\n")
    stats = transcript_stats(p, "t")
    assert stats.dialect is Dialect.CLAUDE
    assert stats.unparsable_lines == 3
    assert stats.events == 2


def test_oversized_line_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ingest import transcripts as mod

    monkeypatch.setattr(mod, "MAX_LINE_BYTES", 1000)
    good = json.dumps({"type": "user", "message": {"role": "user", "content": "x"}})
    huge = json.dumps({"type": "user", "message": {"role": "user", "content": "y" * 5000}})
    p = tmp_path / "t.jsonl"
    p.write_text(f"{good}\n{huge}\n{good}\n")
    events, stats = read_events(p, "t")
    assert [e.line for e in events] == [1, 3]
    assert stats.unparsable_lines == 1 and stats.lines == 3


def test_iter_events_is_lazy(tmp_path: Path) -> None:
    """The iterator yields before reading the whole file (streaming, not a list)."""
    line = json.dumps({"type": "user", "message": {"role": "user", "content": "x"}})
    p = tmp_path / "t.jsonl"
    p.write_text((line + "\n") * 1000)
    stats = TranscriptStats(source="t", dialect=Dialect.UNKNOWN)
    it = iter_events(p, "t", stats)
    first = next(it)
    assert first.line == 1
    assert stats.lines < 1000


def test_claude_stream_events_ignored(tmp_path: Path) -> None:
    lines = [
        {"type": "system", "subtype": "init", "session_id": "s", "tools": []},
        {"type": "stream_event", "event": {"type": "content_block_delta", "delta": {"text": "He"}}},
        {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]}},
    ]
    events, stats = read_events(_write(tmp_path, lines), "t")
    assert [e.text for e in events if e.kind is EventKind.TEXT] == ["Hello"]
    assert stats.json_lines == 3 and stats.unparsable_lines == 0


def test_codex_dedupe_window_is_bounded(tmp_path: Path) -> None:
    """Identical text from the same record family is kept; only cross-family echoes are dropped."""
    lines: list[Any] = [{"timestamp": "t", "type": "session_meta", "payload": {"id": "x"}}]
    for i in range(600):
        lines.append({"timestamp": "t", "type": "response_item",
                      "payload": {"type": "message", "role": "assistant",
                                  "content": [{"type": "output_text", "text": f"msg {i % 3}"}]}})
    events, _ = read_events(_write(tmp_path, lines), "t")
    assert sum(1 for e in events if e.kind is EventKind.TEXT) == 600


def test_bom_and_crlf(tmp_path: Path) -> None:
    line = json.dumps({"type": "user", "message": {"role": "user", "content": "x"}})
    p = tmp_path / "t.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + line.encode() + b"\r\n" + line.encode() + b"\r\n")
    assert sniff_dialect(p) is Dialect.CLAUDE
    events, stats = read_events(p, "t")
    assert len(events) == 2 and stats.unparsable_lines == 0


def test_claude_synthetic_api_error_without_flag(tmp_path: Path) -> None:
    lines = [
        {"type": "assistant", "message": {"role": "assistant", "model": "<synthetic>",
                                          "content": [{"type": "text", "text": "Credit balance is too low"}]}},
        {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "API Error: 529 Overloaded"}]}},
        {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "The kernel is done. API Error handling is in place."}]}},
    ]
    events, _ = read_events(_write(tmp_path, lines), "t")
    assert [e.kind for e in events] == [EventKind.ERROR, EventKind.ERROR, EventKind.TEXT]


def test_bench_generator_smoke(tmp_path: Path) -> None:
    """bench/transcript_parse_bench.py's generator stays in step with the normalizer."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "transcript_parse_bench", Path(__file__).resolve().parents[2] / "bench" / "transcript_parse_bench.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = tmp_path / "t.jsonl"
    written, _size = mod.generate(p, 2000)
    stats = transcript_stats(p, "t")
    assert stats.events == written and stats.dialect is Dialect.CLAUDE
