"""Shared fixtures of the audit-rule tests: the registered decks and the rule-fixture harness.

The harness implements docs/CONTRACTS.md "Rule fixtures": an entry of
`tests/audit_rules/fixtures/<RULE_ID>/` (a directory laid out like a run archive, or a single
file shorthand) becomes a REAL tar.gz, goes through `safe_unpack`, `parse_run` and the audit
engine, and the exact set of (rule, file, line) firings is compared with the markers.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.corpus.build import (
    DECK_COPY_NAME,
    DECK_FILES,
    DECK_ROOT,
    problem_of,
    synthesized_result,
    tar_tree,
    write_json,
)

FIXTURES = Path(__file__).parent / "fixtures"
PY_SUFFIXES = frozenset({".py"})
C_SUFFIXES = frozenset({".cu", ".cuh", ".cpp", ".cc", ".c", ".h", ".hpp", ".ptx"})
_PY_EXPECT = re.compile(r"#\s*expect:\s*(KA\d{3}(?:\s*,\s*KA\d{3})*)")
_C_EXPECT = re.compile(r"//\s*expect:\s*(KA\d{3}(?:\s*,\s*KA\d{3})*)")
_EXPECT_TXT = re.compile(r"^\s*(\S+):(\d+)\s+(KA\d{3})\s*$")

Firing = tuple[str, str | None, int]  # (rule id, archive path or None, line or 0)


@dataclass
class FixtureEntry:
    rule_id: str
    name: str  # bad_x / good_x (with suffix for files)
    path: Path

    @property
    def bad(self) -> bool:
        return self.name.startswith("bad_")

    @property
    def id(self) -> str:
        return f"{self.rule_id}/{self.name}"


@dataclass
class MaterializedEntry:
    tree: Path
    expected: set[Firing] = field(default_factory=set)


def discover_entries() -> list[FixtureEntry]:
    out: list[FixtureEntry] = []
    if not FIXTURES.is_dir():
        return out
    for rule_dir in sorted(p for p in FIXTURES.iterdir() if p.is_dir() and re.fullmatch(r"KA\d{3}", p.name)):
        for entry in sorted(rule_dir.iterdir()):
            if entry.name.startswith(("bad_", "good_")):
                out.append(FixtureEntry(rule_dir.name, entry.name, entry))
    return out


def _loader_solution(sidecar: str, problem: str) -> str:
    return (
        f"# problem: {problem}\n"
        '"""Fixture shorthand: a solution that builds the sidecar with torch.utils.cpp_extension.load."""\n'
        "import os\n\n"
        "from torch.utils.cpp_extension import load\n\n"
        f'_ext = load(name="fixture_ext", sources=[os.path.join(os.path.dirname(__file__), "scratch", "{sidecar}")])\n'
    )


def markers_in_file(path: Path, archive_path: str) -> set[Firing]:
    """`# expect:` / `// expect:` markers and `"_expect"` JSON keys of one file."""
    found: set[Firing] = set()
    try:
        text = path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return found
    suffix = path.suffix.lower()
    for no, line in enumerate(text.splitlines(), start=1):
        if suffix in PY_SUFFIXES:
            pats = [_PY_EXPECT]
        elif suffix in C_SUFFIXES:
            pats = [_C_EXPECT]
        elif suffix == ".jsonl":
            pats = []
            if '"_expect"' in line:
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    obj = None
                if isinstance(obj, dict):
                    ids = obj.get("_expect")
                    for rid in ids if isinstance(ids, list) else [ids]:
                        found.add((str(rid), archive_path, no))
        else:
            pats = []
        for pat in pats:
            for m in pat.finditer(line):
                for rid in re.split(r"\s*,\s*", m.group(1).strip()):
                    found.add((rid, archive_path, no))
    return found


# deck_copy.txt areas: where a run archive carries the deck's files of one problem.
DECK_COPY_AREAS = ("template_files", "repo/problems")


@dataclass(frozen=True)
class DeckCopy:
    """A directory entry's `deck_copy.txt`: `<problem> <area> [<area> ...]`.

    The harness copies the CURRENT bundled deck files of `problem` (kernels/hard/<problem>/,
    the DECK_FILES that exist) into each area before overlaying the entry's own files, so an
    entry only carries the deck files it changes. Areas: `template_files` (-> template_files/)
    and `repo/problems` (-> repo/problems/<problem>/). Blank lines and `#` comments are ignored.
    """

    problem: str
    areas: tuple[str, ...]

    def area_dirs(self) -> list[str]:
        return ["template_files" if a == "template_files" else f"repo/problems/{self.problem}" for a in self.areas]


def read_deck_copy(entry_dir: Path) -> DeckCopy | None:
    """Parse `<entry_dir>/deck_copy.txt` (None when the entry has none); ValueError when malformed."""
    path = entry_dir / DECK_COPY_NAME
    if not path.is_file():
        return None
    lines = [raw.strip() for raw in path.read_text(encoding="utf-8").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("#")]
    if len(lines) != 1 or len(lines[0].split()) < 2:
        raise ValueError(f"{path}: expected one line `<problem> <area> [<area> ...]`, got {lines!r}")
    problem, *areas = lines[0].split()
    unknown = [a for a in areas if a not in DECK_COPY_AREAS]
    if unknown or len(set(areas)) != len(areas):
        raise ValueError(f"{path}: areas must be distinct, from {DECK_COPY_AREAS}; got {areas!r}")
    if not (DECK_ROOT / problem).is_dir():
        raise ValueError(f"{path}: no bundled deck {problem!r} under {DECK_ROOT}")
    return DeckCopy(problem, tuple(areas))


def apply_deck_copy(decl: DeckCopy, tree: Path) -> None:
    """Copy the bundled deck files of `decl.problem` into each declared area of `tree`."""
    src = DECK_ROOT / decl.problem
    for area in decl.area_dirs():
        dest = tree / area
        dest.mkdir(parents=True, exist_ok=True)
        for name in DECK_FILES:
            if (src / name).is_file():
                shutil.copyfile(src / name, dest / name)


def materialize(entry: FixtureEntry, dest: Path) -> MaterializedEntry:
    """Lay the entry out as a run folder under `dest`; collect the expected firings."""
    tree = dest / "tree"
    src = entry.path
    if src.is_dir():
        decl = read_deck_copy(src)
        if decl is not None:  # deck first, then the entry's own files on top (its edits win)
            apply_deck_copy(decl, tree)
        shutil.copytree(src, tree, ignore=shutil.ignore_patterns("__pycache__", DECK_COPY_NAME), dirs_exist_ok=True)
    else:
        tree.mkdir(parents=True)
        suffix = src.suffix.lower()
        if suffix == ".py":
            shutil.copyfile(src, tree / "solution.py")
        elif suffix in C_SUFFIXES:
            (tree / "scratch").mkdir()
            shutil.copyfile(src, tree / "scratch" / src.name)
            (tree / "solution.py").write_text(_loader_solution(src.name, problem_of(None)), encoding="utf-8")
        elif suffix == ".jsonl":
            shutil.copyfile(src, tree / "transcript.jsonl")
        else:
            raise ValueError(f"fixture {entry.id}: unsupported single-file suffix {suffix!r}")
    expected: set[Firing] = set()
    for path in sorted(tree.rglob("*")):
        if path.is_file() and path.name != "expect.txt":
            expected |= markers_in_file(path, path.relative_to(tree).as_posix())
    exp_txt = tree / "expect.txt"
    if exp_txt.is_file():
        for raw in exp_txt.read_text(encoding="utf-8").splitlines():
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            m = _EXPECT_TXT.match(raw)
            if not m:
                raise ValueError(f"fixture {entry.id}: bad expect.txt line {raw!r}")
            fpath = None if m.group(1) == "-" else m.group(1)
            expected.add((m.group(3), fpath, int(m.group(2))))
    if not (tree / "result.json").exists():
        sol = tree / "solution.py"
        sol_text = sol.read_text(encoding="utf-8") if sol.is_file() else None
        write_json(tree / "result.json", synthesized_result(problem_of(sol_text), sol.is_file()))
    return MaterializedEntry(tree=tree, expected=expected)


@pytest.fixture(scope="session")
def decks():  # type: ignore[no-untyped-def]
    from ingest.decks import bundled_decks

    return bundled_decks()


__all__ = [
    "DeckCopy",
    "FixtureEntry",
    "MaterializedEntry",
    "apply_deck_copy",
    "discover_entries",
    "materialize",
    "read_deck_copy",
    "tar_tree",
]
