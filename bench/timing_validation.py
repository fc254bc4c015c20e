"""Validate kaudit's cold-L2 timer against triton.testing.do_bench (cold cache), on a CUDA GPU.

For three kernels (a cuBLAS bf16 GEMM, a bandwidth-bound 4 GiB copy, a Triton axpy) this measures:
- agreement: |kaudit median - do_bench median| / do_bench median   (target <= 3%)
- run-to-run spread of kaudit's median over REPEATS runs: (max - min) / median   (target <= 1%)

The kernels are sized to run for 2-3 ms: kaudit synchronizes the whole device before every call
(the contract), so its events include the host launch latency (~10-30 us from Python) that
do_bench hides by queueing calls back to back; at a few ms that difference stays under 1%. For
a 50 us kernel the same latency is a real part of what kaudit reports (and of what the solution's
caller would see): the lane prints the measured launch/sync floor next to the figures.

    PYTHONPATH=. python3 bench/timing_validation.py [--json OUT.json] [--repeats 5]

Exit code 0 when every kernel meets both targets. Needs CUDA; never run in CI.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

AGREEMENT_TARGET = 0.03
SPREAD_TARGET = 0.01


def _kernels() -> dict[str, Callable[[], Any]]:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _axpy(x_ptr, y_ptr, o_ptr, a, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(o_ptr + offs, a * x + y, mask=mask)

    torch.manual_seed(2026)
    dev = "cuda"
    a = torch.randn(8192, 16384, device=dev, dtype=torch.bfloat16)
    b = torch.randn(16384, 8192, device=dev, dtype=torch.bfloat16)
    src = torch.empty(1 << 30, device=dev, dtype=torch.float32).normal_()  # 4 GiB
    dst = torch.empty_like(src)
    n = 1 << 30  # 4 GiB per operand: offsets stay below 2**31
    x = torch.randn(n, device=dev)
    y = torch.randn(n, device=dev)
    o = torch.empty_like(x)

    def gemm() -> Any:
        return torch.mm(a, b)

    def copy() -> Any:
        return dst.copy_(src)

    def axpy() -> Any:
        grid = (triton.cdiv(n, 4096),)
        _axpy[grid](x, y, o, 2.0, n, BLOCK=4096)
        return o

    return {"cublas_bf16_gemm_8192x8192x16384": gemm, "copy_4GiB": copy, "triton_axpy_2^30": axpy}


SETTLE_MIN_S = 3.0
SETTLE_MAX_S = 25.0
SETTLE_CHUNK_S = 0.5
SETTLE_TOL = 0.005


def _settle(fn: Callable[[], Any], torch: Any) -> dict[str, Any]:
    """Run `fn` back to back until its per-call time stops moving (clocks at steady state).

    On 2026-12-02 the H200 lane saw the compute-bound GEMM's medians climb 3.04 -> 3.26 ms over
    five repeats (power/clock drift under sustained load): a fixed settle is a guess, so this runs
    chunks of SETTLE_CHUNK_S and stops once the last three chunks' mean call times lie within
    SETTLE_TOL of each other (at least SETTLE_MIN_S, at most SETTLE_MAX_S). The trace is returned
    for the report: a kernel that never settles says so instead of hiding it in the spread.
    """
    import time

    fn()
    torch.cuda.synchronize()
    trace: list[float] = []
    t0 = time.perf_counter()
    settled = False
    while time.perf_counter() - t0 < SETTLE_MAX_S:
        c0, n = time.perf_counter(), 0
        while time.perf_counter() - c0 < SETTLE_CHUNK_S:
            for _ in range(10):
                fn()
            n += 10
            torch.cuda.synchronize()
        trace.append(1e3 * (time.perf_counter() - c0) / n)
        last = trace[-3:]
        if len(last) == 3 and time.perf_counter() - t0 >= SETTLE_MIN_S and (max(last) - min(last)) / min(last) <= SETTLE_TOL:
            settled = True
            break
    return {"settled": settled, "seconds": round(time.perf_counter() - t0, 2),
            "chunk_ms_first": trace[0] if trace else None, "chunk_ms_last": trace[-1] if trace else None,
            "chunks": len(trace)}


# Each repeat's median covers at least this much kernel time. On 2026-12-02 (second lane call) the
# settled cuBLAS GEMM still gave repeat medians of 3.15-3.34 ms at 30 trials (~0.1 s of kernel
# time each): a power-capped GEMM's clock swings over a period longer than such a window, so a
# 30-trial median samples one phase of it. Over >= 1 s the swing averages out.
MIN_WINDOW_MS = 1000.0


def validate(repeats: int = 5, warmup: int = 10, min_trials: int = 30, min_window_ms: float = MIN_WINDOW_MS,
             only: str | None = None, capped_window_ms: float | None = None,
             do_bench_rep_ms: float | None = None, holds: tuple[str, ...] = ()) -> dict[str, Any]:
    """Per kernel, `repeats` rounds, each: kaudit's timer as it grades (window `min_window_ms`, raised to
    `capped_window_ms` when the clock is capped: graders.timing.capped_extra_trials), the same
    without the capped extension, and triton.testing.do_bench with `rep` = the kernel time kaudit's
    window held (or `do_bench_rep_ms`). Interleaved, so all three see the same clock and power history;
    agreement is kaudit's median of medians against do_bench's, each series' spread is reported.
    `holds` names more GPU-side holds (graders.hold) timed the same way in the same rounds, right
    after the default timer's, each with its own agreement and spread (`rows[i]["holds"]`)."""
    import torch
    import triton.testing

    from graders.timing import CAPPED_WINDOW_MS, ColdL2Timer

    capped = CAPPED_WINDOW_MS if capped_window_ms is None else capped_window_ms
    timer = ColdL2Timer()
    others = {h: ColdL2Timer(hold=h) for h in holds if h != timer.hold_kind}
    rows: list[dict[str, Any]] = []
    for name, fn in _kernels().items():
        if only and only not in name:
            continue
        settle = _settle(fn, torch)
        per_call = float(settle["chunk_ms_last"] or 1.0)
        trials = max(min_trials, math.ceil(min_window_ms / per_call))
        stats, plain, refs, after = [], [], [], []
        other_stats: dict[str, list[Any]] = {h: [] for h in others}
        for _ in range(repeats):
            st = timer.measure(fn, warmup=warmup, trials=trials, window_ms=min_window_ms, capped_window_ms=capped)
            stats.append(st)
            for h, t in others.items():
                other_stats[h].append(t.measure(fn, warmup=warmup, trials=trials, window_ms=min_window_ms,
                                                capped_window_ms=capped))
            plain.append(timer.measure(fn, warmup=warmup, trials=trials, window_ms=min_window_ms, capped_window_ms=0.0))
            rep = do_bench_rep_ms if do_bench_rep_ms is not None else st.trials * st.median_ms
            refs.append(float(triton.testing.do_bench(fn, warmup=25, rep=max(100, int(rep)), return_mode="median")))
            a = timer.nvml.read() if timer.nvml.available else None  # do_bench's clock as it ends
            after.append(a.sm_mhz if a is not None else None)
        medians = [st.median_ms for st in stats]
        plain_medians = [st.median_ms for st in plain]
        kaudit = statistics.median(medians)
        ref = statistics.median(refs)
        agreement = abs(kaudit - ref) / ref
        spread = _spread(medians)
        clocks = [st.clock.sm_mhz_median for st in stats]
        # time x clock: what a repeat's median would be in SM cycles; flat when the time moved only
        # because the clock did (a diagnosis of the spread, never a reported figure)
        cycles = [m * c for m, c in zip(medians, clocks, strict=True) if c]
        rows.append({
            "kernel": name,
            "kaudit_median_ms": kaudit,
            "kaudit_medians_ms": medians,
            "trials_per_repeat": [st.trials for st in stats],
            "capped_extension_per_repeat": [st.capped_extension for st in stats],
            "do_bench_median_ms": ref,
            "do_bench_medians_ms": refs,
            "do_bench_spread": _spread(refs),
            "agreement": agreement,
            "spread": spread,
            "uncapped_window": {"trials": trials, "medians_ms": plain_medians, "spread": _spread(plain_medians),
                                "agreement": abs(statistics.median(plain_medians) - ref) / ref,
                                "sm_mhz": [st.clock.sm_mhz_median for st in plain]},
            "settle": settle,
            "repeat_sm_mhz": clocks,
            "repeat_sm_mhz_range": [[st.clock.sm_mhz_min, st.clock.sm_mhz_max] for st in stats],
            "repeat_power_w": [st.clock.power_w_median for st in stats],
            "repeat_slowdowns": [st.clock.slowdowns for st in stats],
            "do_bench_sm_mhz_after": after,
            "cycle_spread": _spread(cycles) if len(cycles) == len(medians) else None,
            "holds": {h: _series(sts, ref) for h, sts in other_stats.items()},
            "ok": agreement <= AGREEMENT_TARGET and spread <= SPREAD_TARGET,
        })
    return {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "l2_flush_bytes": timer.flush_bytes,
        "l2_persisting": timer.l2.status(),
        "launch_sync_overhead_ms": timer.overhead_ms,
        "targets": {"agreement": AGREEMENT_TARGET, "spread": SPREAD_TARGET},
        "min_window_ms": min_window_ms,
        "capped_window_ms": capped,
        "rows": rows,
        "ok": all(r["ok"] for r in rows),
    }


