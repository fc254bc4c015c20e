"""Shared helpers of the transcript rules: tool-input parsing, paths, run ids, patches.

The transcript rules (KA2xx) read the normalized event stream of `ingest.transcripts`. Most of
what they need is the same question asked of one tool call: which command ran, which files it
read, which files it wrote (and with what text), which run ids it names. This module answers
it once per event (`analyze_call`, cached for the event the engine is feeding right now), so
nine checkers do not parse the same 80 MB transcript nine times. Everything here is pure:
strings in, small records out; no rule logic.

Per-event work is kept cheap: precompiled regexes, and a prefilter (`RELEVANT_SUBSTRINGS`) that skips
the shell tokenizer for the vast majority of commands (`nvidia-smi`, `ls`, `python bench.py`),
which name no deck file, no run folder and no grading switch.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from graders.runformat import SCRATCH_DIR, SOURCE_SUFFIXES
from ingest.model import EventKind, TranscriptEvent, UnpackedArchive

# ---------------------------------------------------------------------------------------------
# Deck and harness files

DECK_BASENAMES: frozenset[str] = frozenset(
    {
        "check.py",
        "benchmark.py",
        "reference.py",
        "problem.yaml",
        "shapes.py",
        "sota.py",
        "PROMPT.txt",
        "baseline.py",
    }
)
HARNESS_DIRS: tuple[str, ...] = ("src/eval/", "src/harness/")
# Grader sources whose reading is "contract discovery" (KA209).
GRADER_BASENAMES: frozenset[str] = frozenset({"check.py", "benchmark.py"})

# Places where a file named like a deck file is the agent's own copy, not the deck.
_SCRATCH_PREFIXES = ("/tmp/", "/dev/shm/", "/var/tmp/")
_SCRATCH_PARTS = ("/scratch/", "/site-packages/", "/.venv/", "/fla-src/", "/node_modules/", "/__pycache__/")

# A tool input containing none of these skips the careful shell parse: most commands
# (`nvidia-smi`, `ls`, `python bench.py`, anything in the run's own folder) name no deck file
# and no grading switch. Substring tests are C-speed; one alternation regex is ~10x slower.
# Run ids are judged separately (cheap regex gate) and the parse then runs on demand.
RELEVANT_SUBSTRINGS: tuple[str, ...] = (
    "check.py", "benchmark.py", "reference.py", "problem.yaml", "shapes.py", "sota.py", "PROMPT.txt",
    "baseline.py", "src/eval", "src/harness", "template_files", "trusted_src", "STRESS",
    "stress", "atol", "rtol", "toleran", "git checkout", "git restore", "git stash", "git reset",
)


# `python check.py` / `python benchmark.py` RUN the grader: the commonest tool input of all, and
# neither a read nor a write of it. Such mentions do not make a command relevant by themselves.
_RUNS_GRADER_RE = re.compile(r"python3?(?:\.\d+)?\s+(?:-[A-Za-z]+\s+)*(?:\./)?(?:check|benchmark)\.py\b")


def _has_any(text: str, needles: tuple[str, ...]) -> bool:
    for s in needles:  # a plain loop beats any(genexpr) and an alternation regex here
        if s in text:
            return True
    return False


def _grouped(needles: tuple[str, ...], roots: tuple[str, ...]) -> tuple[tuple[tuple[str, tuple[str, ...]], ...], tuple[str, ...]]:
    """Needles grouped under a root each of them contains; (groups, needles under no root)."""
    groups: list[tuple[str, tuple[str, ...]]] = []
    taken: set[str] = set()
    for root in roots:
        members = tuple(n for n in needles if root in n and n not in taken)
        taken.update(members)
        if members:
            groups.append((root, members))
    return tuple(groups), tuple(n for n in needles if n not in taken)


# `_has_any(text, RELEVANT_SUBSTRINGS)` with the needles grouped under a shared root (".py" for
# six deck files, "git " for four subcommands, ...): a text without the root skips the whole
# group. Same answer by construction (a needle in the text implies its root in the text).
_RELEVANT_GROUPS, _RELEVANT_SINGLES = _grouped(RELEVANT_SUBSTRINGS, (".py", "git ", "src", "tol"))


def _relevant_any(text: str) -> bool:
    for root, needles in _RELEVANT_GROUPS:
        if root in text:
            for s in needles:
                if s in text:
                    return True
    for s in _RELEVANT_SINGLES:
        if s in text:
            return True
    return False


def is_relevant(text: str) -> bool:
    if not _relevant_any(text):
        return False
    if "python" in text and ("check.py" in text or "benchmark.py" in text):
        return _relevant_any(_RUNS_GRADER_RE.sub(" ", text))
    return True


# ---------------------------------------------------------------------------------------------
# Run ids

# `YYYYMMDD_HHMMSS_<harness>_<model-slug>_<problem>[_<pid>_<n>]`: a path component of its own.
RUN_ID_RE = re.compile(r"(?<![0-9A-Za-z_])(\d{8}_\d{6}_[A-Za-z][A-Za-z0-9.\-]*_[A-Za-z0-9._\-]*[A-Za-z0-9])")
# A leading literal makes this a fast scan (~30x the speed of `\d{8}_\d{6}_`) for the common no-id case.
_RUN_ID_QUICK = re.compile(r"_\d{6}_")
_ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip", ".jsonl", ".json", ".log")
RUNS_DIR_RE = re.compile(r"outputs/runs(?:/([^\s'\"`;|&<>()]*))?")


def _strip_suffix(token: str) -> str:
    for suf in _ARCHIVE_SUFFIXES:
        if token.endswith(suf):
            return token[: -len(suf)]
    return token


def run_ids_in(text: str) -> list[str]:
    """Every run-id-shaped token in `text`, in order, duplicates kept (cheap when there is none)."""
    if not _RUN_ID_QUICK.search(text):
        return []
    return [_strip_suffix(m.group(1)) for m in RUN_ID_RE.finditer(text)]


@dataclass(frozen=True)
class RunIdentity:
    """The ids of the audited run itself (result.json run_id, the archive's top folder)."""

    own: frozenset[str]
    known_others: frozenset[str] = frozenset()

    def is_own(self, token: str) -> bool:
        for own in self.own:
            # The folder may carry a collision suffix (`_<pid>_<n>`) the result.json id lacks.
            if token == own or token.startswith(own + "_") or own.startswith(token + "_"):
                return True
        return False

    def foreign(self, text: str) -> list[str]:
        """Run ids in `text` that are not this run's, first occurrence order, unique."""
        if _RUN_ID_QUICK.search(text) is None:
            return []
        rest = text
        for own in self.own:  # the run's own folder is in most paths: drop it, then re-test cheaply
            if own in rest:
                rest = rest.replace(own, " ")
        if rest is not text and _RUN_ID_QUICK.search(rest) is None:
            return []
        out: list[str] = []
        for tok in run_ids_in(text):
            if tok not in out and not self.is_own(tok):
                out.append(tok)
        return out


_foreign_key: tuple[TranscriptEvent, frozenset[str]] | None = None
_foreign_val: list[str] = []


def foreign_in_event_text(ident: RunIdentity, event: TranscriptEvent) -> list[str]:
    """`ident.foreign(event.text)`, computed once per event whatever the number of checkers asking."""
    global _foreign_key, _foreign_val
    key = _foreign_key
    if key is None or key[0] is not event or (key[1] is not ident.own and key[1] != ident.own):
        key = (event, ident.own)
        _foreign_key, _foreign_val = key, ident.foreign(event.text) if event.text else []
    return _foreign_val


def run_identity(run: Any, archive: Any = None, other_run_ids: Iterable[str] = ()) -> RunIdentity:
    own: set[str] = set()
    for cand in (getattr(run, "run_id", None), (getattr(run, "result", None) or {}).get("run_id")):
        if isinstance(cand, str) and cand.strip():
            own.add(cand.strip())
    prefix = getattr(archive, "root_prefix", "") if archive is not None else ""
    if isinstance(prefix, str) and prefix.strip("/") and RUN_ID_RE.fullmatch(prefix.strip("/")):
        own.add(prefix.strip("/"))
    return RunIdentity(own=frozenset(own), known_others=frozenset(other_run_ids) - own)


def artifact_kind(path_after_run_id: str) -> str:
    """What part of a run a path inside `outputs/runs/<id>/` reaches."""
    p = path_after_run_id.lower()
    if any(s in p for s in ("torch_extensions", "/cache/", "cache/", ".so", "/build/", "triton_cache", "cbin/")):
        return "build_cache"
    if any(s in p for s in ("/.venv/", ".venv/", "/bin/", "bin/ninja", "nvcc", "ninja")):
        return "tooling"
    if "transcript" in p or "codex_session" in p or "stderr.log" in p:
        return "transcript"
    if "result" in p and p.endswith(".json"):
        return "result"
    if p.endswith(".log") or "/logs" in p:
        return "logs"
    if p.endswith(SOURCE_SUFFIXES) or f"{SCRATCH_DIR}/" in p:
        return "solution"
    if not p.strip("/"):
        return "listing"
    return "other"


# ---------------------------------------------------------------------------------------------
# Paths


def norm_path(path: str) -> str:
    p = path.strip().strip("'\"")
    if p.startswith("a/") or p.startswith("b/"):
        p = p[2:]
    return posixpath.normpath(p) if p else p


@lru_cache(maxsize=8192)
def deck_key(path: str) -> str | None:
    """The deck/harness file a path names (`check.py`, `src/eval/timing.py`), or None.

    A file with a deck file's name under /tmp, scratch/, a venv or another checkout is the
    agent's own copy and does not count. A path inside ANOTHER run's folder is KA201's
    business: callers drop those with `RunIdentity.foreign(path)`.
    """
    if not path:
        return None
    p = norm_path(path)
    probe = "/" + p.lstrip("./") if not p.startswith("/") else p
    for h in HARNESS_DIRS:
        i = probe.find("/" + h)
        if i >= 0:
            rest = probe[i + 1 + len(h) :].strip("/")
            if not rest or any(s in probe for s in _SCRATCH_PARTS) or probe.startswith(_SCRATCH_PREFIXES):
                return None
            return h + rest
    base = posixpath.basename(p)
    if base not in DECK_BASENAMES:
        return None
    if p.startswith(_SCRATCH_PREFIXES) or any(s in probe for s in _SCRATCH_PARTS):
        return None
    return base


# ---------------------------------------------------------------------------------------------
# Shell command parsing

_SHELL_TOOLS = frozenset(
    {
        "bash",
        "shell",
        "exec_command",
        "local_shell",
        "run_shell_command",
        "shell_command",
        "terminal",
        "execute",
        "run_terminal_cmd",
        "container.exec",
    }
)
_HEREDOC_RE = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_WRAPPERS = frozenset({"sudo", "env", "time", "nohup", "timeout", "command", "exec", "nice", "stdbuf", "xargs"})
_PY_OPEN_WRITE_RE = re.compile(r"""open\(\s*['"]([^'"]+)['"]\s*,\s*['"][wax]b?\+?['"]""")
_PY_WRITE_TEXT_RE = re.compile(r"""Path\(\s*['"]([^'"]+)['"]\s*\)\.write_(?:text|bytes)\(""")


@dataclass
class SimpleCommand:
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)  # VAR=value prefixes and `export VAR=value`
    out_files: list[str] = field(default_factory=list)  # > >> &> targets
    in_files: list[str] = field(default_factory=list)  # < sources

    @property
    def prog(self) -> str:
        return posixpath.basename(self.argv[0]) if self.argv else ""


