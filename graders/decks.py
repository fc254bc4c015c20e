"""Registered decks on disk: a content-addressed, hash-verified copy in the data directory.

`kaudit deck import DIR --name N [--harness DIR]` copies the deck files of every problem folder
(and, with --harness, the whole harness library the deck's check.py/benchmark.py import, e.g. a
KernelBench-Hard checkout's `src/`) into

    <data_dir>/decks/store/<content_sha256>/MANIFEST.json
    <data_dir>/decks/store/<content_sha256>/problems/<problem>/<deck file>
    <data_dir>/decks/store/<content_sha256>/<harness name>/...      (e.g. src/eval/correctness.py)
    <data_dir>/decks/names/<name>.json                               -> {"content_sha256": ...}

The layout is the benchmark's own (a problem's check.py finds its harness two folders up), so the
deck's trusted check.py/benchmark.py run from the copy unchanged. An operator trusts the copy,
not the folder it was imported from: the source may change or vanish after import, the copy is
written once (files read-only), and every use re-hashes each file against the manifest and the
manifest against the content hash that names its folder (`DeckTampered` otherwise).

Standard library only: the graders process resolves decks without the service's database.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

HARNESS_PREFIX = "@harness"
_SKIP_DIRS = {"__pycache__", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
_SKIP_SUFFIXES = (".pyc", ".pyo")
MAX_HARNESS_FILES = 2000
MAX_HARNESS_BYTES = 64 << 20


class DeckTampered(RuntimeError):
    """A materialized deck's files no longer match the hashes it was registered with."""


class DeckNotFound(FileNotFoundError):
    """No deck of that name is registered in the data directory."""


@dataclass(frozen=True)
class DeckLocation:
    """A verified materialized deck: `root` holds the problem folders, `harness` the library."""

    name: str
    content_sha256: str
    root: Path
    harness: Path | None
    harness_name: str | None
    problems: tuple[str, ...] = field(default_factory=tuple)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def content_hash(problems: Mapping[str, Mapping[str, str]], harness: Mapping[str, str] | None = None,
                 harness_name: str | None = None) -> str:
    """The deck's identity: sha256 over sorted `problem/path<TAB>sha256` lines, then the harness's
    `@harness/<name>/path<TAB>sha256` lines (none for a deck without a harness, so decks registered
    before harnesses existed keep their hash)."""
    h = hashlib.sha256()
    for problem in sorted(problems):
        for path, sha in sorted(problems[problem].items()):
            h.update(f"{problem}/{path}\t{sha}\n".encode())
    if harness:
        for path, sha in sorted(harness.items()):
            h.update(f"{HARNESS_PREFIX}/{harness_name or 'src'}/{path}\t{sha}\n".encode())
    return h.hexdigest()


