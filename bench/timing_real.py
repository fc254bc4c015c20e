"""kaudit's hardened timer against triton.testing.do_bench on REAL solutions, at their real shapes.

bench/timing_validation.py checks the cold-L2 timer on three synthetic kernels. This does the
same on the kernels the issue is about: real runs' solution.py (from kbh-dev archives) on the
real deck they were graded with, at every shape of that deck, inputs and weights built the way
kaudit's hardened benchmark builds them (graders.timing._prepare_inputs). Per shape:

- agreement: |kaudit median - do_bench median| / do_bench median, where kaudit's median is taken
  with the deck's own trial count (num_perf_trials, the hardened bench's setting);  target <= 3%
- spread at the deck's trials: (max - min) / median of REPEATS such medians;        target <= 1%
- spread at a >= 1 s window (trials raised until each median covers a second of kernel time),
  the setting that tells power/clock drift from the timer's own noise.

Every shape is settled first (back-to-back calls until the per-call time stops moving). The
solution runs in this process, outside kaudit's sandbox: a lane measurement on the lent GPU,
never a grading path.

    PYTHONPATH=. python3 bench/timing_real.py --deck-dir DECK/problems ARCHIVE... [--json OUT.json]

Needs CUDA; never run in CI.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.timing_validation import AGREEMENT_TARGET, MIN_WINDOW_MS, SPREAD_TARGET, _settle


def _graph_rows(call: Any, timer: Any, spec: Any, torch: Any, testing: Any, kaudit_eager: float) -> dict[str, Any]:
    """do_bench and kaudit on a CUDA-graph replay of the same call: the same kernels, launched by one
    host call, so the host's enqueue of the forward is out of both windows and do_bench's queue stays
    ahead of the GPU. When do_bench on the eager call differs from kaudit, this tells the timer's
    own error (kaudit vs do_bench, both on the replay; and kaudit's eager device time against the
    replay) from do_bench's window holding the host launch gap of a forward slower to enqueue than
    its 256 MB cache clear is to run. A forward that cannot be captured (a sync inside it) is
    reported as such."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                call()
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            call()
        torch.cuda.synchronize()
        ref = float(testing.do_bench(g.replay, warmup=25, rep=200, return_mode="median"))
        mine = statistics.median(timer.measure(g.replay, warmup=spec.warmup, trials=spec.trials).median_ms
                                 for _ in range(3))
        del g
        return {"do_bench_graph_ms": ref, "kaudit_graph_ms": mine,
                "agreement_graph": abs(kaudit_eager - ref) / ref, "agreement_graph_both": abs(mine - ref) / ref}
    except Exception as exc:  # capture refused: reported, the eager figures stand alone
        torch.cuda.synchronize()
        return {"graph_error": f"{type(exc).__name__}: {exc}"[:200]}