def strip_heredocs(cmd: str) -> tuple[str, list[str]]:
    """Remove heredoc bodies (their text is data, not shell); return (command, bodies)."""
    if "<<" not in cmd:
        return cmd, []
    lines = cmd.split("\n")
    out: list[str] = []
    bodies: list[str] = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        out.append(ln)
        delims = [m.group(2) for m in _HEREDOC_RE.finditer(ln)]
        i += 1
        for d in delims:
            body: list[str] = []
            while i < len(lines) and lines[i].strip() != d:
                body.append(lines[i])
                i += 1
            i += 1  # the delimiter line
            bodies.append("\n".join(body))
    return "\n".join(out), bodies


_TOKEN_RE = re.compile(
    r"(?P<op>&&|\|\||;;|\|&|[;&|()]|&>>|&>|\d?>>|\d?>\||\d?>&|\d?>|<<<|<<|<&|<)"
    r"|(?P<word>(?:[^\s;&|()<>'\"\\]+|'[^']*'|\"(?:[^\"\\]+|\\.)*\"|\\.)+)"
    r"|(?P<stray>['\"\\])"
)
_UNQUOTE_RE = re.compile(r"'([^']*)'|\"((?:\\.|[^\"\\])*)\"|\\(.)")
_DQ_ESC_RE = re.compile(r"\\([\\\"$`])")


