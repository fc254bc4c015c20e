"""Entry points behind a deck problem's check.py / benchmark.py.

    python check.py [--solution PATH] [--device cpu|cuda] [--shapes all|small] [--log PATH]

The solution defaults to ./solution.py (the agent's workspace is the cwd, as in KBH). The problem
is the folder holding check.py: the deck copy the agent was given. kaudit's regrade never runs an
archive's check.py; it calls graders.correctness against its own registered deck.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from graders.cli import bench_main as _bench
from graders.cli import check_main as _check


def _args(argv: Sequence[str] | None, what: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=f"kaudit {what} of a solution against this problem")
    ap.add_argument("--solution", type=Path, default=Path("solution.py"))
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--shapes", choices=("all", "small"), default=None)
    ap.add_argument("--log", type=Path, default=None)
    return ap.parse_args(argv)


def check_main(problem_dir: Path, argv: Sequence[str] | None = None) -> int:
    a = _args(argv, "correctness check")
    return _check(a.solution, Path(problem_dir), device=a.device, shapes=a.shapes, log=a.log)


def bench_main(problem_dir: Path, argv: Sequence[str] | None = None) -> int:
    a = _args(argv, "benchmark")
    return _bench(a.solution, Path(problem_dir), device=a.device, shapes=a.shapes, log=a.log)
