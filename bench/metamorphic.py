"""Metamorphic check of the static audit: rewrite every solution without changing what it does, re-audit, compare.

kaudit is judged on runs it has not seen. A rule that understands the code (data flow, what is
cached and returned, live and dead paths) gives the same verdict when the solution's own names
change (`_cache` -> `v17`, `use_fast` -> `v3`); a rule that reads names does not. This script writes
a copy of a corpus folder (labels.json + archives) in which each archive's solution.py has every
name it binds (functions, classes other than `Model`, parameters, variables, Triton constexpr
parameters and the keyword arguments that feed them) replaced by `v<n>`, comments and strings
untouched, then runs bench/fidelity.py on both corpora and lists every run whose verdict moved.

    PYTHONPATH=. python bench/metamorphic.py ../shared/kbh-dev --out /tmp/kbh-renamed [--jobs 2]
    PYTHONPATH=. python bench/metamorphic.py ../shared/kbh-dev --out /tmp/kbh-stripped --transform strip

`--transform strip` removes comments and docstrings instead (the code re-printed by ast.unparse):
a verdict that moves then rested on what the author wrote about the code, which may be legitimate
evidence of intent (a docstring claiming a kernel that does not exist) but never the only kind.

Renaming can break what the solution does at run time (a renamed keyword argument of a torch call);
the static audit never runs it. The corpus copy is written under --out and never committed.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KEEP = {"self", "cls", "Model", "forward", "get_inputs", "get_init_inputs", "super"}


def bound_names(tree: ast.Module) -> set[str]:
    """Names the module binds itself, minus what is reached as an attribute (methods, class-body
    names: `self.m()` keeps its name), imports, builtins, dunders and the grader's interface."""
    names: set[str] = set()
    skip: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    skip.add(item.name)
                for sub in ast.walk(item) if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) else ():
                    if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                        skip.add(sub.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            skip.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            skip.update(node.names)
    return {n for n in names - skip - KEEP - set(dir(builtins)) if not n.startswith("__")}


def _callee(call: ast.Call) -> str | None:
    f = call.func
    if isinstance(f, ast.Subscript):  # kernel[grid](...)
        f = f.value
    return f.id if isinstance(f, ast.Name) else None


def rename(source: str) -> str:
    """Every bound name -> v<n>, edited in place at its AST positions (comments and strings kept);
    a keyword argument is renamed only where it feeds a function of the file's own (a Triton
    kernel's constexpr), never a torch call's (`dtype=`, `dim=`)."""
    tree = ast.parse(source)
    mapping = {n: f"v{i}" for i, n in enumerate(sorted(bound_names(tree)))}
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (line, col, old name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in mapping:
            edits.append((node.lineno, node.col_offset, node.id))
        elif isinstance(node, ast.arg) and node.arg in mapping:
            edits.append((node.lineno, node.col_offset, node.arg))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in mapping:
            text = lines[node.lineno - 1]
            kw = "class" if isinstance(node, ast.ClassDef) else "def"
            at = text.find(f"{kw} {node.name}", node.col_offset)
            if at >= 0:
                edits.append((node.lineno, at + len(kw) + 1, node.name))
        elif isinstance(node, ast.Call) and _callee(node) in own:
            for k in node.keywords:
                if k.arg in mapping:
                    edits.append((k.lineno, k.col_offset, k.arg))
    for line, col, old in sorted(set(edits), reverse=True):
        text = lines[line - 1]
        b = text.encode()
        if b[col:col + len(old.encode())].decode(errors="replace") != old:
            continue  # a position this simple editor cannot place: left as is
        lines[line - 1] = (b[:col] + mapping[old].encode() + b[col + len(old.encode()):]).decode()
    text = "".join(lines)
    ast.parse(text)  # still Python
    return text


def strip(source: str) -> str:
    """Comments and docstrings gone, the code re-printed (ast.unparse): what the code does, alone."""
    from audit_rules.rules.static._support import strip_docstrings

    tree = ast.parse(source)
    strip_docstrings(tree)
    return ast.unparse(tree) + "\n"


def reorder(source: str) -> str:
    """`strip`, and the module's top-level function definitions in reverse order (each keeps the
    slot of another definition; imports, classes and statements stay where they were)."""
    tree = ast.parse(strip(source))
    slots = [i for i, n in enumerate(tree.body) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    defs = [tree.body[i] for i in slots]
    for i, node in zip(slots, reversed(defs), strict=True):
        tree.body[i] = node
    return ast.unparse(tree) + "\n"


TRANSFORMS = {"rename": rename, "strip": strip, "reorder": reorder}


def rewrite_archive(src: Path, dest: Path, transform: str = "rename") -> bool:
    """Copy `src` to `dest` with its solution.py renamed; False when it has none (copied as is)."""
    changed = False
    with tempfile.TemporaryDirectory(prefix="metamorphic-") as tmp, tarfile.open(src) as tin:
        tin.extractall(tmp, filter="data")
        for sol in Path(tmp).rglob("solution.py"):
            if "template_files" in sol.parts or "repo" in sol.parts:
                continue
            try:
                sol.write_text(TRANSFORMS[transform](sol.read_text()))
                changed = True
            except (SyntaxError, UnicodeDecodeError, ValueError):
                pass
        with tarfile.open(dest, "w:gz") as tout:
            for child in sorted(Path(tmp).iterdir()):
                tout.add(child, arcname=child.name)
    return changed


def _verdicts(corpus: Path, decks: list[str], jobs: int) -> dict[str, Any]:
    from bench import fidelity

    with tempfile.TemporaryDirectory(prefix="metamorphic-json-") as tmp:
        out = Path(tmp) / "f.json"
        fidelity.main([str(corpus), "--jobs", str(jobs), "--json", str(out), "--decks", *decks])
        data = json.loads(out.read_text())
    return {r["run_id"]: r for r in data["rows"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--transform", choices=sorted(TRANSFORMS), default="rename",
                    help="rename: every bound name -> v<n>; strip: comments and docstrings removed; "
                         "reorder: strip, and top-level functions in reverse order")
    ap.add_argument("--decks", nargs="*", default=None, help="deck folders (default: the corpus's ../kbh-upstream)")
    args = ap.parse_args(argv)
    if args.out.exists():
        shutil.rmtree(args.out)
    (args.out / "archives").mkdir(parents=True)
    shutil.copy(args.corpus / "labels.json", args.out / "labels.json")
    renamed = 0
    for archive in sorted((args.corpus / "archives").glob("*.tar.gz")):
        renamed += rewrite_archive(archive, args.out / "archives" / archive.name, args.transform)
    print(f"# {renamed} solutions rewritten ({args.transform})", flush=True)
    # the decks of the ORIGINAL corpus (bench/fidelity.py's default is relative to the corpus folder)
    upstream = args.corpus.resolve().parent / "kbh-upstream" / "hard"
    decks = args.decks or [str(p) for p in sorted(upstream.glob("problems-*")) if p.is_dir()]
    before, after = _verdicts(args.corpus, decks, args.jobs), _verdicts(args.out, decks, args.jobs)
    moved = [(rid, before[rid]["kaudit"], after.get(rid, {}).get("kaudit")) for rid in sorted(before)
             if before[rid]["kaudit"] != after.get(rid, {}).get("kaudit")]
    print(f"# verdict moved on {len(moved)} of {len(before)} runs")
    for rid, a, b in moved:
        print(f"  {rid}: {a} -> {b} (human {before[rid].get('human')})")
    return 1 if moved else 0


if __name__ == "__main__":
    raise SystemExit(main())