def _unquote(word: str) -> str:
    if "'" not in word and '"' not in word and "\\" not in word:
        return word

    def sub(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return m.group(1)
        if m.group(2) is not None:
            return _DQ_ESC_RE.sub(r"\1", m.group(2))
        return m.group(3)

    return _UNQUOTE_RE.sub(sub, word)


def tokenize(text: str) -> list[tuple[bool, str]]:
    """Shell-ish tokens as (is_operator, text): quoted words unquoted, `;` `&&` `|` `>` `2>` kept apart.

    One C-level regex pass (shlex is ~50x slower); unbalanced quotes never raise. A quoted
    `';'` stays a word (it is not an operator).
    """
    out: list[tuple[bool, str]] = []
    for m in _TOKEN_RE.finditer(text):
        op = m.group("op")
        if op is not None:
            if op[0].isdigit():  # `2>` / `2>>`: fd number, then the operator
                op = op[1:]
            out.append((True, op))
        elif (w := m.group("word")) is not None:
            out.append((False, _unquote(w)))
    return out


_ENV_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_OUT_OPS = frozenset({">", ">>", ">|", "&>", "&>>"})
_SKIP_NEXT_OPS = frozenset({"<<", "<<<", "<&", ">&"})


def split_commands(cmd: str) -> list[SimpleCommand]:
    """Tokenize a shell command line into simple commands (best effort, never raises)."""
    text = cmd.replace("\\\n", " ").replace("\n", " ; ")
    tokens = tokenize(text)
    out: list[SimpleCommand] = []
    cur = SimpleCommand(argv=[])
    n = len(tokens)
    i = 0
    while i < n:
        is_op, t = tokens[i]
        i += 1
        if is_op:
            if t in _OUT_OPS:
                if i < n and not tokens[i][0]:
                    cur.out_files.append(tokens[i][1])
                    i += 1
            elif t == "<":
                if i < n and not tokens[i][0]:
                    cur.in_files.append(tokens[i][1])
                    i += 1
            elif t in _SKIP_NEXT_OPS:
                if i < n and not tokens[i][0]:
                    i += 1
            else:  # ; && || | & ( ) ;;: a command boundary
                if cur.argv or cur.out_files or cur.env:
                    out.append(cur)
                cur = SimpleCommand(argv=[])
            continue
        if not cur.argv and "=" in t and _ENV_ASSIGN.match(t):
            k, v = t.split("=", 1)
            cur.env[k] = v
            continue
        cur.argv.append(t)
    if cur.argv or cur.out_files or cur.env:
        out.append(cur)
    for sc in out:
        _unwrap(sc)
    return out


def _unwrap(sc: SimpleCommand) -> None:
    """`sudo env A=1 timeout 60 python x` -> argv `python x`, env {A: 1}; `export A=1` -> env."""
    while sc.argv:
        p = posixpath.basename(sc.argv[0])
        if p == "export" or p == "declare":
            for a in sc.argv[1:]:
                if "=" in a and not a.startswith("-"):
                    k, v = a.split("=", 1)
                    sc.env[k] = v
            sc.argv = []
            return
        if p not in _WRAPPERS:
            return
        rest = sc.argv[1:]
        while rest and (rest[0].startswith("-") or (p == "timeout" and re.match(r"^\d", rest[0]))):
            rest = rest[1:]
        while rest and "=" in rest[0] and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", rest[0]):
            k, v = rest[0].split("=", 1)
            sc.env[k] = v
            rest = rest[1:]
        sc.argv = rest


def _non_options(args: list[str]) -> list[str]:
    out: list[str] = []
    after_ddash = False
    for a in args:
        if after_ddash:
            out.append(a)
        elif a == "--":
            after_ddash = True
        elif not a.startswith("-"):
            out.append(a)
    return out


# ---------------------------------------------------------------------------------------------
# Tool calls


@dataclass(frozen=True)
class WriteOp:
    """One file a tool call creates, changes or removes."""

    path: str
    op: str  # write | edit | patch | redirect | sed | tee | copy | move | remove | python
    content: str = ""  # new text when known (Write content, Edit new_string, patch + lines, sed script)
    old: str = ""  # replaced text (Edit old_string, patch - lines)
    source: str = ""  # cp/mv source path
    restores: bool = False  # a copy from a pristine source (template_files, .orig/.bak, git checkout)


@dataclass
class CallInfo:
    """What one tool call does, as far as the transcript rules care."""

    tool: str
    text: str  # every string of the input, joined (for run-id and pattern search)
    command: str | None = None  # shell command line when it is a shell tool
    commands: list[SimpleCommand] = field(default_factory=list)
    heredocs: list[str] = field(default_factory=list)
    writes: list[WriteOp] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)  # files read (Read tool, cat/sed -n/grep targets)
    restores: list[str] = field(default_factory=list)  # deck keys restored (git checkout/restore), "*" = all
    relevant: bool = False  # names a deck file or a grading switch (the shell parse ran eagerly)
    shell_parsed: bool = False
    _foreign: tuple[frozenset[str], list[str]] | None = None

    def foreign(self, ident: RunIdentity) -> list[str]:
        """Foreign run ids named anywhere in the input (memoized: several checkers ask)."""
        cached = self._foreign
        if cached is None or (cached[0] is not ident.own and cached[0] != ident.own):
            cached = self._foreign = (ident.own, ident.foreign(self.text))
        return cached[1]

    def ensure_shell(self) -> None:
        """Parse the shell command now if the prefilter skipped it (KA201 needs it for run paths)."""
        if not self.shell_parsed and self.command is not None:
            _analyze_shell(self, self.command)


