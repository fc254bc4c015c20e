"""What one hardened check costs: the solution's pass (run_check, recording every graded output)
and the trusted verifier's pass (verify_recorded), timed separately, in this process.

    .venv/bin/python bench/check_cost.py PROBLEM_DIR SOLUTION [--shapes small|all] [--device cpu|cuda]

Prints one JSON line: wall seconds of each pass, the number of graded cases, the verdict of each.
The result is reported in docs/graders.md ("What a check costs") with the command that made it;
nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", type=Path)
    ap.add_argument("solution", type=Path)
    ap.add_argument("--shapes", default="small", choices=["small", "all"])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeat", type=int, default=3, help="timed repetitions (the median is reported)")
    args = ap.parse_args()
    os.environ.setdefault("TRITON_INTERPRET", "1" if args.device == "cpu" else "0")
    from graders.correctness import run_check, verify_recorded

    check_s, verify_s = [], []
    result: dict[str, object] = {}
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            outcome = run_check(args.solution, args.problem, device=args.device, shapes=args.shapes,
                                record_dir=Path(tmp), emit=lambda _line: None)
            t1 = time.perf_counter()
            ver = verify_recorded(args.problem, Path(tmp), device=args.device, shapes=args.shapes)
            t2 = time.perf_counter()
        check_s.append(t1 - t0)
        verify_s.append(t2 - t1)
        result = {"check_passed": outcome.passed, "verify_passed": ver["passed"], "cases": ver["cases"]}
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    print(json.dumps({"problem": args.problem.name, "solution": args.solution.name, "shapes": args.shapes,
                      "device": args.device, "check_s": round(med(check_s), 3), "verify_s": round(med(verify_s), 3),
                      **result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