def scan_harness(path: Path) -> dict[str, str]:
    """Every regular file under a harness folder (relative posix path -> sha256); bytecode,
    caches and symlinks are left out (a symlink could point anywhere at grading time)."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"harness folder {path} does not exist")
    out: dict[str, str] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(path, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not (Path(dirpath) / d).is_symlink())
        for fn in sorted(filenames):
            p = Path(dirpath) / fn
            if fn.endswith(_SKIP_SUFFIXES) or p.is_symlink() or not p.is_file():
                continue
            total += p.stat().st_size
            out[p.relative_to(path).as_posix()] = sha256_file(p)
            if len(out) > MAX_HARNESS_FILES or total > MAX_HARNESS_BYTES:
                raise ValueError(f"harness folder {path} is too large (over {MAX_HARNESS_FILES} files or "
                                 f"{MAX_HARNESS_BYTES >> 20} MiB): point --harness at the library itself")
    if not out:
        raise FileNotFoundError(f"harness folder {path} holds no files")
    return out


def default_data_dir() -> Path:
    return Path(os.environ.get("KAUDIT_DATA_DIR") or "./data").expanduser().absolute()


def _decks_dir(data_dir: Path | None) -> Path:
    return Path(data_dir if data_dir is not None else default_data_dir()) / "decks"


def materialize(
    name: str,
    source_root: Path,
    problems: Mapping[str, Mapping[str, str]],
    *,
    harness_dir: Path | None = None,
    harness: Mapping[str, str] | None = None,
    data_dir: Path | None = None,
    source: str = "imported",
) -> DeckLocation:
    """Copy the deck (and harness) into the content-addressed store and point `name` at it.

    Each copied file is re-hashed after the copy; a source that changed while being copied is
    refused (nothing half-stored: the store folder appears by one rename, or not at all).
    """
    harness = dict(harness or {})
    harness_name = Path(harness_dir).name if harness_dir is not None and harness else None
    digest = content_hash(problems, harness, harness_name)
    decks = _decks_dir(data_dir)
    store = decks / "store"
    final = store / digest
    store.mkdir(parents=True, exist_ok=True)
    if not final.is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=store))
        try:
            for problem, files in sorted(problems.items()):
                for path, sha in sorted(files.items()):
                    _copy_verified(Path(source_root) / problem / path, tmp / "problems" / problem / path, sha)
            if harness_name is not None and harness_dir is not None:
                for path, sha in sorted(harness.items()):
                    _copy_verified(Path(harness_dir) / path, tmp / harness_name / path, sha)
            manifest = {
                "name": name, "content_sha256": digest, "source": source, "source_path": str(source_root),
                "harness_name": harness_name, "harness_source_path": str(harness_dir) if harness_dir else None,
                "problems": {p: dict(sorted(f.items())) for p, f in sorted(problems.items())},
                "harness": dict(sorted(harness.items())),
            }
            (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
            os.chmod(tmp / "MANIFEST.json", 0o444)
            try:
                os.rename(tmp, final)
            except OSError:
                if not final.is_dir():  # another importer did not win the race: a real error
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _write_name(decks, name, digest)
    return verify(final, name=name)


def _copy_verified(src: Path, dst: Path, sha: str) -> None:
    if src.is_symlink() or not src.is_file():
        raise FileNotFoundError(f"{src}: not a regular file")
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    got = sha256_file(dst)
    if got != sha:
        raise DeckTampered(f"{src} changed while the deck was imported (sha256 {got[:12]} != {sha[:12]})")
    os.chmod(dst, 0o444)


def _write_name(decks: Path, name: str, digest: str) -> None:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"bad deck name {name!r}")
    names = decks / "names"
    names.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=names)
    with os.fdopen(fd, "w") as f:
        json.dump({"name": name, "content_sha256": digest}, f)
    os.replace(tmp, names / f"{name}.json")


def verify(store_dir: Path, *, name: str | None = None) -> DeckLocation:
    """Re-hash a materialized deck against its manifest and the manifest against its folder name."""
    store_dir = Path(store_dir)
    try:
        manifest = json.loads((store_dir / "MANIFEST.json").read_text())
    except (OSError, ValueError) as exc:
        raise DeckTampered(f"{store_dir}: unreadable MANIFEST.json: {exc}") from None
    problems = {str(p): {str(k): str(v) for k, v in f.items()} for p, f in (manifest.get("problems") or {}).items()}
    harness = {str(k): str(v) for k, v in (manifest.get("harness") or {}).items()}
    harness_name = manifest.get("harness_name")
    digest = content_hash(problems, harness, harness_name)
    if digest != store_dir.name or digest != manifest.get("content_sha256"):
        raise DeckTampered(f"{store_dir}: manifest hash {digest[:12]} does not name this folder")
    bad = [f"problems/{p}/{path}" for p, files in problems.items() for path, sha in files.items()
           if not _matches(store_dir / "problems" / p / path, sha)]
    if harness_name:
        bad += [f"{harness_name}/{path}" for path, sha in harness.items()
                if not _matches(store_dir / harness_name / path, sha)]
    if bad:
        raise DeckTampered(f"deck {manifest.get('name')!r} ({digest[:12]}): {len(bad)} file(s) differ from the "
                           f"registered hashes: {', '.join(sorted(bad)[:5])}")
    return DeckLocation(
        name=name or str(manifest.get("name")), content_sha256=digest, root=store_dir / "problems",
        harness=(store_dir / harness_name) if harness_name else None, harness_name=harness_name,
        problems=tuple(sorted(problems)),
    )


def _matches(path: Path, sha: str) -> bool:
    return path.is_file() and not path.is_symlink() and sha256_file(path) == sha


def find_deck(name: str, data_dir: Path | None = None) -> DeckLocation:
    """The verified materialized deck registered under `name` (DeckNotFound / DeckTampered)."""
    decks = _decks_dir(data_dir)
    pointer = decks / "names" / f"{name}.json"
    if "/" in name or not pointer.is_file():
        raise DeckNotFound(f"no deck {name!r} registered in {decks}")
    try:
        digest = str(json.loads(pointer.read_text())["content_sha256"])
    except (OSError, ValueError, KeyError) as exc:
        raise DeckTampered(f"{pointer}: unreadable: {exc}") from None
    if not all(c in "0123456789abcdef" for c in digest) or len(digest) != 64:
        raise DeckTampered(f"{pointer}: bad content hash {digest!r}")
    return verify(decks / "store" / digest, name=name)


def verify_problem_dir(problem_dir: Path) -> DeckLocation | None:
    """When `problem_dir` lies in a materialized deck, verify that deck (raises DeckTampered);
    None for a folder outside the store (the bundled deck, a test folder)."""
    problem_dir = Path(problem_dir).resolve()
    store_dir = problem_dir.parent.parent
    if problem_dir.parent.name != "problems" or not (store_dir / "MANIFEST.json").is_file():
        return None
    return verify(store_dir)


def registered_names(data_dir: Path | None = None) -> Iterable[str]:
    names = _decks_dir(data_dir) / "names"
    return sorted(p.stem for p in names.glob("*.json")) if names.is_dir() else []
