"""Grader command line: `kaudit check` / `kaudit bench`, and `python -m graders.cli` on a bare GPU host.

    python -m graders.cli check SOLUTION.py --problem 01_fp8_gemm [--deck hard] [--device cpu|cuda]
                          [--shapes all|small] [--log check.log]
    python -m graders.cli bench SOLUTION.py --problem 01_fp8_gemm ...

The problem is a deck problem id resolved under `kernels/<deck>/`, else in the verified copy of a
deck imported into the data directory (graders.decks), or a path to a problem folder.
`--device cpu` runs Triton through its interpreter at SMALL_SHAPES: a smoke run, never
publish-grade. Exit code: check 0 only with exactly one PASS line and it is the last; bench 0
when every shape was timed; 3 (no_cuda_device) when --device cuda finds no CUDA device.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DECK = "hard"


def resolve_problem(problem: str | Path, deck: str = DEFAULT_DECK, deck_root: Path | None = None) -> Path:
    """A problem id under kernels/<deck>/ (or deck_root), or an existing problem folder path."""
    p = Path(problem)
    if p.is_dir() and (p / "problem.yaml").is_file():
        return p.resolve()
    if deck_root is not None:
        root = Path(deck_root)
    elif (REPO_ROOT / "kernels" / deck).is_dir():
        root = REPO_ROOT / "kernels" / deck
    else:
        # a deck imported with `kaudit deck import`: its verified copy in the data directory
        # (KAUDIT_DATA_DIR, default ./data); DeckTampered when a file no longer matches its hash
        from graders.decks import find_deck

        root = find_deck(deck).root
    cand = root / str(problem)
    if (cand / "problem.yaml").is_file():
        return cand.resolve()
    raise FileNotFoundError(f"problem {problem!r} not found in deck {deck!r} ({root})")


def default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def _prepare_device(device: str | None) -> str:
    dev = device or default_device()
    if not dev.startswith("cuda"):
        # Set before the solution (and so triton's @jit) is ever imported in this process.
        from graders import interp_fixes

        interp_fixes.use_interpreter()
    return dev


NO_CUDA_EXIT = 3  # `--device cuda` on a host where torch sees no CUDA device (not a correctness verdict)


def no_cuda_device(dev: str) -> bool:
    """True when a CUDA device was asked for and torch sees none."""
    if not dev.startswith("cuda"):
        return False
    try:
        import torch

        return not torch.cuda.is_available()
    except Exception:
        return True


def _refuse_no_cuda(what: str) -> int:
    sys.stderr.write(
        f"no_cuda_device: {what} asked for --device cuda, but torch sees no CUDA device on this host; "
        "nothing was graded (use --device cpu for an interpreter smoke run)\n"
    )
    return NO_CUDA_EXIT


def check_exit_code(lines: Sequence[str]) -> int:
    """0 only with exactly one `PASS` line, and it is the last line."""
    stripped = [ln.strip() for ln in lines if ln.strip()]
    ok = stripped.count("PASS") == 1 and bool(stripped) and stripped[-1] == "PASS"
    return 0 if ok else 1


def _log_emitter() -> tuple[list[str], Callable[[str], None]]:
    """Collected log lines and an emitter that also prints them.

    stdout's write/flush are bound before the solution is imported: rebinding builtins.print or
    sys.stdout cannot swallow the grader's lines.
    """
    lines: list[str] = []
    write, flush = sys.stdout.write, sys.stdout.flush

    def emit(line: str) -> None:
        lines.append(line)
        write(line + "\n")
        flush()

    return lines, emit


def check_main(
    solution: str | Path,
    problem: str | Path,
    deck: str = DEFAULT_DECK,
    device: str | None = None,
    shapes: str | None = None,
    *,
    log: Path | None = None,
    deck_root: Path | None = None,
) -> int:
    """Run kaudit's check, print check.log lines (and write them to `log`), return the exit code."""
    dev = _prepare_device(device)
    if no_cuda_device(dev):
        return _refuse_no_cuda("check")
    shape_set = shapes or ("all" if dev.startswith("cuda") else "small")
    from graders.correctness import run_check

    lines, emit = _log_emitter()

    try:
        problem_dir = resolve_problem(problem, deck, deck_root)
        run_check(Path(solution), problem_dir, device=dev, shapes=shape_set, emit=emit)
    except Exception as exc:  # a grader/deck fault: still a FAIL line, never a silent crash
        emit(f"FAIL: grader error: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}")
    if log is not None:
        Path(log).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return check_exit_code(lines)


def bench_main(
    solution: str | Path,
    problem: str | Path,
    deck: str = DEFAULT_DECK,
    device: str | None = None,
    shapes: str | None = None,
    *,
    log: Path | None = None,
    deck_root: Path | None = None,
    window_ms: float | None = None,
) -> int:
    """Run kaudit's benchmark, print benchmark.log lines, return 0 when every shape was timed.

    `window_ms`: raise each shape's trials until they hold that much kernel time (default
    graders.timing.WINDOW_MS; 0 keeps the deck's num_perf_trials)."""
    if window_ms is not None and not window_ms >= 0:  # NaN too
        print(f"benchmark_error usage: --window-ms must be a number >= 0, got {window_ms}", file=sys.stderr)
        return 2
    dev = _prepare_device(device)
    if no_cuda_device(dev):
        return _refuse_no_cuda("bench")
    shape_set = shapes or ("all" if dev.startswith("cuda") else "small")
    from graders.timing import run_benchmark

    lines, emit = _log_emitter()

    code = 1
    try:
        problem_dir = resolve_problem(problem, deck, deck_root)
        outcome = run_benchmark(Path(solution), problem_dir, device=dev, shapes=shape_set, emit=emit,
                                window_ms=window_ms)
        code = 0 if outcome.ok else 1
    except Exception as exc:
        emit(f"benchmark_error grader: {type(exc).__name__}: {' '.join(str(exc).split())[:400]}")
    if log is not None:
        Path(log).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return code


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m graders.cli", description="kaudit's own grading harness")
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("check", "bench"):
        p = sub.add_parser(name)
        p.add_argument("solution", type=Path)
        p.add_argument("--problem", required=True)
        p.add_argument("--deck", default=DEFAULT_DECK)
        p.add_argument("--deck-root", type=Path, default=None)
        p.add_argument("--device", choices=("cpu", "cuda"), default=None)
        p.add_argument("--shapes", choices=("all", "small"), default=None)
        p.add_argument("--log", type=Path, default=None)
        if name == "bench":
            p.add_argument("--window-ms", type=float, default=None,
                           help="kernel time each shape's trials must hold (default 1000; 0: the deck's trials)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "check":
        return check_main(args.solution, args.problem, args.deck, args.device, args.shapes, log=args.log,
                          deck_root=args.deck_root)
    return bench_main(args.solution, args.problem, args.deck, args.device, args.shapes, log=args.log,
                      deck_root=args.deck_root, window_ms=args.window_ms)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    raise SystemExit(main())
