"""Calls that look, to the solution, like they come from the deck's own scripts.

A real grader calls forward from `check.py` (the correctness pass) and from `benchmark.py` (the
timed calls, through the harness's timing module), with that script as `sys.argv[0]`. A
solution that sniffs its caller (`inspect.stack()` filenames, `sys.argv`, as a real run did:
"benchmark" in any frame's filename -> the fast path, else an exact one) must meet the same
callers under kaudit, or kaudit would check and time a path the real harness never takes. The
hardened check calls through `as_script("check.py")`, the hardened benchmark through
`as_script("benchmark.py")`, and the checked_vs_timed probe traces one call from each to see
whether the code path depends on who calls.

The trampoline is a two-line function compiled with the script's path as its filename: a frame
in the solution's stack then reads that path, exactly as the deck's own frames would.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_SRC = "def call_from_script(fn, args):\n    return fn(*args)\n"
_CACHE: dict[str, Callable[[Callable[..., Any], Any], Any]] = {}


def trampoline(path: str) -> Callable[[Callable[..., Any], Any], Any]:
    """`f(fn, args) -> fn(*args)`, whose frame's filename is `path`."""
    fn = _CACHE.get(path)
    if fn is None:
        ns: dict[str, Any] = {}
        exec(compile(_SRC, path, "exec"), ns)  # constant source: only the filename varies
        fn = _CACHE[path] = ns["call_from_script"]
    return fn


def script_path(problem_dir: Path | str | None, script: str) -> str:
    """The deck script's absolute path (the bare name when the deck's folder is unknown)."""
    return str(Path(problem_dir).resolve() / script) if problem_dir is not None else script


@contextlib.contextmanager
def as_script(problem_dir: Path | str | None, script: str) -> Iterator[Callable[[Callable[..., Any], Any], Any]]:
    """Inside: `sys.argv` is `[<problem_dir>/<script>]`; yields the trampoline for that path."""
    path = script_path(problem_dir, script)
    saved = sys.argv
    sys.argv = [path]
    try:
        yield trampoline(path)
    finally:
        sys.argv = saved