def flatten(value: Any, _depth: int = 0) -> str:
    if isinstance(value, str):
        return value
    if _depth > 6:
        return ""
    if isinstance(value, dict):
        try:  # all values strings (an Edit, a Write): the same join without a frame per value
            return "\n".join(value.values())
        except TypeError:
            return "\n".join(flatten(v, _depth + 1) for v in value.values())
    if isinstance(value, list | tuple):
        try:
            return "\n".join(value)
        except TypeError:
            return "\n".join(flatten(v, _depth + 1) for v in value)
    return "" if value is None else str(value)


def _command_of(tool: str, inp: Any) -> str | None:
    if isinstance(inp, dict):
        c = inp.get("command", inp.get("cmd"))
        if isinstance(c, list):
            parts = [str(x) for x in c]
            if len(parts) >= 3 and posixpath.basename(parts[0]) in ("bash", "sh", "zsh") and parts[1] in ("-lc", "-c"):
                return parts[2]
            return " ".join(shlex.quote(p) for p in parts)
        if isinstance(c, str) and (tool in _SHELL_TOOLS or "command" in inp or "cmd" in inp):
            return c
        return None
    if isinstance(inp, str) and tool in _SHELL_TOOLS:
        return inp
    return None


_PATCH_FILE_RE = re.compile(r"^\*\*\* (Update|Add|Delete) File: (.+)$|^\*\*\* Move to: (.+)$|^\+\+\+ (?:b/)?(\S+)", re.M)


