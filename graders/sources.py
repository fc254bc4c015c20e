"""Which files a solution is made of: solution.py plus every sidecar it loads.

Static analysis must not be a grep of one file: agents put the real code (or the forbidden call)
in a sidecar module, a `.cu` file handed to `load()`, or a header it includes. One definition of
that closure, `source_closure(files, entry)`, serves both doors: the graders' forbidden-op scan
(`collect_sources`, the solution's folder read from disk) and the audit's static model
(`audit_rules.source_model.build_submission`, an archive's files in memory). Starting from the
entry (and the ``sitecustomize.py`` / ``usercustomize.py`` beside it, which Python runs at start-up)
it follows, inside the given tree only:

- Python imports (`import x`, `from x import y`, `from . import y`, `from .. import y`,
  `importlib.import_module("x")` / `__import__` with a statically folded name), each resolved to
  the first file Python would find: the importer's folder, the entry's folder, the caller's extra
  path folders, then every folder of the tree named by a string constant
  (`sys.path.insert(0, os.path.join(HERE, "scratch"))`);
- every string constant naming a source file of the tree (`load(sources=["kernel.cu"])`,
  `spec_from_file_location("k", "k.py")`); a native file name that matches no path is matched by
  its base name (an archive may keep the file in another folder than the run did);
- `#include "x.cuh"` in C/C++/CUDA sources and in the CUDA strings of Python files.

Other files of the tree (other examples in the same folder, logs, a sibling never loaded) are NOT
part of the submission.
"""

from __future__ import annotations

import ast
import os
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from graders.pyfold import fold_str, string_bindings
from graders.runformat import NATIVE_SUFFIXES, PY_SUFFIXES, SOURCE_SUFFIXES

MAX_FILES = 200  # files in one closure
MAX_BYTES = 4 * 1024 * 1024  # per file; a larger file is not read
MAX_LISTED = 20_000  # tree entries looked at when reading a solution folder from disk
STARTUP_HOOKS = ("sitecustomize.py", "usercustomize.py")
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)
_MODULE_NAME = re.compile(r"\.*[A-Za-z_][\w.]*")


@dataclass
class _Facts:
    """What one file asks for, independent of where names resolve."""

    imports: list[tuple[str, int]] = field(default_factory=list)  # (dotted, relative level)
    strings: list[str] = field(default_factory=list)  # folded path-like string constants
    includes: list[str] = field(default_factory=list)


@dataclass
class SourceClosure:
    """The files a submission is made of and how its imports resolve."""

    entry: str
    files: list[str]  # entry first, then in discovery order (breadth first)
    search_dirs: list[str]  # folders absolute imports search after the importer's ("" = the root)
    imports: dict[str, dict[str, str]]  # importer -> {"kern" / ".kern" / "pkg.mod": file it loads}
    _names: frozenset[str] = frozenset()

    def resolve(self, importer: str, dotted: str, level: int = 0) -> str | None:
        """The file `import dotted` (with `level` leading dots) in `importer` loads, if one of the tree."""
        return _resolve_module(self._names, importer, dotted, level, self.search_dirs)


def _norm(base: str, rel: str) -> str | None:
    """`base/rel` as a tree path, or None when it leaves the tree."""
    if not rel or rel.startswith(("/", "\\")) or "\x00" in rel:
        return None
    p = posixpath.normpath(posixpath.join(base, rel.replace("\\", "/")))
    if p == "." or p == ".." or p.startswith("../") or p.startswith("/"):
        return None
    return p


def _module_candidates(base: str, parts: list[str]) -> list[str]:
    stem = posixpath.join(base, *parts)
    return [stem + ".py", posixpath.join(stem, "__init__.py")]


def _import_bases(importer: str, level: int, search_dirs: Sequence[str]) -> list[str]:
    here = posixpath.dirname(importer)
    if level > 0:
        d = here
        for _ in range(level - 1):
            if not d:
                return []
            d = posixpath.dirname(d)
        return [d]
    out: list[str] = []
    for d in (here, *search_dirs):
        if d not in out:
            out.append(d)
    return out


