"""Build REAL run archives from source trees (the rule-fixture harness and the regression corpus).

A source tree is a folder laid out like a KBH run folder (solution.py, scratch/, result.json,
check.log, benchmark.log, gpu_lock.log, transcript.jsonl, ...). `tar_tree` writes a real
tar.gz of it under one top-level folder (what KBH uploads), which the tests then feed to
`ingest.archive.safe_unpack`, `ingest.run.parse_run` and the audit engine.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import tarfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DECK_ROOT = REPO / "kernels" / "hard"
DEFAULT_PROBLEM = "01_fp8_gemm"
DECK_FILES = ("PROMPT.txt", "problem.yaml", "reference.py", "check.py", "benchmark.py", "shapes.py", "sota.py")
_PROBLEM_DIRECTIVE = re.compile(r"^\s*#\s*problem:\s*(\S+)")
DECK_COPY_NAME = "deck_copy.txt"  # rule-fixture declaration (tests/audit_rules/conftest.py), never archived
SKIP_NAMES = frozenset({"expect.txt", "expected.json", "__pycache__", "README.md", DECK_COPY_NAME})


def tar_tree(tree: Path, out: Path, top: str = "run", *, exclude: frozenset[str] = SKIP_NAMES) -> Path:
    """Write `tree` as a tar.gz with every file under `top/` (directories included, sorted)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:gz") as tar:
        for path in sorted(tree.rglob("*")):
            rel = path.relative_to(tree)
            if any(part in exclude for part in rel.parts) or not path.is_file():
                continue
            data = path.read_bytes()
            info = tarfile.TarInfo(f"{top}/{rel.as_posix()}")
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 1785000000
            tar.addfile(info, io.BytesIO(data))
    return out


def problem_of(solution_text: str | None) -> str:
    if solution_text:
        first = solution_text.splitlines()[0] if solution_text.splitlines() else ""
        m = _PROBLEM_DIRECTIVE.match(first)
        if m:
            return m.group(1)
    return DEFAULT_PROBLEM


def synthesized_result(problem: str, has_solution: bool, run_id: str | None = None) -> dict[str, Any]:
    """A minimal, self-consistent result.json for fixtures that do not bring their own."""
    rid = run_id or f"20260801_000000_claude_fixture-model_{problem}"
    return {
        "run_id": rid,
        "problem": problem,
        "harness": "claude",
        "model": "fixture-model",
        "reasoning_effort": "",
        "has_solution": has_solution,
        "session_complete": True,
        "correct": None,
        "failure_reason": None,
        "peak_fraction": None,
        "template_mutated": False,
    }


def add_template_files(tree: Path, problem: str) -> bool:
    """Copy the bundled deck's files of `problem` into tree/template_files/ (when it exists)."""
    src = DECK_ROOT / problem
    if not src.is_dir():
        return False
    dest = tree / "template_files"
    dest.mkdir(parents=True, exist_ok=True)
    for name in DECK_FILES:
        if (src / name).is_file():
            shutil.copyfile(src / name, dest / name)
    return True


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1) + "\n", encoding="utf-8")