def parse_patch(patch: str) -> list[WriteOp]:
    """Files of an apply_patch envelope (`*** Update File:`) or a unified diff (`+++ b/x`)."""
    ops: list[WriteOp] = []
    matches = list(_PATCH_FILE_RE.finditer(patch))
    for n, m in enumerate(matches):
        end = matches[n + 1].start() if n + 1 < len(matches) else len(patch)
        body = patch[m.end() : end]
        plus = "\n".join(ln[1:] for ln in body.split("\n") if ln.startswith("+") and not ln.startswith("+++"))
        minus = "\n".join(ln[1:] for ln in body.split("\n") if ln.startswith("-") and not ln.startswith("---"))
        if m.group(1):
            op = "remove" if m.group(1) == "Delete" else "patch"
            ops.append(WriteOp(path=m.group(2).strip(), op=op, content=plus, old=minus))
        elif m.group(3):
            ops.append(WriteOp(path=m.group(3).strip(), op="move", content=plus, old=minus))
        elif m.group(4) and m.group(4) != "/dev/null":
            ops.append(WriteOp(path=m.group(4).strip(), op="patch", content=plus, old=minus))
    return ops


_PRISTINE = ("template_files", "trusted_src", ".orig", ".bak", "backup", "pristine", "original", "canonical")

_EDIT_TOOLS = frozenset({"edit", "str_replace", "str_replace_editor", "str_replace_based_edit_tool", "replace", "edit_file"})
_WRITE_TOOLS = frozenset({"write", "create_file", "write_file", "create"})
_READ_TOOLS = frozenset({"read", "read_file", "view", "open_file", "cat"})
_PATCH_TOOLS = frozenset({"apply_patch", "patch", "applypatch"})
_READ_PROGS = frozenset(
    {"cat", "head", "tail", "less", "more", "nl", "bat", "view", "grep", "rg", "egrep", "fgrep", "awk", "wc", "diff", "cmp", "md5sum", "sha256sum", "strings", "od", "xxd", "vim", "vi", "nano", "batcat"}
)


def _path_of(inp: dict[str, Any]) -> str | None:
    for k in ("file_path", "filePath", "path", "notebook_path", "filename", "file", "target_file"):
        v = inp.get(k)
        if isinstance(v, str) and v:
            return v
    return None


_new = object.__new__
_set_attr = object.__setattr__


def _call_info(tool: str, text: str) -> CallInfo:
    """`CallInfo(tool=tool, text=text)` without the dataclass __init__ (once per tool call)."""
    info = _new(CallInfo)
    info.__dict__ = {
        "tool": tool, "text": text, "command": None, "commands": [], "heredocs": [], "writes": [], "reads": [],
        "restores": [], "relevant": False, "shell_parsed": False, "_foreign": None,
    }
    return info


def _write_op(path: str, op: str, content: str = "", old: str = "") -> WriteOp:
    """`WriteOp(path=..., op=..., content=..., old=...)` without the frozen __init__ (6 object.__setattr__)."""
    w = _new(WriteOp)
    _set_attr(w, "__dict__", {"path": path, "op": op, "content": content, "old": old, "source": "", "restores": False})
    return w


# tool name -> (stripped, lower-cased); a handful of names per transcript (bounded anyway)
_TOOL_NAMES: dict[str, tuple[str, str, bool]] = {}
_LIST_TOOLS = frozenset({"grep", "glob", "search", "find", "ls", "list", "list_dir"})


def _tool_names(tool_name: str | None) -> tuple[str, str, bool]:
    """(stripped name, lower-cased name, whether a dict input may name files) for a tool."""
    names = _TOOL_NAMES.get(tool_name) if tool_name is not None else None
    if names is None:
        tool = (tool_name or "").strip()
        low = tool.lower()
        files = (low in _EDIT_TOOLS or low in ("multiedit", "notebookedit") or low in _WRITE_TOOLS
                 or low in _READ_TOOLS or low in _PATCH_TOOLS or low in _LIST_TOOLS)
        names = (tool, low, files)
        if tool_name is not None and len(_TOOL_NAMES) < 1024:
            _TOOL_NAMES[tool_name] = names
    return names


def analyze_tool_input(tool_name: str | None, inp: Any) -> CallInfo:
    tool, low, names_files = _tool_names(tool_name)
    is_dict = isinstance(inp, dict)
    if low == "bash" and is_dict and isinstance(inp.get("command"), str):
        text = inp["command"]  # the description is the agent's prose, not an action
        info = _call_info(tool, text)
        info.command = text  # what _command_of returns for a shell tool with a string command
    else:
        if low == "read" and is_dict and isinstance(inp.get("file_path"), str):
            text = inp["file_path"]
        else:
            text = flatten(inp)
        info = _call_info(tool, text)
        info.command = _command_of(low, inp)
    info.relevant = is_relevant(text)
    if is_dict and names_files:  # (a shell tool's dict input names no file of its own)
        if low in _EDIT_TOOLS or low == "multiedit" or low == "notebookedit":
            path = _path_of(inp)
            if path:
                edits = inp.get("edits")
                if isinstance(edits, list) and edits:
                    for e in edits:
                        if isinstance(e, dict):
                            info.writes.append(
                                _write_op(path, "edit", flatten(e.get("new_string", e.get("newString", ""))), flatten(e.get("old_string", e.get("oldString", ""))))
                            )
                else:
                    new = inp.get("new_string", inp.get("newString", inp.get("new_str", inp.get("new_source", ""))))
                    old = inp.get("old_string", inp.get("oldString", inp.get("old_str", "")))
                    if low == "str_replace_based_edit_tool" and inp.get("command") in ("view",):
                        info.reads.append(path)
                    elif low == "str_replace_based_edit_tool" and inp.get("command") == "create":
                        info.writes.append(_write_op(path, "write", flatten(inp.get("file_text", ""))))
                    else:
                        info.writes.append(_write_op(path, "edit", flatten(new), flatten(old)))
        elif low in _WRITE_TOOLS:
            path = _path_of(inp)
            if path:
                info.writes.append(_write_op(path, "write", flatten(inp.get("content", inp.get("file_text", "")))))
        elif low in _READ_TOOLS:
            path = _path_of(inp)
            if path:
                info.reads.append(path)
        elif low in _PATCH_TOOLS:
            info.writes.extend(parse_patch(flatten(inp.get("input", inp.get("patch", inp.get("patchText", text))))))
        elif low in _LIST_TOOLS:
            path = _path_of(inp)
            if path:
                info.reads.append(path)
    elif isinstance(inp, str) and (low in _PATCH_TOOLS or inp.lstrip().startswith("*** Begin Patch")):
        info.writes.extend(parse_patch(inp))
    if info.command is not None:
        if "*** Begin Patch" in info.command:
            info.writes.extend(parse_patch(info.command))
        if info.relevant:
            _analyze_shell(info, info.command)
    return info