def _resolve_module(names: frozenset[str], importer: str, dotted: str, level: int, search_dirs: Sequence[str]) -> str | None:
    parts = [p for p in dotted.split(".") if p]
    if not parts:
        return None
    for base in _import_bases(importer, level, search_dirs):
        for cand in _module_candidates(base, parts):
            c = _norm("", cand)
            if c is not None and c in names:
                return c
    return None


def _package_files(names: frozenset[str], importer: str, dotted: str, level: int, search_dirs: Sequence[str]) -> list[str]:
    """The files `import a.b.c` runs besides a/b/c.py: the packages on the way (a/__init__.py,
    a/b/__init__.py), and the longest prefix that exists when the full name is an attribute
    (`from kern import f` asks for "kern.f": kern.py)."""
    parts = [p for p in dotted.split(".") if p]
    out: list[str] = []
    for n in range(len(parts) - 1, 0, -1):
        hit = _resolve_module(names, importer, ".".join(parts[:n]), level, search_dirs)
        if hit is not None and hit not in out:
            out.append(hit)
    return out


def _is_import_call(node: ast.Call) -> bool:
    fn = node.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
    return name in ("import_module", "__import__", "reload")


def _python_facts(text: str) -> _Facts:
    facts = _Facts()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return facts
    for node in ast.walk(tree):  # inline CUDA/C++ strings may include a header of the tree
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "include" in node.value:
            facts.includes.extend(_INCLUDE.findall(node.value))
    consts = string_bindings(tree)
    every: list[str] = []
    unfolded_import_call = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            facts.imports.extend((a.name, 0) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if base:
                facts.imports.append((base, node.level))
            facts.imports.extend(((f"{base}.{a.name}" if base else a.name), node.level) for a in node.names if a.name != "*")
        elif isinstance(node, ast.Call) and _is_import_call(node):
            name = fold_str(node.args[0], consts) if node.args else None
            if name is not None and _MODULE_NAME.fullmatch(name):
                level = len(name) - len(name.lstrip("."))
                facts.imports.append((name[level:], level))
            elif name is None:
                unfolded_import_call = True
        if isinstance(node, (ast.Constant, ast.BinOp, ast.JoinedStr, ast.Call, ast.Name)):
            s = fold_str(node, consts)
            if s is not None and 0 < len(s) <= 255 and "\n" not in s and "\x00" not in s:
                every.append(s)
    facts.strings = every
    if unfolded_import_call:
        # importlib.import_module(name) with a name we cannot fold: any module-like string of the
        # file may be that name.
        facts.imports.extend((s, 0) for s in every if _MODULE_NAME.fullmatch(s) and not s.startswith("."))
    return facts


def source_closure(
    files: Mapping[str, str], entry: str = "solution.py", path_dirs: Sequence[str] = (), max_files: int = MAX_FILES
) -> SourceClosure:
    """The submission's file closure over an in-memory tree `{relpath: text}`, from `entry`.

    `path_dirs` are tree folders on the import path besides the entry's own (the archive's
    scratch/ folder, staged beside solution.py when the run ran). A file whose text is None (the
    mapping could not read it) is not part of the closure. Pure: reads nothing but `files`.
    """
    names = frozenset(p for p in files if p.lower().endswith(SOURCE_SUFFIXES))
    dirs: set[str] = set()
    for p in names:
        d = posixpath.dirname(p)
        while d and d not in dirs:
            dirs.add(d)
            d = posixpath.dirname(d)
    natives_by_base: dict[str, str] = {}
    for p in sorted(names):
        if p.lower().endswith(NATIVE_SUFFIXES):
            natives_by_base.setdefault(posixpath.basename(p), p)
    root = posixpath.dirname(entry)
    base_dirs = [root, *(d for d in path_dirs if d != root)]
    facts: dict[str, _Facts] = {}
    texts: dict[str, str | None] = {}

    def text_of(p: str) -> str | None:
        if p not in texts:
            texts[p] = files.get(p)
        return texts[p]

    def facts_of(p: str) -> _Facts:
        if p not in facts:
            text = text_of(p) or ""
            if p.lower().endswith(PY_SUFFIXES):
                facts[p] = _python_facts(text)
            else:
                facts[p] = _Facts(includes=_INCLUDE.findall(text))
        return facts[p]

    inserted: list[str] = []
    while True:  # until the sys.path-inserted folders are stable (a later file may add one)
        search = [*base_dirs, *(d for d in inserted if d not in base_dirs)]
        order: list[str] = []
        seen: set[str] = set()
        table: dict[str, dict[str, str]] = {}
        # Python runs these by itself at start-up when they sit on the path: before the harness.
        roots = [entry] + [h for d in base_dirs for n in STARTUP_HOOKS if (h := _norm(d, n)) is not None and h in names]
        queue = [r for r in roots if r in names]
        new_dirs: list[str] = []
        while queue and len(order) < max_files:
            path = queue.pop(0)
            if path in seen:
                continue
            seen.add(path)
            if text_of(path) is None:
                continue
            order.append(path)
            here = posixpath.dirname(path)
            f = facts_of(path)
            wanted: list[str] = []
            for s in f.strings:
                for base in (here, *search):
                    cand = _norm(base, s)
                    if cand is None:
                        continue
                    if cand in dirs and cand not in inserted and cand not in new_dirs:
                        new_dirs.append(cand)
                    if cand in names:
                        wanted.append(cand)
                        break
                else:
                    if s.lower().endswith(NATIVE_SUFFIXES) and posixpath.basename(s) in natives_by_base:
                        wanted.append(natives_by_base[posixpath.basename(s)])
            for dotted, level in f.imports:
                hit = _resolve_module(names, path, dotted, level, search)
                if hit is not None:
                    table.setdefault(path, {})["." * level + dotted] = hit
                    wanted.append(hit)
                wanted.extend(_package_files(names, path, dotted, level, search))
            for inc in f.includes:
                for base in (here, *search):
                    cand = _norm(base, inc)
                    if cand is not None and cand in names:
                        wanted.append(cand)
                        break
                else:
                    if posixpath.basename(inc) in natives_by_base:
                        wanted.append(natives_by_base[posixpath.basename(inc)])
            queue.extend(w for w in wanted if w not in seen and w != path)
        if not new_dirs:
            break
        inserted.extend(new_dirs)
    search = [*base_dirs, *(d for d in inserted if d not in base_dirs)]
    return SourceClosure(entry=entry, files=order, search_dirs=search, imports=table, _names=names)


class _DiskTree(Mapping[str, str]):
    """A solution folder as `{relpath: text}`: source files only, no symlinks, nothing outside the
    root, at most MAX_LISTED entries looked at; a file is read when asked for (at most MAX_BYTES)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._paths: list[str] = []
        self._cache: dict[str, str] = {}
        self._walk(root)
        self._set = frozenset(self._paths)

    def _walk(self, root: Path) -> None:
        looked = 0
        for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
            for name in sorted(filenames):
                looked += 1
                if looked > MAX_LISTED:
                    return
                full = os.path.join(dirpath, name)
                if name.lower().endswith(SOURCE_SUFFIXES) and not os.path.islink(full):
                    self._paths.append(Path(full).relative_to(root).as_posix())

    def __getitem__(self, key: str) -> str:
        if key in self._cache:
            return self._cache[key]
        if key not in self._set:
            raise KeyError(key)
        text = _read(self.root / key)
        if text is None:
            raise KeyError(key)
        self._cache[key] = text
        return text

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __contains__(self, key: object) -> bool:
        return key in self._set


def _read(path: Path) -> str | None:
    try:
        if path.is_symlink() or path.stat().st_size > MAX_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except (ValueError, OSError):
        return False
    return True


def collect_sources(solution: Path) -> dict[str, str]:
    """solution.py and every sidecar it loads, keyed by path relative to the solution's folder."""
    solution = Path(solution).resolve()
    tree = _DiskTree(solution.parent)
    closure = source_closure(tree, solution.name)
    return {p: tree[p] for p in closure.files}


def add_loaded_modules(found: dict[str, str], root: Path, module_files: list[str]) -> list[str]:
    """Add Python files the solution actually imported at run time (sys.modules) that live in its
    folder tree but the static walk missed. Returns the relative paths added."""
    root = Path(root).resolve()
    added: list[str] = []
    for f in module_files:
        p = Path(f)
        if not p.suffix == ".py" or not _inside(p, root):
            continue
        rel = p.resolve().relative_to(root).as_posix()
        if rel in found:
            continue
        text = _read(p)
        if text is not None:
            found[rel] = text
            added.append(rel)
    return added
