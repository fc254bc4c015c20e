"""Run-format facts, in one place: the file names, source suffixes and grammars of a KBH run.

ingest (unpacking and parsing an archive), graders (staging and grading a solution) and
audit_rules (reading it) all import these names instead of spelling them again; the spec is
../shared/spec/run-archive.md. Pure stdlib: graders must import with only torch, triton and
PyYAML installed.

What lives where:

* file names and source suffixes: here;
* the sidecar banner of public archives (sidecars appended to solution.py): here
  (`split_embedded_sidecars`);
* the forbidden-list grammar of problem.yaml: here (`parse_forbidden`);
* the log grammars: check.log, benchmark.log and gpu_lock.log in `graders.logformat` (the parsers
  ingest uses and the writers kaudit's own grader and GPU lock use; the parsers re-exported below).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from graders.logformat import parse_benchmark_log, parse_check_log, parse_gpu_lock_log  # noqa: F401  (the log grammar)

# ---------------------------------------------------------------------------------------------
# File names (archive paths, relative to the run folder)

SOLUTION = "solution.py"
RESULT = "result.json"
RESULT_REGRADE = "result.regrade.json"
CHECK_LOG = "check.log"
CHECK_CONTENDED_LOG = "check.contended.log"
BENCHMARK_LOG = "benchmark.log"
BENCHMARK_CONTENDED_LOG = "benchmark.contended.log"
GPU_LOCK_LOG = "gpu_lock.log"
TRANSCRIPT_FILES = ("transcript.jsonl", "codex_session.jsonl")
SCRATCH_DIR = "scratch"  # the agent's sidecar folder: scratch/<name> is loaded by solution.py
LOG_FILES = (CHECK_LOG, CHECK_CONTENDED_LOG, BENCHMARK_LOG, BENCHMARK_CONTENDED_LOG, GPU_LOCK_LOG)

# Deck problem folder files
PROBLEM_YAML = "problem.yaml"
REFERENCE_PY = "reference.py"
SHAPES_PY = "shapes.py"
CHECK_PY = "check.py"
BENCHMARK_PY = "benchmark.py"

# ---------------------------------------------------------------------------------------------
# Suffixes

PY_SUFFIXES = (".py",)
# Native device/host code a solution compiles or loads (torch.utils.cpp_extension, nvrtc, ptx).
NATIVE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".c", ".h", ".hpp", ".hh", ".ptx")
SOURCE_SUFFIXES = PY_SUFFIXES + NATIVE_SUFFIXES
CUDA_SUFFIXES = (".cu", ".cuh")
# Run archives kaudit accepts (ingest.archive sniffs the bytes; these are the names a folder scan takes).
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")


def is_source_name(name: str) -> bool:
    """A file name with a source suffix (case-insensitive)."""
    return name.lower().endswith(SOURCE_SUFFIXES)


def is_native_name(name: str) -> bool:
    return name.lower().endswith(NATIVE_SUFFIXES)


def is_archive_name(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


# ---------------------------------------------------------------------------------------------
# Public archives: sidecars appended to solution.py
#
# The benchmark's published run details carry no scratch/ folder: the sidecar sources the solution
# loaded are appended to solution.py, each after a banner
#     # ==================================================================
#     # ===== sidecar: kern.cu (5378 bytes, loaded by solution.py) =====
#     # ==================================================================
# The text below a banner is the sidecar, verbatim; solution.py is what precedes the first one.

SIDECAR_BANNER = re.compile(
    r"^# =+ sidecar: (?P<name>[A-Za-z0-9_.+-][A-Za-z0-9_./+-]*) \((?P<size>\d+) bytes, loaded by solution\.py\) =+$"
)
_RULE_LINE = re.compile(r"^# =+$")


def split_embedded_sidecars(text: str) -> tuple[str, dict[str, str]]:
    """(solution.py's own text, {sidecar file name: text}) for a solution with appended sidecars.

    Line numbers of the Python part are unchanged. A name that is not a plain relative path
    (absolute, with `..`) or not a source suffix is left inside solution.py, as is everything
    when no banner is found.
    """
    lines = text.split("\n")
    banners: list[tuple[int, str]] = []
    for i, line in enumerate(lines):
        m = SIDECAR_BANNER.match(line.rstrip())
        if m is None:
            continue
        name = m.group("name")
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts or not is_source_name(name) or name == SOLUTION:
            continue
        banners.append((i, name))
    if not banners:
        return text, {}
    sidecars: dict[str, str] = {}

    def start_of(i: int) -> int:  # the rule line above a banner belongs to the banner
        return i - 1 if i > 0 and _RULE_LINE.match(lines[i - 1].rstrip()) else i

    for n, (i, name) in enumerate(banners):
        body_from = i + 1
        if body_from < len(lines) and _RULE_LINE.match(lines[body_from].rstrip()):
            body_from += 1
        if body_from < len(lines) and lines[body_from] == "":
            body_from += 1
        body_to = start_of(banners[n + 1][0]) if n + 1 < len(banners) else len(lines)
        sidecars.setdefault(name, "\n".join(lines[body_from:body_to]).rstrip("\n") + "\n")
    head = "\n".join(lines[: start_of(banners[0][0])]).rstrip("\n") + "\n"
    return head, sidecars


# ---------------------------------------------------------------------------------------------
# The forbidden-list grammar (problem.yaml `forbidden:`)
#
# Each entry is one of
#   torch.topk / torch.ops.aten._scaled_mm / torch.nn.functional.linear   a dotted op name
#   F.x / nn.functional.x / aten.x / Tensor.x                            short prefixes for the same
#   torch.ops.aten.topk/sort                                             several ops of one namespace
#   topk                                                                 a bare op name (any namespace)
#   import X / from X / @X                                               a module or decorator (X dotted)
#   "tensor forms" / "tensor methods" / "Tensor.*"                       a note: Tensor methods count too

_PREFIXES = (
    ("F.", "torch.nn.functional."),
    ("nn.functional.", "torch.nn.functional."),
    ("aten.", "torch.ops.aten."),
    ("Tensor.", "torch.Tensor."),
)
OVERLOAD_NAMES = frozenset({"default", "out", "Tensor", "stable", "values"})
_TENSOR_FORMS_NOTES = ("tensor methods", "tensor.*")


@dataclass(frozen=True)
class ForbiddenEntry:
    raw: str  # the entry as problem.yaml lists it
    dotted: str  # normalised dotted name (prefixes expanded, `import `/`from `/`@` removed)
    torch_leaf: str | None  # the op name when the entry names a torch op, or the bare name itself
    bare: bool  # no namespace: the name matches in any namespace
    form: str = "op"  # "op" | "module" (import X / from X) | "decorator" (@X)


@dataclass(frozen=True)
class ForbiddenList:
    entries: tuple[ForbiddenEntry, ...]
    tensor_forms: bool  # the Tensor-method spellings (x.topk()) are meant too

    @property
    def names(self) -> list[str]:
        """Sorted unique dotted names."""
        return sorted({e.dotted for e in self.entries})


def _entry(raw: str, text: str) -> ForbiddenEntry:
    form = "op"
    if text.startswith(("import ", "from ")):
        form, text = "module", text.split(None, 1)[1].strip()
    elif text.startswith("@"):
        form, text = "decorator", text[1:].strip()
    for prefix, full in _PREFIXES:
        if text.startswith(prefix):
            text = full + text[len(prefix) :]
            break
    bare = "." not in text
    leaf: str | None = None
    if bare:
        leaf = text
    elif text.startswith("torch."):
        parts = text.split(".")
        leaf = parts[-1]
        if leaf in OVERLOAD_NAMES and len(parts) > 2:
            leaf = parts[-2]
    return ForbiddenEntry(raw=raw, dotted=text, torch_leaf=leaf, bare=bare, form=form)


def parse_forbidden(raw: Iterable[object]) -> ForbiddenList:
    """problem.yaml's `forbidden:` list in the grammar above (blank and non-string items skipped)."""
    entries: list[ForbiddenEntry] = []
    tensor_forms = False
    for item in raw:
        if not isinstance(item, str) or not item.strip():
            continue
        text = item.strip()
        low = text.lower()
        if "tensor form" in low or low in _TENSOR_FORMS_NOTES:
            tensor_forms = True
            continue
        if "/" in text and not text.startswith(("import ", "from ", "@")):
            head, _, tail = text.rpartition(".")
            first, *rest = tail.split("/")
            names = [f"{head}.{n}" if head else n for n in (first, *rest) if n]
        else:
            names = [text]
        for name in names:
            e = _entry(item, name)
            entries.append(e)
            if e.dotted.startswith("torch.Tensor."):
                tensor_forms = True
    return ForbiddenList(entries=tuple(entries), tensor_forms=tensor_forms)