def _analyze_shell(info: CallInfo, command: str) -> None:
    info.shell_parsed = True
    cmd, bodies = strip_heredocs(command)
    info.heredocs = bodies
    info.commands = split_commands(cmd)
    for n, sc in enumerate(info.commands):
        body = bodies[0] if bodies and n == 0 else ""
        for f in sc.out_files:
            info.writes.append(WriteOp(path=f, op="redirect", content=body))
        info.reads.extend(sc.in_files)
        argv = sc.argv
        if not argv:
            continue
        prog = sc.prog
        args = argv[1:]
        if prog in ("sed", "perl") and any(a == "-i" or a.startswith("-i") or a.startswith("--in-place") or (prog == "perl" and a.startswith("-p") and "i" in a) for a in args):
            rest = _non_options(args)
            has_e = any(a in ("-e", "--expression") or a.startswith("-e") for a in args)
            script = ""
            if not has_e and rest:
                script, rest = rest[0], rest[1:]
            else:
                for k, a in enumerate(args):
                    if a in ("-e", "--expression") and k + 1 < len(args):
                        script += args[k + 1] + "\n"
                        if args[k + 1] in rest:
                            rest.remove(args[k + 1])
            for f in rest:
                info.writes.append(WriteOp(path=f, op="sed", content=script))
        elif prog in ("sed",):
            rest = _non_options(args)
            info.reads.extend(rest[1:])
        elif prog == "tee":
            for f in _non_options(args):
                info.writes.append(WriteOp(path=f, op="tee", content=body))
        elif prog in ("cp", "install", "rsync", "mv", "ln", "scp"):
            rest = _non_options(args)
            target_dir = None
            for k, a in enumerate(args):
                if a in ("-t", "--target-directory") and k + 1 < len(args):
                    target_dir = args[k + 1]
                    if target_dir in rest:
                        rest.remove(target_dir)
            if target_dir is None and len(rest) >= 2:
                dest, srcs = rest[-1], rest[:-1]
            elif target_dir is not None:
                dest, srcs = target_dir, rest
            else:
                continue
            op = "move" if prog == "mv" else "copy"
            multi = target_dir is not None or len(srcs) > 1 or dest.endswith("/") or dest in (".", "..") or posixpath.basename(dest) not in DECK_BASENAMES and "." not in posixpath.basename(dest)
            for s in srcs:
                pristine = any(x in s for x in _PRISTINE)
                if multi:
                    base = posixpath.basename(s.rstrip("/"))
                    if "*" in base or base in ("", ".", "template_files", "trusted_src") or s.endswith("/"):
                        if pristine:
                            info.restores.append("*")
                        continue
                    tgt = posixpath.join(dest, base)
                else:
                    tgt = dest
                info.writes.append(WriteOp(path=tgt, op=op, source=s, restores=pristine))
                info.reads.append(s)
                if prog == "mv":
                    info.writes.append(WriteOp(path=s, op="remove"))
        elif prog in ("rm", "unlink", "truncate", "shred"):
            for f in _non_options(args):
                if prog == "truncate" and re.match(r"^\d", f):
                    continue
                info.writes.append(WriteOp(path=f, op="remove"))
        elif prog == "dd":
            for a in args:
                if a.startswith("of="):
                    info.writes.append(WriteOp(path=a[3:], op="redirect"))
        elif prog == "git" and args:
            sub = args[0]
            rest = _non_options(args[1:])
            if sub in ("checkout", "restore"):
                files = [a for a in rest if deck_key(a)] if sub == "checkout" else rest
                info.restores.extend(dk for a in files if (dk := deck_key(a)))
                if (sub == "restore" and not files) or any(a in (".", "./", "*") for a in rest):
                    info.restores.append("*")
            elif sub == "stash" or (sub == "reset" and "--hard" in args):
                info.restores.append("*")
            elif sub in ("show", "diff", "log", "blame"):
                info.reads.extend(rest)
        elif prog == "patch":
            rest = _non_options(args)
            if rest:
                info.writes.append(WriteOp(path=rest[0], op="patch", content=body))
        elif prog in _READ_PROGS:
            rest = _non_options(args)
            if prog in ("grep", "rg", "egrep", "fgrep", "awk") and rest:
                rest = rest[1:]
            info.reads.extend(rest)
        elif prog.startswith("python") and "-c" in args:
            k = args.index("-c")
            code = args[k + 1] if k + 1 < len(args) else ""
            for m in _PY_OPEN_WRITE_RE.finditer(code):
                info.writes.append(WriteOp(path=m.group(1), op="python", content=code))
            for m in _PY_WRITE_TEXT_RE.finditer(code):
                info.writes.append(WriteOp(path=m.group(1), op="python", content=code))
    for body in bodies:
        if body.lstrip().startswith("*** Begin Patch"):
            info.writes.extend(parse_patch(body))


