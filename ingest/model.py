"""Plain data types shared by ingest, the audit rules and the service.

Nothing here imports the web stack or the database: the audit library and the
`kaudit audit` command use these types without a server.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


class RejectReason(StrEnum):
    """Machine-readable reasons an archive is refused (HTTP 4xx body `reason`, CLI exit 2)."""

    UNSUPPORTED_FORMAT = "unsupported_format"
    CORRUPT_ARCHIVE = "corrupt_archive"
    ABSOLUTE_PATH = "absolute_path"
    PATH_TRAVERSAL = "path_traversal"
    BACKSLASH_IN_PATH = "backslash_in_path"
    NUL_IN_PATH = "nul_in_path"
    BAD_PATH = "bad_path"
    SYMLINK = "symlink"
    HARDLINK = "hardlink"
    SPECIAL_FILE = "special_file"
    DUPLICATE_NAME = "duplicate_name"
    TOO_MANY_MEMBERS = "too_many_members"
    FILE_TOO_LARGE = "file_too_large"
    TOTAL_TOO_LARGE = "total_too_large"
    COMPRESSION_RATIO = "compression_ratio"
    OVERLAPPING_ENTRIES = "overlapping_entries"
    MULTIPLE_RUNS = "multiple_runs"
    MISSING_RESULT_JSON = "missing_result_json"
    INVALID_RESULT_JSON = "invalid_result_json"
    INVALID_UTF8 = "invalid_utf8"
    INVALID_RUN_ID = "invalid_run_id"
    EMPTY_UPLOAD = "empty_upload"


class ArchiveRejected(Exception):
    """Raised by ingest for any archive kaudit refuses. Nothing may be stored after it."""

    def __init__(self, reason: RejectReason, message: str, member: str | None = None) -> None:
        super().__init__(f"{reason.value}: {message}")
        self.reason = reason
        self.message = message
        self.member = member


@dataclass(frozen=True)
class Limits:
    """Ingest caps. Defaults are the loosest the spec allows; settings may tighten them."""

    max_members: int = 100_000
    max_total_bytes: int = 1 << 30  # 1 GiB unpacked, counted as bytes actually read
    max_file_bytes: int = 512 << 20  # 512 MiB per member
    max_ratio: float = 200.0  # unpacked / compressed, whole archive and per member
    # The ratio is only judged once this many bytes were unpacked: a 300-byte archive holding
    # 100 kB of one repeated log line is not a bomb, and tiny archives have huge ratios.
    ratio_min_bytes: int = 1 << 20


@dataclass(frozen=True)
class StagedFile:
    """One regular file of an archive, written to a staging directory while hashed."""

    path: str  # archive-relative POSIX path, with the single top-level run folder stripped
    size: int
    sha256: str
    md5: str
    is_text: bool  # decodes as UTF-8 (and holds no NUL byte)
    staged_path: Path  # where the bytes lie on disk now


@dataclass
class UnpackedArchive:
    """Result of a safe unpack: every regular file staged on disk, nothing executed."""

    archive_sha256: str
    archive_size: int
    archive_format: str  # "tar", "tar.gz", "zip"
    root_prefix: str  # the stripped top-level folder ("" when files sit at the root)
    files: dict[str, StagedFile]  # keyed by StagedFile.path
    staging_dir: Path

    def read_bytes(self, path: str) -> bytes:
        return self.files[path].staged_path.read_bytes()

    def read_text(self, path: str) -> str:
        return self.files[path].staged_path.read_text(encoding="utf-8", errors="replace")

    def has(self, path: str) -> bool:
        return path in self.files


class Dialect(StrEnum):
    CLAUDE = "claude"
    CODEX = "codex"
    OPENCODE = "opencode"
    CURSOR = "cursor"
    GEMINI = "gemini"
    DROID = "droid"
    KIMI = "kimi"
    GROK = "grok"
    PLAIN = "plain"  # no JSON line at all
    UNKNOWN = "unknown"  # JSON, but no dialect we recognise


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"
    ERROR = "error"


class EventKind(StrEnum):
    TEXT = "text"  # visible assistant/user text
    REASONING = "reasoning"  # thinking / reasoning summaries
    TOOL_CALL = "tool_call"  # the agent asks a tool to act: tool_name + tool_input
    TOOL_RESULT = "tool_result"  # what the tool returned: text (+ is_error)
    USAGE = "usage"  # token/cost accounting (result line, token_count)
    ERROR = "error"  # provider/CLI error surfaced in the stream
    META = "meta"  # session init, step boundaries, anything else


@dataclass(frozen=True)
class TranscriptEvent:
    """One normalized event. A message with three content blocks yields three events."""

    index: int  # 0-based ordinal in the normalized stream
    line: int  # 1-based line number in the source file
    source: str  # archive path of the transcript file
    dialect: Dialect
    role: Role
    kind: EventKind
    text: str = ""  # text, reasoning, tool-result content or error message (flattened)
    tool_name: str | None = None
    tool_input: Any = None  # dict for structured tools, str for raw commands/patches
    call_id: str | None = None
    is_error: bool = False
    timestamp: str | None = None
    usage: dict[str, Any] | None = None


@dataclass
class TranscriptStats:
    source: str
    dialect: Dialect
    lines: int = 0
    json_lines: int = 0
    unparsable_lines: int = 0  # counted and reported, never fatal
    events: int = 0
    tool_calls: int = 0
    output_tokens: int | None = None


@dataclass(frozen=True)
class FileHash:
    sha256: str
    md5: str
    size: int


@dataclass
class DeckSnapshot:
    """A registered deck: per problem, per deck file, its hashes."""

    name: str
    problems: dict[str, dict[str, FileHash]] = field(default_factory=dict)
    root: Path | None = None  # on-disk folder when the deck's files are available (bundled/imported)


class IntegrityStatus(StrEnum):
    VERIFIED = "verified"  # every deck file byte-identical to the registered copy
    MUTATED = "mutated"  # at least one deck/harness file differs, was deleted or created
    UNKNOWN_DECK = "unknown_deck"  # no registered deck holds this problem / matches the snapshot
    NOT_CHECKABLE = "not_checkable"  # archive lacks what is needed (no template_files and no repo/problems)


@dataclass(frozen=True)
class FileDiff:
    area: str  # "template_files", "repo/problems", "repo/src"
    path: str  # file path inside that area
    change: str  # "modified", "deleted", "created"
    expected_sha256: str | None
    actual_sha256: str | None


@dataclass
class TemplateIntegrity:
    status: IntegrityStatus
    deck: str | None
    problem: str | None
    diffs: list[FileDiff] = field(default_factory=list)
    checked_areas: list[str] = field(default_factory=list)
    reason: str = ""  # plain words: why mutated / why not checkable
    harness_claim: bool | None = None  # result.json template_mutated, kept only for comparison

    @property
    def mutated(self) -> bool:
        return self.status is IntegrityStatus.MUTATED


@dataclass(frozen=True)
class RunIdParts:
    timestamp: str | None  # "YYYYMMDD_HHMMSS"
    harness: str | None
    model_slug: str | None
    problem: str | None
    collision_suffix: str | None  # "_<pid>_<n>" when present


@dataclass
class ParsedRun:
    """Everything ingest reads from one archive, before any audit rule runs.

    `result` is result.json verbatim (unknown keys preserved). Typed fields below are
    what queries and rules need; result.json is authoritative where it has the field,
    the run_id is the fallback.
    """

    run_id: str
    result: dict[str, Any]
    id_parts: RunIdParts
    problem: str | None
    harness: str | None
    model: str | None
    reasoning_effort: str | None
    hardware: str | None  # GPU name as recorded (regrade.gpu_name, legacy gpu_name, ...)
    started_at: str | None
    finished_at: str | None
    has_solution: bool
    solution_path: str | None  # "solution.py" when present
    sidecars: list[str]  # archive paths of scratch/ sources the solution may load
    check_log: Any | None  # graders.logformat.CheckLog
    check_contended_log: Any | None
    benchmark_log: Any | None  # graders.logformat.BenchmarkLog
    benchmark_contended_log: Any | None
    gpu_lock: Any | None  # ingest.logs.GpuLockLog
    transcripts: list[TranscriptStats]  # one per transcript-like file (transcript.jsonl, codex_session.jsonl)
    template: TemplateIntegrity | None
    warnings: list[str] = field(default_factory=list)  # non-fatal oddities (e.g. unparsable lines)
    regrade_record: dict[str, Any] | None = None  # result.regrade.json when present (a JSON object)

    def harness_regrade(self) -> HarnessRegrade | None:
        """The harness's own regrade, wherever the archive records it.

        result.json ``regrade`` (the spec's form: the top-level correct/peak_fraction were
        overwritten by the regrade, the in-run figures sit under ``contended``) comes first; else a
        separate ``result.regrade.json``. The separate record's own ``correct``/``peak_fraction``
        are the regrade's when it has them, and then result.json's top level is still the in-run
        (contended) claim; without them it reads like the embedded form.
        """
        embedded = self.result.get("regrade")
        if isinstance(embedded, dict):
            return HarnessRegrade(
                "result.json", embedded, self.result.get("correct"), self.result.get("peak_fraction"),
                embedded.get("contended") if isinstance(embedded.get("contended"), dict) else None,
            )
        rec = self.regrade_record
        if not isinstance(rec, dict):
            return None
        own = "correct" in rec or "peak_fraction" in rec
        contended = rec.get("contended") if isinstance(rec.get("contended"), dict) else None
        if own and contended is None:
            contended = {k: self.result[k] for k in ("correct", "peak_fraction", "check_exit_code",
                                                      "benchmark_exit_code") if k in self.result}
        return HarnessRegrade(
            "result.regrade.json", rec,
            rec.get("correct") if own else self.result.get("correct"),
            rec.get("peak_fraction") if own else self.result.get("peak_fraction"),
            contended,
        )


@dataclass
class HarnessRegrade:
    """A regrade the benchmark harness itself ran (before kaudit), as the archive records it."""

    source: str  # "result.json" (the embedded regrade object) or "result.regrade.json"
    record: dict[str, Any]  # at, host, gpu_index, gpu_name, mode, ...
    correct: Any  # the regrade's correctness claim (bool when recorded)
    peak_fraction: Any  # the regrade's figure
    contended: dict[str, Any] | None  # the in-run figures it superseded

    @property
    def isolated(self) -> bool:
        return str(self.record.get("mode", "")) == "sequential_isolated"
