"""Preflight before spending GPU time: compile a solution's Triton kernels for sm_90, on the CPU, at
every graded shape, and say how long each took (or that it never finished).

Device time is scarce and a GPU lane call that hangs in a compile is lost whole: on 2026-12-06 a
corpus case's top-k kernel (one program holding a 131,072-wide row, 64 unrolled extraction
rounds) sat at `check: shape 0` for 500 s on the H100. The same compile reproduces here, without a
GPU: Triton's NVIDIA backend (with its bundled ptxas) builds cubins for any target, so this script
makes Triton's driver report an sm_90 device, turns every launch into a compile-only warmup (an
autotuned kernel compiles every config it would time, as its first real launch would), and runs
the solution's forward on CPU tensors of each graded shape. The kernels never run: outputs are
garbage, and a forward whose Python depends on them may take another path than on the GPU. What
runs only on CUDA (a `x.is_cuda` branch, `torch.cuda.*`, a load_inline extension) is reported as
"no Triton launch seen" or as the forward's error; only the launches before it are covered.

Each (solution, shape) runs in a child process under a wall limit with a fresh Triton cache. The
solution's Python runs in that child, outside kaudit's sandbox: a lane-planning tool for the
operator's own machine, never a grading path (the grade always comes from graders.regrade).

    PYTHONPATH=. python bench/preflight_compile.py --deck-dir kernels/hard ARCHIVE_OR_SOLUTION... \
        [--problem 05_topk_bitonic] [--limit 120] [--shapes 0,2] [--json OUT.json]

An archive names its problem (result.json); a bare solution.py needs --problem.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


# ---------------------------------------------------------------------------------------------
# Child: one solution at one shape


class _Sm90Driver:
    """What Triton's launch path asks of the active driver, answered for an sm_90 device (no GPU)."""

    def __init__(self) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", 90, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target

    def get_active_torch_device(self) -> Any:
        import torch

        return torch.device("cpu")

    def is_active(self) -> bool:
        return True


def _compile_only(launches: list[dict[str, Any]]) -> None:
    """Every JIT launch becomes a warmup (compile, no run); an autotuner compiles all its configs."""
    from triton.runtime import driver
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    driver.set_active(_Sm90Driver())
    run = JITFunction.run

    def warm(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        t = time.monotonic()
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        launches.append({"kernel": self._fn_name, "seconds": round(time.monotonic() - t, 3),
                         "constexprs": {k: v for k, v in kwargs.items() if isinstance(v, (int, float, bool, str))}})
        return kernel

    def autotuned(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self.warmup(*args, **kwargs)

    JITFunction.run = warm  # type: ignore[method-assign]
    Autotuner.run = autotuned  # type: ignore[method-assign]


def child(solution: Path, problem_dir: Path, shape_index: int) -> dict[str, Any]:
    import torch

    from graders.problem import import_isolated, load_problem

    launches: list[dict[str, Any]] = []
    spec = load_problem(problem_dir)
    shape = spec.shape_list("all")[shape_index]
    spec.apply_shape(shape)
    torch.manual_seed(0)
    init = list(spec.reference.get_init_inputs())
    inputs = list(spec.reference.get_inputs())
    _compile_only(launches)
    error = None
    t = time.monotonic()
    try:
        sys.path.insert(0, str(solution.parent))
        module = import_isolated(solution, "preflight")
        model = module.Model(*init).eval()
        with torch.no_grad():
            model(*inputs)
    except Exception as exc:  # the forward's own failure on CPU tensors: reported, not fatal
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return {"shape_index": shape_index, "shape": dict(shape), "launches": launches, "error": error,
            "seconds": round(time.monotonic() - t, 2)}


# ---------------------------------------------------------------------------------------------
# Parent


def _stage(target: Path, tmp: Path, problem: str | None) -> tuple[Path, str]:
    if target.suffix == ".py":
        if not problem:
            raise SystemExit(f"{target}: a bare solution.py needs --problem")
        return target, problem
    from ingest.archive import safe_unpack
    from ingest.run import parse_run, stage_solution

    staged = safe_unpack(target, tmp / "staged")
    run = parse_run(staged, [])
    sol_dir = stage_solution(staged, tmp / "solution")
    return sol_dir / "solution.py", problem or run.problem or ""


def preflight(target: Path, deck_dir: Path, problem: str | None, limit_s: float,
              shapes: list[int] | None = None) -> list[dict[str, Any]]:
    from graders.problem import load_problem

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="preflight-") as tmp:
        solution, prob = _stage(target, Path(tmp), problem)
        spec = load_problem(deck_dir / prob)
        for si in range(len(spec.shape_list("all"))):
            if shapes is not None and si not in shapes:
                continue
            env = dict(os.environ, TRITON_CACHE_DIR=str(Path(tmp) / f"cache{si}"),
                       PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
            env.pop("TRITON_INTERPRET", None)
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(solution), str(deck_dir / prob),
                   str(si)]
            t = time.monotonic()
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit_s)
                line = next((x for x in reversed(proc.stdout.splitlines()) if x.startswith("{")), None)
                row = json.loads(line) if line else {"shape_index": si, "launches": [],
                                                     "error": f"child rc={proc.returncode}: "
                                                              f"{(proc.stderr.strip().splitlines() or [''])[-1][:200]}"}
                row["finished"] = True
            except subprocess.TimeoutExpired:
                row = {"shape_index": si, "launches": [], "error": None, "finished": False}
            row.update(target=str(target), problem=prob, wall_s=round(time.monotonic() - t, 1))
            rows.append(row)
            _print(row, limit_s)
    return rows


def _print(row: dict[str, Any], limit_s: float) -> None:
    head = f"{Path(row['target']).name[:60]:60s} {row['problem']:22s} s{row['shape_index']}"
    if not row["finished"]:
        print(f"{head}  DID NOT FINISH in {limit_s:.0f} s (a compile, or the forward's own CPU work, hangs)",
              flush=True)
        return
    kernels: dict[str, list[float]] = {}
    for launch in row["launches"]:
        kernels.setdefault(launch["kernel"], []).append(launch["seconds"])
    seen = ", ".join(f"{k.rsplit('.', 1)[-1]} x{len(v)} {sum(v):.1f}s" for k, v in kernels.items()) \
        or "no Triton launch seen"
    print(f"{head}  wall {row['wall_s']:.1f}s  {seen}{'  error: ' + row['error'] if row['error'] else ''}",
          flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        print(json.dumps(child(Path(argv[1]), Path(argv[2]), int(argv[3])), default=str))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("targets", nargs="+", type=Path, help="run archives or solution.py files")
    ap.add_argument("--deck-dir", type=Path, required=True, help="the deck's problems folder")
    ap.add_argument("--problem", default=None, help="problem id (needed for a bare solution.py)")
    ap.add_argument("--limit", type=float, default=120.0, help="wall limit of one shape (s)")
    ap.add_argument("--shapes", default=None, help="comma-separated graded shape indices (default: all)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    shapes = [int(x) for x in args.shapes.split(",")] if args.shapes else None
    rows: list[dict[str, Any]] = []
    for target in args.targets:
        rows += preflight(target, args.deck_dir, args.problem, args.limit, shapes)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, default=str))
    return 1 if any(not r["finished"] for r in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