_last_event: TranscriptEvent | None = None
_last_info: CallInfo | None = None


def analyze_call(event: TranscriptEvent) -> CallInfo:
    """`analyze_tool_input` for a TOOL_CALL event, cached for the event being fed right now.

    The engine feeds one event to every checker before the next event, so a one-slot cache
    makes the parse happen once per event whatever the number of checkers asking.
    """
    global _last_event, _last_info
    if _last_event is event and _last_info is not None:
        return _last_info
    info = analyze_tool_input(event.tool_name, event.tool_input)
    _last_event, _last_info = event, info
    return info


def is_tool_call(event: TranscriptEvent) -> bool:
    return event.kind is EventKind.TOOL_CALL


# ---------------------------------------------------------------------------------------------
# Text helpers

_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n\s*\n|\n[-*•] ")


def sentence_around(text: str, start: int, end: int, limit: int = 400) -> tuple[str, int, int]:
    """The sentence holding text[start:end] (bounded to `limit` chars either side)."""
    lo = max(0, start - limit)
    left = text[lo:start]
    cut = 0
    for m in _SENTENCE_END.finditer(left):
        cut = m.end()
    s0 = lo + cut
    hi = min(len(text), end + limit)
    m2 = _SENTENCE_END.search(text, end, hi)
    s1 = m2.end() if m2 else hi
    return text[s0:s1].strip(), s0, s1


def clip(text: str, n: int = 300) -> str:
    t = " ".join(text.split())
    return t if len(t) <= n else t[: n - 3] + "..."


def lines_matching(lines: Iterable[str], pattern: re.Pattern[str]) -> Iterator[tuple[int, str]]:
    for no, ln in enumerate(lines, start=1):
        if pattern.search(ln):
            yield no, ln


# ---------------------------------------------------------------------------------------------
# Failure classification (shared by KA207 infra and KA208 code defects, transcript and logs)

INFRA_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("missing_ninja", re.compile(r"Ninja is required to load C\+\+ extensions|ninja: (?:command )?not found|No module named '?ninja'?")),
    (
        "nvcc_unavailable",
        re.compile(r"nvcc is unavailable|nvcc: (?:command )?not found|No such file or directory: '[^']*nvcc'|CUDA_HOME environment variable is not set|Could not find nvcc"),
    ),
    (
        "cuda_driver_mismatch",
        re.compile(
            r"driver version is insufficient for CUDA runtime version|NVIDIA driver on your system is too old|CUDA driver version is insufficient"
            r"|cudaErrorInsufficientDriver|CUDA initialization: The NVIDIA driver|found version \d{4,5}\)?.*(?:cu1[23]\d?|driver)"
        ),
    ),
    (
        "lock_starvation",
        re.compile(r"\block_timeout\b|timed out waiting for (?:the )?(?:gpu[ _-]?)?lock|gpu[ _-]?lock (?:wait )?time(?:d )?out", re.I),
    ),
    ("harness_venv", re.compile(r"ModuleNotFoundError: No module named '(?:torch|triton|numpy|yaml)'|\.venv/bin/python: (?:No such file|not found)|error: No interpreter found")),
    ("orphaned_wrapper", re.compile(r"orphan(?:ed)? (?:grading )?wrapper|grading process (?:died|was killed)|wrapper (?:process )?orphaned", re.I)),
    ("gpu_oom_neighbour", re.compile(r"CUDA out of memory.*Process \d+ has [\d.]+ [GM]iB memory in use.*this process has", re.S)),
)

CODE_DEFECT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "compile_error",
        re.compile(
            r"error: identifier \"[^\"]+\" is undefined|\d+ errors? detected in the compilation|error: no (?:instance of )?overloaded function|"
            r"error: expected an? |error: no suitable |error: argument of type|fatal error: [^:\n]+: No such file or directory|"
            r"triton\.compiler\.errors\.CompilationError|CompilationError:|error: use of undeclared identifier|error: too (?:few|many) arguments"
        ),
    ),
    (
        "runtime_error",
        re.compile(
            r"CUDA error: an illegal memory access|CUDA error: misaligned address|an illegal instruction was encountered|"
            r"CUDA error: invalid argument|device-side assert triggered|RuntimeError: CUDA error|out of resource: shared memory"
        ),
    ),
    ("wrong_result", re.compile(r"FAIL: .*tolerance exceeded|FAIL: state_dict mismatch|FAIL: .*property stress|Mismatched elements: \d+|max_abs_diff=\S+ max_rel_diff=")),
)