def _series(stats: list[Any], ref: float) -> dict[str, Any]:
    """One hold's repeats: medians, agreement with do_bench's median of medians, spread, clocks."""
    medians = [st.median_ms for st in stats]
    agreement = abs(statistics.median(medians) - ref) / ref
    spread = _spread(medians)
    return {"medians_ms": medians, "median_ms": statistics.median(medians), "agreement": agreement,
            "spread": spread, "trials": [st.trials for st in stats],
            "capped_extension": [st.capped_extension for st in stats],
            "sm_mhz": [st.clock.sm_mhz_median for st in stats],
            "power_w": [st.clock.power_w_median for st in stats],
            "duty": [st.duty for st in stats],
            "ok": agreement <= AGREEMENT_TARGET and spread <= SPREAD_TARGET}


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--window-ms", type=float, default=MIN_WINDOW_MS, help="kernel time each repeat's median covers")
    ap.add_argument("--capped-window-ms", type=float, default=None,
                    help="window once the clock is capped (default graders.timing.CAPPED_WINDOW_MS; 0 = off)")
    ap.add_argument("--do-bench-rep-ms", type=float, default=None,
                    help="do_bench's rep (default: the kernel time kaudit's window held that round)")
    ap.add_argument("--only", default=None, help="only kernels whose name contains this")
    ap.add_argument("--holds", default="", help="more GPU-side holds to time beside the default, comma-separated "
                                                "(graders.hold.HOLD_KINDS, e.g. call,busy)")
    args = ap.parse_args(argv)
    holds = tuple(h.strip() for h in args.holds.split(",") if h.strip())
    report = validate(repeats=args.repeats, min_window_ms=args.window_ms, only=args.only,
                      capped_window_ms=args.capped_window_ms, do_bench_rep_ms=args.do_bench_rep_ms, holds=holds)
    print(f"timing_validation gpu={report['gpu']!r} l2_flush_bytes={report['l2_flush_bytes']} "
          f"persisting={report['l2_persisting']} overhead_ms={report['launch_sync_overhead_ms']:.4f}")
    for r in report["rows"]:
        print(f"timing_validation kernel={r['kernel']} kaudit_ms={r['kaudit_median_ms']:.4f} "
              f"do_bench_ms={r['do_bench_median_ms']:.4f} agreement={100 * r['agreement']:.2f}% "
              f"spread={100 * r['spread']:.2f}% {'OK' if r['ok'] else 'MISS'} settle={r['settle']} "
              f"trials={r['trials_per_repeat']} capped_extra={r['capped_extension_per_repeat']} "
              f"medians={[round(m, 4) for m in r['kaudit_medians_ms']]} "
              f"do_bench={[round(m, 4) for m in r['do_bench_medians_ms']]} "
              f"do_bench_spread={100 * r['do_bench_spread']:.2f}% "
              f"uncapped: trials={r['uncapped_window']['trials']} "
              f"medians={[round(m, 4) for m in r['uncapped_window']['medians_ms']]} "
              f"spread={100 * r['uncapped_window']['spread']:.2f}% "
              f"agreement={100 * r['uncapped_window']['agreement']:.2f}% sm_mhz={r['uncapped_window']['sm_mhz']} "
              f"sm_mhz={r['repeat_sm_mhz']} power_w={r['repeat_power_w']} slowdowns={r['repeat_slowdowns']} "
              f"cycle_spread={r['cycle_spread']} do_bench_sm_mhz_after={r['do_bench_sm_mhz_after']}")
        for h, ser in r["holds"].items():
            print(f"timing_validation kernel={r['kernel']} hold={h} kaudit_ms={ser['median_ms']:.4f} "
                  f"agreement={100 * ser['agreement']:.2f}% spread={100 * ser['spread']:.2f}% "
                  f"{'OK' if ser['ok'] else 'MISS'} medians={[round(m, 4) for m in ser['medians_ms']]} "
                  f"trials={ser['trials']} capped_extra={ser['capped_extension']} sm_mhz={ser['sm_mhz']} "
                  f"power_w={ser['power_w']} duty={ser['duty']}")
    print(f"timing_validation result={'OK' if report['ok'] else 'MISS'}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
