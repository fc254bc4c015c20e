"""Which files a solution is made of: solution.py plus every sidecar it loads.

Static analysis must not be a grep of one file: agents put the real code (or the forbidden call)
in a sidecar module, a `.cu` file handed to `load()`, or a header it includes. Starting from
solution.py we follow, inside the solution's folder tree only:

- Python imports (`import x`, `from x import y`, `from . import y`, `importlib.import_module("x")`
  with a statically folded name), searched in the solution folder and in any folder of the tree
  named by a string constant (`sys.path.insert(0, os.path.join(HERE, "scratch"))`);
- every string constant naming a file of the tree (`load(sources=["kernel.cu"])`, `open("k.ptx")`);
- `#include "x.cuh"` in C/C++/CUDA sources.

Other files beside the solution (other examples in the same folder, logs) are NOT included: a
sibling that is never loaded is not part of the submission.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from graders.pyfold import fold_str, string_bindings
from graders.runformat import NATIVE_SUFFIXES, PY_SUFFIXES

MAX_FILES = 200
MAX_BYTES = 4 * 1024 * 1024
_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.MULTILINE)


def _read(path: Path) -> str | None:
    try:
        if path.stat().st_size > MAX_BYTES:
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


def _string_constants(tree: ast.AST) -> list[str]:
    consts = string_bindings(tree)
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.BinOp, ast.JoinedStr, ast.Call, ast.Name)):
            s = fold_str(node, consts)
            if s is not None and len(s) < 512:
                out.append(s)
    return out


def _imported_modules(tree: ast.AST, consts: list[str]) -> list[tuple[str, int]]:
    """(dotted module name, relative level) for every import the file can make."""
    mods: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods.extend((a.name, 0) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            mods.append((base, node.level))
            mods.extend(((f"{base}.{a.name}" if base else a.name), node.level) for a in node.names)
    mods.extend((s, 0) for s in consts if re.fullmatch(r"[A-Za-z_][\w.]*", s))
    return mods


def _path_like(s: str) -> bool:
    return 0 < len(s) <= 255 and "\n" not in s and "\x00" not in s


def collect_sources(solution: Path) -> dict[str, str]:
    """solution.py and every sidecar it loads, keyed by path relative to the solution's folder."""
    solution = Path(solution).resolve()
    root = solution.parent
    found: dict[str, str] = {}
    search_dirs: list[Path] = [root]
    queue: list[Path] = [solution]
    while queue and len(found) < MAX_FILES:
        path = queue.pop(0)
        rel = path.relative_to(root).as_posix()
        if rel in found:
            continue
        text = _read(path)
        if text is None:
            continue
        found[rel] = text
        here = path.parent
        candidates: list[Path] = []
        if path.suffix in PY_SUFFIXES:
            try:
                tree = ast.parse(text)
            except SyntaxError:
                continue
            consts = [c for c in _string_constants(tree) if _path_like(c)]
            for s in consts:
                # A string naming a folder of the tree widens the import search (sys.path edits).
                for base in (here, root):
                    p = base / s
                    try:
                        isdir = p.is_dir()
                    except OSError:
                        isdir = False
                    if isdir and _inside(p, root) and p.resolve() not in search_dirs:
                        search_dirs.append(p.resolve())
            for s in consts:
                if "\n" in s or len(s) > 256:
                    continue
                for base in (here, root, *search_dirs):
                    candidates.append(base / s)
            for mod, level in _imported_modules(tree, consts):
                parts = [p for p in mod.split(".") if p]
                if not parts:
                    continue
                bases = [here] if level else [here, *search_dirs]
                for base in bases:
                    for n in range(len(parts), 0, -1):
                        stem = base.joinpath(*parts[:n])
                        candidates.append(stem.with_suffix(".py"))
                        candidates.append(stem / "__init__.py")
        else:
            for inc in _INCLUDE.findall(text):
                candidates.extend([here / inc, root / inc])
        for cand in candidates:
            try:
                ok = cand.is_file() and _inside(cand, root)
            except OSError:
                ok = False
            if ok and cand.suffix in PY_SUFFIXES + NATIVE_SUFFIXES:
                resolved = cand.resolve()
                if resolved.relative_to(root).as_posix() not in found:
                    queue.append(resolved)
    return found


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