def _one_archive(archive: Path, deck_dir: Path, repeats: int, max_window_trials: int) -> list[dict[str, Any]]:
    import torch
    import triton.testing

    from graders.problem import import_isolated, load_problem
    from graders.timing import ColdL2Timer, _prepare_inputs
    from ingest.archive import safe_unpack
    from ingest.run import parse_run, stage_solution

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="timing-real-") as tmp:
        staged = safe_unpack(archive, Path(tmp) / "staged")
        run = parse_run(staged, [])
        sol_dir = stage_solution(staged, Path(tmp) / "solution")
        problem = run.problem or ""
        spec = load_problem(deck_dir / problem)
        sys.path.insert(0, str(sol_dir))
        try:
            module = import_isolated(sol_dir / "solution.py", f"timing_real_{len(rows)}_{problem}")
        finally:
            sys.path.remove(str(sol_dir))
        timer = ColdL2Timer()
        for si, shape in enumerate(spec.shape_list("all")):
            t0 = time.monotonic()
            sol, inputs = _prepare_inputs(spec, shape, module.Model, "cuda")

            def call(sol: Any = sol, inputs: list[Any] = inputs) -> Any:
                with torch.no_grad():
                    return sol(*inputs)

            settle = _settle(call, torch)
            deck_stats = [timer.measure(call, warmup=spec.warmup, trials=spec.trials) for _ in range(repeats)]
            deck = [st.median_ms for st in deck_stats]
            host_inclusive = statistics.median(st.host_inclusive_ms or math.nan for st in deck_stats)
            per_call = float(settle["chunk_ms_last"] or 1.0)
            trials = min(max_window_trials, max(spec.trials, math.ceil(MIN_WINDOW_MS / per_call)))
            window = [timer.measure(call, warmup=spec.warmup, trials=trials).median_ms for _ in range(repeats)]
            ref = float(triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median"))
            kaudit = statistics.median(deck)
            graph = _graph_rows(call, timer, spec, torch, triton.testing, kaudit)
            row = {
                "run_id": run.run_id, "problem": problem, "shape_index": si, "shape": dict(shape),
                "kaudit_median_ms": kaudit, "kaudit_medians_ms": deck, "deck_trials": spec.trials,
                "do_bench_median_ms": ref, "agreement": abs(kaudit - ref) / ref,
                "spread_deck_trials": (max(deck) - min(deck)) / kaudit,
                "window_trials": trials, "window_medians_ms": window,
                "spread_window": (max(window) - min(window)) / statistics.median(window),
                "agreement_window": abs(statistics.median(window) - ref) / ref,
                "launch_sync_overhead_ms": timer.overhead_ms, "settle": settle,
                "host_inclusive_median_ms": host_inclusive, "hold_ms": deck_stats[0].hold_ms,
                "host_enqueue_ms": deck_stats[0].host_enqueue_ms,
                "uncovered": sum(st.uncovered for st in deck_stats),
                "escape": any(st.timing_escape for st in deck_stats),
                "seconds": round(time.monotonic() - t0, 1),
                "sm_mhz": statistics.median(st.clock.sm_mhz_median or math.nan for st in deck_stats),
                "slowdowns": sorted({r for st in deck_stats for r in st.clock.slowdowns}),
                **graph,
            }
            row["ok"] = row["agreement"] <= AGREEMENT_TARGET and row["spread_deck_trials"] <= SPREAD_TARGET
            rows.append(row)
            print(f"{run.run_id[:58]:58s} s{si} kaudit {kaudit:.4f} ms do_bench {ref:.4f} ms "
                  f"agree {100 * row['agreement']:.2f}% spread@{spec.trials} {100 * row['spread_deck_trials']:.2f}% "
                  f"spread@{trials} {100 * row['spread_window']:.2f}% host-inclusive {host_inclusive:.4f} ms "
                  f"hold {row['hold_ms']:.4f} ms uncovered {row['uncovered']} overhead {timer.overhead_ms:.4f} ms "
                  f"settled={settle['settled']} | graph: do_bench {graph.get('do_bench_graph_ms', math.nan):.4f} ms "
                  f"kaudit {graph.get('kaudit_graph_ms', math.nan):.4f} ms agree(eager kaudit) "
                  f"{100 * graph.get('agreement_graph', math.nan):.2f}% agree(graph kaudit) "
                  f"{100 * graph.get('agreement_graph_both', math.nan):.2f}% {graph.get('graph_error', '')}", flush=True)
            del sol, inputs
            torch.cuda.empty_cache()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("archives", nargs="+", type=Path)
    ap.add_argument("--deck-dir", type=Path, required=True, help="the deck's problems folder (e.g. hard/problems-h100)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--max-window-trials", type=int, default=2000)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("timing_real: needs CUDA", file=sys.stderr)
        return 2
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, str]] = []
    for a in args.archives:
        try:
            rows += _one_archive(a, args.deck_dir, args.repeats, args.max_window_trials)
        except Exception as exc:  # one solution's failure is reported, the others still measured
            errors.append({"archive": a.name, "error": f"{type(exc).__name__}: {exc}"[:400]})
            print(f"{a.name}: ERROR {errors[-1]['error']}", flush=True)
    summary = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "targets": {"agreement": AGREEMENT_TARGET, "spread": SPREAD_TARGET},
        "shapes": len(rows), "agreement_ok": sum(r["agreement"] <= AGREEMENT_TARGET for r in rows),
        "spread_deck_trials_ok": sum(r["spread_deck_trials"] <= SPREAD_TARGET for r in rows),
        "spread_window_ok": sum(r["spread_window"] <= SPREAD_TARGET for r in rows),
        "max_agreement": max((r["agreement"] for r in rows), default=None),
        "agreement_graph_ok": sum(r.get("agreement_graph", 1.0) <= AGREEMENT_TARGET for r in rows),
        "agreement_graph_both_ok": sum(r.get("agreement_graph_both", 1.0) <= AGREEMENT_TARGET for r in rows),
        "rows": rows, "errors": errors,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, default=str))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1, default=str))
    return 0 if rows and all(r["ok"] for r in rows) and not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