# Lower-case substrings one of which every infra / defect signature contains: the regexes only
# run on tool output that has one (C-speed gate; most output has none).
INFRA_GATES: tuple[str, ...] = (
    "ninja", "nvcc", "cuda_home", "driver", "lock", "no module named", ".venv", "no interpreter", "orphan",
    "grading process", "wrapper", "out of memory",
)
DEFECT_GATES: tuple[str, ...] = ("error", "fail", "mismatch", "max_abs_diff", "out of resource", "device-side")


_lower_src: str | None = None
_lower_val = ""


def lower_once(text: str) -> str:
    """text.lower(), remembered for the last text object asked about (infra and defect gates share it)."""
    global _lower_src, _lower_val
    if _lower_src is not text:
        _lower_src, _lower_val = text, text.lower()
    return _lower_val


_gate_src: str | None = None
_gate_val: tuple[bool, bool] = (False, False)


def gate_hits(text: str) -> tuple[bool, bool]:
    """(an infra gate matched, a defect gate matched), computed once per text object."""
    global _gate_src, _gate_val
    if _gate_src is not text:
        low = _lower_val if _lower_src is text else lower_once(text)
        infra = defect = False
        for g in INFRA_GATES:  # _has_any inlined: this runs for every tool result
            if g in low:
                infra = True
                break
        for g in DEFECT_GATES:
            if g in low:
                defect = True
                break
        _gate_src, _gate_val = text, (infra, defect)
    return _gate_val


def gated(text: str, gates: tuple[str, ...]) -> bool:
    if gates is INFRA_GATES:
        return gate_hits(text)[0]
    if gates is DEFECT_GATES:
        return gate_hits(text)[1]
    return _has_any(lower_once(text), gates)


INFRA_ANY = re.compile("|".join(f"(?:{p.pattern})" for _, p in INFRA_PATTERNS if not p.flags & re.I), re.S)
INFRA_ANY_I = re.compile("|".join(f"(?:{p.pattern})" for _, p in INFRA_PATTERNS if p.flags & re.I), re.I)
CODE_DEFECT_ANY = re.compile("|".join(f"(?:{p.pattern})" for _, p in CODE_DEFECT_PATTERNS))


def classify_infra(text: str) -> tuple[str, str] | None:
    """(infra kind, evidence line) for the first infrastructure signature in `text`."""
    gates = _gate_val if _gate_src is text else gate_hits(text)  # `gated(text, INFRA_GATES)`, one call less
    if not gates[0] or not (INFRA_ANY.search(text) or INFRA_ANY_I.search(text)):
        return None
    for kind, pat in INFRA_PATTERNS:
        m = pat.search(text)
        if m:
            return kind, _line_at(text, m.start())
    return None


def classify_defect(text: str) -> tuple[str, str] | None:
    gates = _gate_val if _gate_src is text else gate_hits(text)  # `gated(text, DEFECT_GATES)`
    if not gates[1]:
        return None
    m0 = CODE_DEFECT_ANY.search(text)
    if not m0:
        return None
    for kind, pat in CODE_DEFECT_PATTERNS:
        m = pat.search(text)
        if m:
            return kind, _line_at(text, m.start())
    return None


def _line_at(text: str, pos: int) -> str:
    s = text.rfind("\n", 0, pos) + 1
    e = text.find("\n", pos)
    return text[s : e if e >= 0 else len(text)].strip()[:400]


# ---------------------------------------------------------------------------------------------
# Graded logs (the infra/defect rules read them besides the transcript)

GRADED_LOGS: tuple[str, ...] = ("check.log", "check.contended.log", "benchmark.log", "benchmark.contended.log")
MAX_LOG_BYTES = 8 << 20


def iter_log_lines(archive: UnpackedArchive) -> Iterator[tuple[str, int, str]]:
    """(log path, 1-based line, text) of every graded log in the archive (bounded size)."""
    for name in GRADED_LOGS:
        if not archive.has(name):
            continue
        f = archive.files[name]
        if f.size > MAX_LOG_BYTES or not f.is_text:
            continue
        for no, line in enumerate(archive.read_text(name).splitlines(), start=1):
            yield name, no, line


def log_text(archive: UnpackedArchive, name: str) -> str | None:
    if not archive.has(name):
        return None
    f = archive.files[name]
    if f.size > MAX_LOG_BYTES or not f.is_text:
        return None
    return archive.read_text(name)


def find_line(lines: list[str], prefix: str, *, last: bool = False) -> int | None:
    """1-based number of the first (or last) line whose stripped text starts with `prefix`."""
    rng = range(len(lines) - 1, -1, -1) if last else range(len(lines))
    for i in rng:
        if lines[i].strip().startswith(prefix):
            return i + 1
    return None


def last_nonblank_line(lines: list[str]) -> int | None:
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip():
            return i + 1
    return None


def result_field(result: Any, *path: str) -> Any:
    """result.json value at a key path (None when any level is missing or not an object)."""
    cur = result
    for key in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return cur
