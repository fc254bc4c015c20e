"""Agent transcripts: sniff the dialect, normalize every dialect to one event stream.

Transcripts are whatever the agent CLI printed: often tens of megabytes, sometimes with banner
lines, truncated JSON or binary junk. They are read line by line (a line is never longer than
MAX_LINE_BYTES in memory; a longer one is skipped and counted), never loaded whole, and a line
that does not parse is counted in the stats and skipped, never fatal.

One event per content block: an assistant message with thinking, text and two tool calls
yields four events, each with the 1-based source line, so findings point at the line.

Dialects (see the spec): claude (and cursor, whose stream-json is claude-like), codex (the
rollout `codex_session.jsonl` {type,timestamp,payload} and `codex exec --json` item events),
opencode, gemini, droid, kimi, grok (token deltas only), plain text.
"""

from __future__ import annotations

import hashlib
import json
import json.scanner
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from graders.runformat import TRANSCRIPT_FILES  # noqa: F401  (re-exported: ingest.transcripts.TRANSCRIPT_FILES)
from ingest.model import Dialect, EventKind, Role, TranscriptEvent, TranscriptStats

# Enum members as module constants: on Python 3.11 `EventKind.X` goes through EnumType.__getattr__'s
# slow path (~0.13 us an access), several times per event on a 400k-event transcript.
_K_ERROR = EventKind.ERROR
_K_META = EventKind.META
_K_REASONING = EventKind.REASONING
_K_TEXT = EventKind.TEXT
_K_TOOL_CALL = EventKind.TOOL_CALL
_K_TOOL_RESULT = EventKind.TOOL_RESULT
_K_USAGE = EventKind.USAGE
_R_ASSISTANT = Role.ASSISTANT
_R_ERROR = Role.ERROR
_R_SYSTEM = Role.SYSTEM
_R_TOOL = Role.TOOL
_R_USER = Role.USER

MAX_LINE_BYTES = 64 << 20
SNIFF_LINES = 200  # lines looked at to recognise the dialect (first JSON line decides, a few refine)
GROK_FLUSH_CHARS = 64 << 10  # accumulated deltas become one text event at most this long

_ROLE = {
    "user": _R_USER,
    "assistant": _R_ASSISTANT,
    "model": _R_ASSISTANT,
    "system": _R_SYSTEM,
    "developer": _R_SYSTEM,
    "tool": _R_TOOL,
}


# ---------------------------------------------------------------------------------------------
# Line reading


def _iter_lines(path: Path) -> Iterator[tuple[int, str | None]]:
    """(1-based line number, decoded line or None when the line was too long)."""
    with open(path, "rb") as f:
        no = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES)
            if not raw:
                return
            no += 1
            if len(raw) >= MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while True:  # drain the rest of the oversized line
                    more = f.readline(MAX_LINE_BYTES)
                    if not more or more.endswith(b"\n"):
                        break
                yield no, None
                continue
            yield no, raw.decode("utf-8", errors="replace").rstrip("\r\n")


# The C scanner json.loads ends up in, called directly: json.loads adds a BOM test, two
# whitespace regex matches and three Python frames per line (~1 us on a 400k-line transcript).
_SCAN_ONCE: Callable[[str, int], tuple[Any, int]] = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]


def _parse(s: str) -> Any:
    """json.loads of an already stripped, BOM-less line that must be an object or array."""
    if not s or s[0] not in "{[":
        raise ValueError("not JSON")
    try:
        obj, end = _SCAN_ONCE(s, 0)
    except StopIteration as exc:  # json.loads reports this as "Expecting value"
        raise ValueError("not JSON") from exc
    if end != len(s):  # `s` is stripped, so anything left is "Extra data" for json.loads too
        raise ValueError("extra data after JSON")
    return obj


def _loads(line: str) -> Any:
    return _parse(line.strip().lstrip("\ufeff"))


# ---------------------------------------------------------------------------------------------
# Sniffing


def _classify(obj: dict[str, Any]) -> Dialect:
    t = obj.get("type")
    if "payload" in obj and t in ("session_meta", "event_msg", "response_item", "turn_context", "compacted"):
        return Dialect.CODEX
    if isinstance(t, str) and (t.startswith(("thread.", "turn.", "item.")) or "item" in obj and t == "error"):
        return Dialect.CODEX
    if "sessionID" in obj and "part" in obj:
        return Dialect.OPENCODE
    if t == "tool_call" and ("tool_call" in obj or "call_id" in obj):
        return Dialect.CURSOR
    if t in ("system", "assistant", "user", "result") and (
        "message" in obj or "subtype" in obj or "session_id" in obj or "result" in obj
    ):
        return Dialect.CLAUDE
    if t in ("init", "message", "tool_use", "tool_result", "result") and (
        "role" in obj or "tool_name" in obj or "tool_id" in obj or "stats" in obj or "model" in obj
    ):
        if t == "message" and "text" in obj and "content" not in obj:
            return Dialect.DROID
        return Dialect.GEMINI
    if t in ("completion", "tool_call", "tool_result", "message") and (
        "toolName" in obj or "finalText" in obj or "toolId" in obj or "text" in obj
    ):
        return Dialect.DROID
    if "choices" in obj or (t in ("delta", "token", "content_delta") or "delta" in obj):
        return Dialect.GROK
    if "role" in obj and ("content" in obj or "tool_calls" in obj) and "type" not in obj:
        return Dialect.KIMI
    return Dialect.UNKNOWN


