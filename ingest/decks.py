"""Deck snapshots: per problem, the hashes of the canonical deck files.

A deck is a folder of `<problem>/` folders (KBH layout). Only the deck files are hashed
(PROMPT.txt, problem.yaml, reference.py, check.py, benchmark.py, shapes.py, sota.py and the
optional baseline.py): they are what template integrity compares; `examples/` and anything
else in a problem folder is not part of the contract handed to the agent.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from ingest.model import DeckSnapshot, FileHash

REQUIRED_DECK_FILES: tuple[str, ...] = (
    "PROMPT.txt",
    "problem.yaml",
    "reference.py",
    "check.py",
    "benchmark.py",
    "shapes.py",
    "sota.py",
)
OPTIONAL_DECK_FILES: tuple[str, ...] = ("baseline.py",)
DECK_FILES: tuple[str, ...] = REQUIRED_DECK_FILES + OPTIONAL_DECK_FILES


def hash_file(path: Path) -> FileHash:
    sha = hashlib.sha256()
    md5 = hashlib.md5(usedforsecurity=False)
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
            md5.update(chunk)
            size += len(chunk)
    return FileHash(sha256=sha.hexdigest(), md5=md5.hexdigest(), size=size)


def hash_bytes(data: bytes) -> FileHash:
    return FileHash(
        sha256=hashlib.sha256(data).hexdigest(),
        md5=hashlib.md5(data, usedforsecurity=False).hexdigest(),
        size=len(data),
    )


def is_problem_dir(path: Path) -> bool:
    """A folder is a problem folder when it holds at least one regular deck file."""
    if not path.is_dir() or path.is_symlink() or path.name.startswith((".", "_")):
        return False
    return any((path / n).is_file() and not (path / n).is_symlink() for n in REQUIRED_DECK_FILES)


def scan_problem_dir(path: Path) -> dict[str, FileHash]:
    out: dict[str, FileHash] = {}
    for name in DECK_FILES:
        p = path / name
        if p.is_file() and not p.is_symlink():
            out[name] = hash_file(p)
    return out


def scan_deck_dir(path: Path, name: str) -> DeckSnapshot:
    """Hash every deck file of every problem folder directly under `path`."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"deck folder {path} does not exist")
    problems: dict[str, dict[str, FileHash]] = {}
    for child in sorted(path.iterdir()):
        if is_problem_dir(child):
            problems[child.name] = scan_problem_dir(child)
    return DeckSnapshot(name=name, problems=problems, root=path.resolve())


def kernels_root() -> Path | None:
    """The on-disk folder of the bundled `kernels` package, without importing it."""
    spec = importlib.util.find_spec("kernels")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            return Path(loc)
    fallback = Path(__file__).resolve().parent.parent / "kernels"
    return fallback if fallback.is_dir() else None


def bundled_decks(root: Path | None = None) -> list[DeckSnapshot]:
    """Every `kernels/<deck>/` folder that holds problem folders (the bundled deck is `hard`)."""
    base = root if root is not None else kernels_root()
    if base is None or not base.is_dir():
        return []
    decks: list[DeckSnapshot] = []
    for child in sorted(base.iterdir()):
        if not child.is_dir() or child.name.startswith((".", "_")):
            continue
        if any(is_problem_dir(p) for p in child.iterdir()):
            decks.append(scan_deck_dir(child, child.name))
    return decks