def sniff_dialect(path: Path) -> Dialect:
    """The dialect of the first JSON line (banner lines skipped); PLAIN when no line is JSON.

    A few following JSON lines refine claude-like streams: cursor-agent and droid print a
    claude-style `system/init` line, then their own message and `tool_call` records.
    """
    first: Dialect | None = None
    for no, line in _iter_lines(path):
        if no > SNIFF_LINES:
            break
        if line is None:
            continue
        try:
            obj = _loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        d = _classify(obj)
        if first is None:
            first = d
            if d not in (Dialect.CLAUDE, Dialect.UNKNOWN):
                return d
        elif first is Dialect.CLAUDE and d in (Dialect.CURSOR, Dialect.DROID):
            return d
        elif first is Dialect.UNKNOWN and d is not Dialect.UNKNOWN:
            return d
    return first if first is not None else Dialect.PLAIN


# ---------------------------------------------------------------------------------------------
# Flattening helpers


def _flatten(content: Any) -> str:
    """Tool-result / message content as text: str, list of blocks, or anything JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif block.get("type") == "image":
                    parts.append("[image]")
                elif "content" in block:
                    parts.append(_flatten(block["content"]))
                else:
                    parts.append(json.dumps(block, ensure_ascii=False))
        return "\n".join(parts)
    if isinstance(content, dict):
        for key in ("text", "output", "content", "message", "stdout"):
            if isinstance(content.get(key), str):
                return str(content[key])
        return json.dumps(content, ensure_ascii=False)
    return str(content)


def _maybe_json(s: Any) -> Any:
    if isinstance(s, str):
        t = s.strip()
        if t[:1] in "{[":
            try:
                return json.loads(t)
            except ValueError:
                return s
    return s


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


_EvD = dict[str, Any]  # an event's TranscriptEvent __dict__, before index/line/source/dialect are set


def _ev(
    role: Role,
    kind: EventKind,
    text: str = "",
    *,
    tool_name: str | None = None,
    tool_input: Any = None,
    call_id: str | None = None,
    is_error: bool = False,
    timestamp: str | None = None,
    usage: dict[str, Any] | None = None,
) -> _EvD:
    """An event as the __dict__ of its future TranscriptEvent (iter_events fills the first four keys).

    A plain dict in field order: iter_events turns it into the frozen dataclass without copying
    (no per-event intermediate object, no 13 attribute reads).
    """
    return {
        "index": 0, "line": 0, "source": "", "dialect": None, "role": role, "kind": kind, "text": text,
        "tool_name": tool_name, "tool_input": tool_input, "call_id": call_id, "is_error": is_error,
        "timestamp": timestamp, "usage": usage,
    }


class _State:
    """Per-file normalizer state: token totals and small dedupe windows (bounded memory)."""

    def __init__(self) -> None:
        self.output_tokens: int | None = None
        self.output_tokens_sum = 0
        self.recent: OrderedDict[str, set[str]] = OrderedDict()  # text digest -> origins (last 256)
        self.grok_buf: list[str] = []
        self.grok_reason: list[str] = []
        self.grok_line = 0
        self.grok_len = 0

    def seen_elsewhere(self, origin: str, text: str) -> bool:
        """True when the same text was already emitted from the other codex record family."""
        digest = hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()
        origins = self.recent.get(digest)
        if origins is None:
            origins = self.recent[digest] = set()
            if len(self.recent) > 256:
                self.recent.popitem(last=False)
        dup = any(o != origin for o in origins)
        origins.add(origin)
        return dup


# ---------------------------------------------------------------------------------------------
# claude (and cursor)


def _claude(obj: dict[str, Any], st: _State) -> list[_EvD]:
    t = obj.get("type")
    ts = obj.get("timestamp")
    if ts is not None and not isinstance(ts, str):
        ts = None
    out: list[_EvD] = []
    if t == "system":
        sub = obj.get("subtype", "")
        bits = [f"{k}={obj[k]}" for k in ("subtype", "model", "cwd", "session_id") if isinstance(obj.get(k), str)]
        text = " ".join(bits) if sub == "init" else _flatten(obj.get("content") or obj.get("message") or "") or " ".join(bits)
        is_err = "error" in str(sub).lower()
        out.append(_ev(_R_ERROR if is_err else _R_SYSTEM, _K_ERROR if is_err else _K_META, text,
                       timestamp=ts, is_error=is_err))
        return out
    if t == "assistant" or t == "user":
        msg = obj.get("message")
        if msg.__class__ is not dict:
            msg = _dict(msg)
        r = msg.get("role") or t
        role = _ROLE.get(r if r.__class__ is str else str(r), _R_ASSISTANT)
        content = msg.get("content")
        # Claude Code reports provider failures as a synthetic assistant message ("API Error: 402 ...",
        # model "<synthetic>", isApiErrorMessage in session logs): an ERROR event, not model text.
        api_error = t == "assistant" and (
            bool(obj.get("isApiErrorMessage"))
            or obj.get("error") is not None
            or msg.get("model") == "<synthetic>"
            or _starts_api_error(content)
        )
        u = msg.get("usage")
        usage = (u or None) if u.__class__ is dict else None
        if content.__class__ is not list:
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            if not isinstance(content, list):
                content = []
        for block in content:
            if block.__class__ is not dict and not isinstance(block, dict):
                continue
            bt = block.get("type")
            if bt == "tool_use" or bt == "server_tool_use":
                # _ev(...) written out: the hot block types of a claude transcript skip the call
                out.append({"index": 0, "line": 0, "source": "", "dialect": None, "role": role, "kind": _K_TOOL_CALL,
                            "text": "", "tool_name": block.get("name"), "tool_input": block.get("input"),
                            "call_id": block.get("id"), "is_error": False, "timestamp": ts, "usage": None})
            elif bt == "tool_result" or bt == "web_search_tool_result":
                c = block.get("content")
                out.append({"index": 0, "line": 0, "source": "", "dialect": None, "role": _R_TOOL,
                            "kind": _K_TOOL_RESULT, "text": c if c.__class__ is str else _flatten(c), "tool_name": None,
                            "tool_input": None, "call_id": block.get("tool_use_id"),
                            "is_error": bool(block.get("is_error")), "timestamp": ts, "usage": None})
            elif bt == "text":
                text = str(block.get("text", ""))
                if api_error:
                    out.append(_ev(_R_ERROR, _K_ERROR, text, is_error=True, timestamp=ts))
                else:
                    out.append({"index": 0, "line": 0, "source": "", "dialect": None, "role": role, "kind": _K_TEXT,
                                "text": text, "tool_name": None, "tool_input": None, "call_id": None,
                                "is_error": False, "timestamp": ts, "usage": None})
            elif bt == "thinking" or bt == "redacted_thinking":
                out.append({"index": 0, "line": 0, "source": "", "dialect": None, "role": role,
                            "kind": _K_REASONING, "text": str(block.get("thinking", "")), "tool_name": None,
                            "tool_input": None, "call_id": None, "is_error": False, "timestamp": ts, "usage": None})
            elif bt == "image":
                out.append(_ev(role, _K_META, "[image]", timestamp=ts))
        if api_error and not out:
            out.append(_ev(_R_ERROR, _K_ERROR, _flatten(obj.get("error")), is_error=True, timestamp=ts))
        if usage is not None and out:
            out[0]["usage"] = usage
        return out
    if t == "result":
        usage = dict(obj["usage"]) if isinstance(obj.get("usage"), dict) else {}
        for k in ("total_cost_usd", "num_turns", "duration_ms", "duration_api_ms"):
            if k in obj:
                usage[k] = obj[k]
        ot = _int(usage.get("output_tokens"))
        if ot is not None:
            st.output_tokens = ot
        text = _flatten(obj.get("result"))
        is_err = bool(obj.get("is_error")) or str(obj.get("subtype", "")).startswith("error")
        out.append(_ev(_R_SYSTEM, _K_USAGE, text, usage=usage, is_error=is_err, timestamp=ts))
        if is_err:
            err_text = text or str(obj.get("subtype", "error"))
            out.append(_ev(_R_ERROR, _K_ERROR, err_text, is_error=True, timestamp=ts))
        return out
    if t == "tool_call":  # cursor-agent
        return _cursor_tool(obj, ts)
    if t == "stream_event":  # partial-message deltas; the complete message follows as its own line
        return []
    if t == "error" or "error" in obj:
        return [_ev(_R_ERROR, _K_ERROR, _flatten(obj.get("error") or obj.get("message")), is_error=True,
                    timestamp=ts)]
    return [_ev(_R_SYSTEM, _K_META, str(t or ""), timestamp=ts)]


def _starts_api_error(content: Any) -> bool:
    if isinstance(content, str):
        return content.lstrip().startswith("API Error")
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        text = content[0].get("text")
        # "API Error" cannot start the stripped text unless "API Error" occurs in it: skip the
        # lstrip copy of every assistant text block.
        return isinstance(text, str) and "API Error" in text and text.lstrip().startswith("API Error")
    return False


def _cursor_tool(obj: dict[str, Any], ts: str | None) -> list[_EvD]:
    call = _dict(obj.get("tool_call"))
    name, body = next(iter(call.items()), ("tool", {}))
    body = body if isinstance(body, dict) else {}
    tool = str(name).removesuffix("ToolCall") or "tool"
    cid = obj.get("call_id")
    if obj.get("subtype") == "completed":
        res = body.get("result")
        is_err = isinstance(res, dict) and ("error" in res or "failure" in res)
        if isinstance(res, dict):
            inner = res.get("success") or res.get("error") or res.get("failure") or res
            text = _flatten(inner)
        else:
            text = _flatten(res)
        return [_ev(_R_TOOL, _K_TOOL_RESULT, text, tool_name=tool, call_id=cid, is_error=is_err, timestamp=ts)]
    return [_ev(_R_ASSISTANT, _K_TOOL_CALL, "", tool_name=tool, tool_input=body.get("args"), call_id=cid,
                timestamp=ts)]


# ---------------------------------------------------------------------------------------------
# codex


def _codex(obj: dict[str, Any], st: _State) -> list[_EvD]:
    t = obj.get("type")
    ts = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
    if "payload" not in obj:
        return _codex_exec(obj, st, ts)
    p = _dict(obj.get("payload"))
    pt = p.get("type")
    if t == "session_meta":
        bits = [f"{k}={p[k]}" for k in ("id", "cwd", "model", "cli_version", "originator") if isinstance(p.get(k), str)]
        return [_ev(_R_SYSTEM, _K_META, " ".join(bits), timestamp=ts)]
    if t == "turn_context":
        bits = [f"{k}={p[k]}" for k in ("cwd", "model", "approval_policy") if isinstance(p.get(k), str)]
        return [_ev(_R_SYSTEM, _K_META, " ".join(bits), timestamp=ts)]
    if t == "event_msg":
        if pt == "token_count":
            info = _dict(p.get("info"))
            total = (_dict(info.get("total_token_usage")) or None)
            usage: dict[str, Any] = dict(total) if total else {}
            if isinstance(p.get("rate_limits"), dict):
                usage["rate_limits"] = p["rate_limits"]
            if total and _int(total.get("output_tokens")) is not None:
                st.output_tokens = int(total["output_tokens"])
            return [_ev(_R_SYSTEM, _K_USAGE, "", usage=usage or None, timestamp=ts)]
        if pt == "task_complete":
            return [_ev(_R_SYSTEM, _K_META, _flatten(p.get("last_agent_message")), timestamp=ts)]
        if pt in ("agent_message", "agent_reasoning", "user_message", "agent_reasoning_raw_content"):
            text = _flatten(p.get("message") if "message" in p else p.get("text"))
            if st.seen_elsewhere("event_msg", text):
                return []
            if pt == "user_message":
                return [_ev(_R_USER, _K_TEXT, text, timestamp=ts)]
            kind = _K_TEXT if pt == "agent_message" else _K_REASONING
            return [_ev(_R_ASSISTANT, kind, text, timestamp=ts)]
        if pt in ("error", "stream_error", "turn_aborted"):
            return [_ev(_R_ERROR, _K_ERROR, _flatten(p.get("message") or p.get("reason") or pt),
                        is_error=True, timestamp=ts)]
        return [_ev(_R_SYSTEM, _K_META, str(pt or ""), timestamp=ts)]
    if t == "response_item":
        if pt == "message":
            role = _ROLE.get(str(p.get("role")), _R_ASSISTANT)
            out = []
            for block in p.get("content") or []:
                if isinstance(block, dict) and isinstance(block.get("text"), str):
                    if role is not _R_SYSTEM and st.seen_elsewhere("response_item", block["text"]):
                        continue
                    out.append(_ev(role, _K_TEXT, block["text"], timestamp=ts))
            return out
        if pt == "reasoning":
            out = []
            for key in ("summary", "content"):
                for block in p.get(key) or []:
                    if isinstance(block, dict) and isinstance(block.get("text"), str):
                        if st.seen_elsewhere("response_item", block["text"]):
                            continue
                        out.append(_ev(_R_ASSISTANT, _K_REASONING, block["text"], timestamp=ts))
            return out
        if pt == "function_call":
            return [_ev(_R_ASSISTANT, _K_TOOL_CALL, "", tool_name=p.get("name"),
                        tool_input=_maybe_json(p.get("arguments")), call_id=p.get("call_id"), timestamp=ts)]
        if pt == "custom_tool_call":
            return [_ev(_R_ASSISTANT, _K_TOOL_CALL, "", tool_name=p.get("name"), tool_input=p.get("input"),
                        call_id=p.get("call_id"), timestamp=ts)]
        if pt == "local_shell_call":
            action = _dict(p.get("action"))
            return [_ev(_R_ASSISTANT, _K_TOOL_CALL, "", tool_name="local_shell", tool_input=action,
                        call_id=p.get("call_id") or p.get("id"), timestamp=ts)]
        if pt == "web_search_call":
            return [_ev(_R_ASSISTANT, _K_TOOL_CALL, "", tool_name="web_search", tool_input=p.get("action"),
                        call_id=p.get("id"), timestamp=ts)]
        if pt in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            raw = p.get("output")
            parsed = _maybe_json(raw)
            is_err = False
            text = _flatten(raw)
            if isinstance(parsed, dict):
                meta = _dict(parsed.get("metadata"))
                code = meta.get("exit_code")
                is_err = isinstance(code, int) and code != 0
                if isinstance(parsed.get("output"), str):
                    text = parsed["output"]
            elif isinstance(raw, dict):
                is_err = raw.get("success") is False
                text = _flatten(raw.get("content") if "content" in raw else raw)
            return [_ev(_R_TOOL, _K_TOOL_RESULT, text, call_id=p.get("call_id"), is_error=is_err,
                        timestamp=ts)]
        return [_ev(_R_SYSTEM, _K_META, str(pt or ""), timestamp=ts)]
    return [_ev(_R_SYSTEM, _K_META, str(t or ""), timestamp=ts)]


def _codex_exec(obj: dict[str, Any], st: _State, ts: str | None) -> list[_EvD]:
    """`codex exec --json`: thread.started, turn.completed (usage), item.started/completed."""
    t = str(obj.get("type", ""))
    if t == "turn.completed":
        usage = (_dict(obj.get("usage")) or None)
        if usage and _int(usage.get("output_tokens")) is not None:
            st.output_tokens_sum += int(usage["output_tokens"])
            st.output_tokens = st.output_tokens_sum
        return [_ev(_R_SYSTEM, _K_USAGE, "", usage=usage, timestamp=ts)]
    if t in ("turn.failed", "error"):
        err = obj.get("error") if "error" in obj else obj.get("message")
        return [_ev(_R_ERROR, _K_ERROR, _flatten(err), is_error=True, timestamp=ts)]
    if not t.startswith("item."):
        return [_ev(_R_SYSTEM, _K_META, t, timestamp=ts)]
    item = _dict(obj.get("item"))
    it = item.get("type") or item.get("item_type")
    iid = item.get("id")
    done = t == "item.completed"
    if it in ("agent_message", "assistant_message"):
        return [_ev(_R_ASSISTANT, _K_TEXT, _flatten(item.get("text")), timestamp=ts)] if done else []
    if it == "reasoning":
        return [_ev(_R_ASSISTANT, _K_REASONING, _flatten(item.get("text")), timestamp=ts)] if done else []
    if it == "command_execution":
        if t == "item.started":
            return [_ev(_R_ASSISTANT, _K_TOOL_CALL, "", tool_name="command_execution",
                        tool_input={"command": item.get("command")}, call_id=iid, timestamp=ts)]
        if done:
            code = item.get("exit_code")
            return [_ev(_R_TOOL, _K_TOOL_RESULT, _flatten(item.get("aggregated_output")), call_id=iid,
                        is_error=(isinstance(code, int) and code != 0) or item.get("status") == "failed",
                        timestamp=ts)]
        return []
    if it == "file_change" and done:
        return [_ev(_R_ASSISTANT, _K_TOOL_CALL, "", tool_name="file_change",
                    tool_input={"changes": item.get("changes")}, call_id=iid, timestamp=ts)]
    if it == "mcp_tool_call" and t == "item.started":
        return [_ev(_R_ASSISTANT, _K_TOOL_CALL, "", tool_name=f"{item.get('server')}.{item.get('tool')}",
                    tool_input=item.get("arguments"), call_id=iid, timestamp=ts)]
    if it == "error":
        return [_ev(_R_ERROR, _K_ERROR, _flatten(item.get("message")), is_error=True, timestamp=ts)]
    return []


# ---------------------------------------------------------------------------------------------
# opencode


def _opencode(obj: dict[str, Any], st: _State) -> list[_EvD]:
    t = obj.get("type")
    ts_raw = obj.get("timestamp")
    ts = str(ts_raw) if ts_raw is not None else None
    part = _dict(obj.get("part"))
    if t == "step_start":
        return [_ev(_R_SYSTEM, _K_META, "step_start", timestamp=ts)]
    if t == "step_finish":
        tokens = _dict(part.get("tokens"))
        usage: dict[str, Any] = dict(tokens)
        if "cost" in part:
            usage["cost"] = part["cost"]
        out_t = _int(tokens.get("output"))
        if out_t is not None:
            st.output_tokens_sum += out_t + (_int(tokens.get("reasoning")) or 0)
            st.output_tokens = st.output_tokens_sum
        return [_ev(_R_SYSTEM, _K_USAGE, str(part.get("reason", "")), usage=usage or None, timestamp=ts)]
    if t == "tool_use":
        state = _dict(part.get("state"))
        tool = part.get("tool")
        cid = part.get("callID") or part.get("id")
        out = [_ev(_R_ASSISTANT, _K_TOOL_CALL, str(state.get("title") or ""), tool_name=tool,
                   tool_input=state.get("input"), call_id=cid, timestamp=ts)]
        status = state.get("status")
        if "output" in state or "error" in state or status in ("completed", "error"):
            is_err = status == "error" or "error" in state
            text = _flatten(state.get("output") if "output" in state else state.get("error"))
            out.append(_ev(_R_TOOL, _K_TOOL_RESULT, text, tool_name=tool, call_id=cid, is_error=is_err,
                           timestamp=ts))
        return out
    if t == "text":
        return [_ev(_R_ASSISTANT, _K_TEXT, _flatten(part.get("text")), timestamp=ts)]
    if t == "reasoning":
        return [_ev(_R_ASSISTANT, _K_REASONING, _flatten(part.get("text")), timestamp=ts)]
    if t == "error":
        err = obj.get("error") if "error" in obj else part.get("error", part)
        if isinstance(err, dict):
            data = _dict(err.get("data"))
            msg = data.get("message") or err.get("message") or err.get("name") or json.dumps(err)
            text = f"{err.get('name', 'Error')}: {msg}" if err.get("name") else str(msg)
        else:
            text = _flatten(err)
        return [_ev(_R_ERROR, _K_ERROR, text, is_error=True, timestamp=ts)]
    return [_ev(_R_SYSTEM, _K_META, str(t or ""), timestamp=ts)]


# ---------------------------------------------------------------------------------------------
# gemini, droid, kimi, grok, unknown (best effort)


def _gemini(obj: dict[str, Any], st: _State) -> list[_EvD]:
    t = obj.get("type")
    ts = obj.get("timestamp") if isinstance(obj.get("timestamp"), str) else None
    if t == "message":
        role = _ROLE.get(str(obj.get("role")), _R_ASSISTANT)
        return [_ev(role, _K_TEXT, _flatten(obj.get("content")), timestamp=ts)]
    if t == "tool_use":
        return [_ev(_R_ASSISTANT, _K_TOOL_CALL, "", tool_name=obj.get("tool_name"),
                    tool_input=obj.get("parameters"), call_id=obj.get("tool_id"), timestamp=ts)]
    if t == "tool_result":
        return [_ev(_R_TOOL, _K_TOOL_RESULT, _flatten(obj.get("output") or obj.get("error")),
                    call_id=obj.get("tool_id"), is_error=obj.get("status") == "error", timestamp=ts)]
    if t == "error":
        return [_ev(_R_ERROR, _K_ERROR, _flatten(obj.get("message") or obj.get("error")), is_error=True,
                    timestamp=ts)]
    if t == "result":
        stats = _dict(obj.get("stats"))
        if _int(stats.get("output_tokens")) is not None:
            st.output_tokens = int(stats["output_tokens"])
        is_err = obj.get("status") not in (None, "success")
        out = [_ev(_R_SYSTEM, _K_USAGE, str(obj.get("status", "")), usage=stats or None, is_error=is_err,
                   timestamp=ts)]
        if is_err:
            out.append(_ev(_R_ERROR, _K_ERROR, _flatten(obj.get("error") or obj.get("status")),
                           is_error=True, timestamp=ts))
        return out
    return [_ev(_R_SYSTEM, _K_META, str(t or ""), timestamp=ts)]


def _droid(obj: dict[str, Any], st: _State) -> list[_EvD]:
    t = obj.get("type")
    ts_raw = obj.get("timestamp")
    ts = str(ts_raw) if ts_raw is not None else None
    if t == "system":
        return [_ev(_R_SYSTEM, _K_META, str(obj.get("subtype", "")), timestamp=ts)]
    if t == "message":
        role = _ROLE.get(str(obj.get("role")), _R_ASSISTANT)
        return [_ev(role, _K_TEXT, _flatten(obj.get("text") or obj.get("content")), timestamp=ts)]
    if t in ("reasoning", "thinking"):
        return [_ev(_R_ASSISTANT, _K_REASONING, _flatten(obj.get("text")), timestamp=ts)]
    if t == "tool_call":
        return [_ev(_R_ASSISTANT, _K_TOOL_CALL, "", tool_name=obj.get("toolName") or obj.get("toolId"),
                    tool_input=obj.get("parameters"), call_id=obj.get("id"), timestamp=ts)]
    if t == "tool_result":
        return [_ev(_R_TOOL, _K_TOOL_RESULT, _flatten(obj.get("value")), call_id=obj.get("id"),
                    is_error=bool(obj.get("isError")), timestamp=ts)]
    if t == "completion":
        usage = (_dict(obj.get("usage")) or None)
        if usage and _int(usage.get("output_tokens")) is not None:
            st.output_tokens = int(usage["output_tokens"])
        return [_ev(_R_SYSTEM, _K_USAGE, _flatten(obj.get("finalText")), usage=usage, timestamp=ts)]
    if t == "error":
        return [_ev(_R_ERROR, _K_ERROR, _flatten(obj.get("message") or obj.get("error")), is_error=True,
                    timestamp=ts)]
    return [_ev(_R_SYSTEM, _K_META, str(t or ""), timestamp=ts)]


def _kimi(obj: dict[str, Any], st: _State) -> list[_EvD]:
    role = _ROLE.get(str(obj.get("role")), _R_ASSISTANT)
    out: list[_EvD] = []
    content = obj.get("content")
    if role is _R_TOOL:
        return [_ev(_R_TOOL, _K_TOOL_RESULT, _flatten(content), call_id=obj.get("tool_call_id"))]
    if isinstance(content, str):
        if content:
            out.append(_ev(role, _K_TEXT, content))
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") in ("think", "thinking"):
                out.append(_ev(role, _K_REASONING, str(block.get("think") or block.get("thinking") or "")))
            elif isinstance(block.get("text"), str):
                out.append(_ev(role, _K_TEXT, block["text"]))
    for call in obj.get("tool_calls") or []:
        if isinstance(call, dict):
            fn = _dict(call.get("function"))
            out.append(_ev(role, _K_TOOL_CALL, "", tool_name=fn.get("name"),
                           tool_input=_maybe_json(fn.get("arguments")), call_id=call.get("id")))
    return out


def _grok(obj: dict[str, Any], st: _State, line: int) -> list[_EvD]:
    """Token deltas: accumulate; flushed as one text (and one reasoning) event."""
    pieces: list[tuple[str, str]] = []
    if isinstance(obj.get("choices"), list):
        for ch in obj["choices"]:
            d = _dict(ch.get("delta")) if isinstance(ch, dict) else {}
            if isinstance(d.get("content"), str):
                pieces.append(("text", d["content"]))
            if isinstance(d.get("reasoning_content"), str):
                pieces.append(("reasoning", d["reasoning_content"]))
    else:
        delta = obj.get("delta")
        if isinstance(delta, str):
            kind = "reasoning" if "reason" in str(obj.get("type", "")) else "text"
            pieces.append((kind, delta))
        elif isinstance(delta, dict):
            for k, v in delta.items():
                if isinstance(v, str):
                    pieces.append(("reasoning" if "reason" in k else "text", v))
        for k in ("content", "token", "text"):
            if isinstance(obj.get(k), str):
                pieces.append(("text", obj[k]))
    if not st.grok_buf and not st.grok_reason:
        st.grok_line = line
    for kind, text in pieces:
        (st.grok_reason if kind == "reasoning" else st.grok_buf).append(text)
        st.grok_len += len(text)
    if isinstance(obj.get("usage"), dict) and _int(obj["usage"].get("completion_tokens")) is not None:
        st.output_tokens = int(obj["usage"]["completion_tokens"])
    return []


def _grok_flush(st: _State) -> list[_EvD]:
    out = []
    if st.grok_reason:
        out.append(_ev(_R_ASSISTANT, _K_REASONING, "".join(st.grok_reason)))
    if st.grok_buf:
        out.append(_ev(_R_ASSISTANT, _K_TEXT, "".join(st.grok_buf)))
    st.grok_buf, st.grok_reason, st.grok_len = [], [], 0
    return out


def _unknown(obj: dict[str, Any], st: _State) -> list[_EvD]:
    for key in ("text", "content", "message", "output"):
        if key in obj:
            return [_ev(_R_ASSISTANT, _K_TEXT, _flatten(obj[key]))]
    return [_ev(_R_SYSTEM, _K_META, str(obj.get("type", "")))]


_NORMALIZERS = {
    Dialect.CLAUDE: _claude,
    Dialect.CURSOR: _claude,
    Dialect.CODEX: _codex,
    Dialect.OPENCODE: _opencode,
    Dialect.GEMINI: _gemini,
    Dialect.DROID: _droid,
    Dialect.KIMI: _kimi,
    Dialect.UNKNOWN: _unknown,
}


# ---------------------------------------------------------------------------------------------
# Entry points


def _raw_events(path: Path, dialect: Dialect, st: _State, stats: TranscriptStats) -> Iterator[tuple[int, list[_EvD]]]:
    """(line number, events of that line) for every line that yields events (plain text and grok)."""
    normalize = _NORMALIZERS.get(dialect)
    plain = dialect is Dialect.PLAIN
    grok = dialect is Dialect.GROK
    for no, line in _iter_lines(path):
        stats.lines += 1
        if line is None:
            stats.unparsable_lines += 1
            continue
        if plain:
            if line.strip():
                yield no, [_ev(_R_ASSISTANT, _K_TEXT, line)]
            continue
        if not line.strip():
            continue
        try:
            obj = _loads(line)
        except ValueError:
            stats.unparsable_lines += 1
            continue
        if not isinstance(obj, dict):
            stats.unparsable_lines += 1
            continue
        stats.json_lines += 1
        if grok:
            _grok(obj, st, no)
            if st.grok_len >= GROK_FLUSH_CHARS:
                yield st.grok_line, _grok_flush(st)
            continue
        assert normalize is not None
        try:
            evs = normalize(obj, st)
        except (AttributeError, TypeError, KeyError, ValueError):
            stats.unparsable_lines += 1
            continue
        if evs:
            yield no, evs
    if grok:
        yield st.grok_line or 1, _grok_flush(st)


def iter_events(path: Path, source: str, stats: TranscriptStats | None = None) -> Iterator[TranscriptEvent]:
    """Stream normalized events from one transcript file; `stats` (if given) is filled as we go."""
    path = Path(path)
    dialect = sniff_dialect(path)
    if stats is None:
        stats = TranscriptStats(source=source, dialect=dialect)
    stats.dialect = dialect
    st = _State()
    index = 0
    new = object.__new__
    set_attr = object.__setattr__
    cls = TranscriptEvent
    tool_call = _K_TOOL_CALL
    normalize = _NORMALIZERS.get(dialect)
    if normalize is None:  # plain text, grok deltas
        for no, evs in _raw_events(path, dialect, st, stats):
            for d in evs:
                d["index"] = index
                d["line"] = no
                d["source"] = source
                d["dialect"] = dialect
                ev = new(cls)
                set_attr(ev, "__dict__", d)
                index += 1
                stats.events += 1
                if d["kind"] is tool_call:
                    stats.tool_calls += 1
                yield ev
            stats.output_tokens = st.output_tokens
        stats.output_tokens = st.output_tokens
        return
    # The line-per-record JSON dialects: `_raw_events` inlined (same decode, same strip, same
    # counters, line for line) -- the hot loop of an 80 MB transcript, without a generator hop
    # and a double strip per line.
    parse = _parse
    caught = (AttributeError, TypeError, KeyError, ValueError)
    with open(path, "rb") as f:
        readline = f.readline
        no = 0
        while True:
            raw = readline(MAX_LINE_BYTES)
            if not raw:
                break
            no += 1
            stats.lines += 1
            if len(raw) >= MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while True:  # drain the rest of the oversized line
                    more = readline(MAX_LINE_BYTES)
                    if not more or more.endswith(b"\n"):
                        break
                stats.unparsable_lines += 1
                continue
            # _iter_lines' rstrip("\r\n") followed by _loads' strip() is one strip().
            s = raw.decode("utf-8", errors="replace").strip()
            if not s:
                continue
            if s[0] == "\ufeff":
                s = s.lstrip("\ufeff")
            try:
                obj = parse(s)
            except ValueError:
                stats.unparsable_lines += 1
                continue
            if obj.__class__ is not dict:
                stats.unparsable_lines += 1
                continue
            stats.json_lines += 1
            try:
                evs = normalize(obj, st)
            except caught:
                stats.unparsable_lines += 1
                continue
            if not evs:
                continue
            for d in evs:
                # Built without the frozen-dataclass __init__ (13 object.__setattr__ calls: ~5 us per
                # event, two seconds on a 400k-event transcript): the normalizer's dict, in field
                # order, becomes the instance __dict__. Same fields, same equality.
                d["index"] = index
                d["line"] = no
                d["source"] = source
                d["dialect"] = dialect
                ev = new(cls)
                set_attr(ev, "__dict__", d)
                index += 1
                stats.events += 1
                if d["kind"] is tool_call:
                    stats.tool_calls += 1
                yield ev
            stats.output_tokens = st.output_tokens
    stats.output_tokens = st.output_tokens


def transcript_stats(path: Path, source: str) -> TranscriptStats:
    """Stream a transcript once and return its stats (events are discarded)."""
    stats = TranscriptStats(source=source, dialect=Dialect.UNKNOWN)
    for _ in iter_events(path, source, stats):
        pass
    return stats


def read_events(path: Path, source: str) -> tuple[list[TranscriptEvent], TranscriptStats]:
    """Convenience for small transcripts and tests: every event in memory."""
    stats = TranscriptStats(source=source, dialect=Dialect.UNKNOWN)
    return list(iter_events(path, source, stats)), stats
