"""Does the idle time between kaudit's timed calls move a power-capped kernel's time?

Session 15 measured the validation GEMM (cuBLAS bf16 8192 x 8192 x 16384, under `sw_power_cap`)
about 1.8 % faster and less steady with kaudit's timer than with triton.testing.do_bench, which
keeps the queue full. kaudit synchronizes after every timed call, resets the persisting L2 and
reads the clock through NVML between calls, and queues a GPU-side hold before each: the GPU sits
near idle for part of every period, and under a power cap the governor answers the average power.
This interleaves, per repeat, on the same kernel:

- `kaudit`: ColdL2Timer.measure as the hardened benchmark runs it (1 s window, no capped extension);
- `kaudit_no_nvml`: the same without the per-call NVML reading (less idle time per call);
- `kaudit_busy_hold`: the same with the GPU-side hold (`torch.cuda._sleep`, one spinning thread)
  replaced by graders.busy_hold (`KAUDIT_TIMING_HOLD=busy`): a kernel of the same length that keeps
  every SM doing arithmetic (no memory traffic beyond one small store), so the hold draws power as
  a kernel does;
- `kaudit_gap_1ms`: the same with 1 ms of host sleep after every call (more idle time per call);
- `do_bench`: triton.testing.do_bench at the same kernel time (`rep`), cache cleared per call.

and reports each series' median, spread and the fraction of wall time the timed calls held the
GPU (`duty`). If more idle time per call gives a faster, less steady figure, the gap is the cause.

    PYTHONPATH=. python3 bench/timing_gap.py [--repeats 5] [--json OUT.json]

Needs CUDA; a lane measurement, never run in CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.timing_validation import _settle, _spread


class _NoReadings:
    available = False


def _series(timer: Any, fn: Any, variant: str, window_ms: float) -> tuple[float, float]:
    """(median ms, duty) of one measure() of `fn` under `variant` (`timer` already has its hold)."""
    saved_nvml, saved_time_device = timer.nvml, timer.time_device
    if variant == "kaudit_no_nvml":
        timer.nvml = _NoReadings()
    elif variant == "kaudit_gap_1ms":
        def gapped(f: Any, hold: float) -> tuple[float, float]:
            out = saved_time_device(f, hold)
            time.sleep(0.001)
            return out
        timer.time_device = gapped
    try:
        st = timer.measure(fn, warmup=5, trials=30, window_ms=window_ms, capped_window_ms=0)
    finally:
        timer.nvml, timer.time_device = saved_nvml, saved_time_device
    # the timing line's duty (the device-timed phase); session 15's call 5 took the whole measure()
    # call, warm-ups and the host-inclusive calls included (0.899 there for the plain series)
    return st.median_ms, st.duty if st.duty is not None else float("nan")


def run(repeats: int, window_ms: float) -> dict[str, Any]:
    import torch
    import triton.testing

    from graders.timing import ColdL2Timer

    a = torch.randn(8192, 16384, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16)

    def fn() -> Any:
        return a @ b

    settle = _settle(fn, torch)
    timer = ColdL2Timer(hold="sleep")
    busy_timer = ColdL2Timer(hold="busy")  # graders.busy_hold, as KAUDIT_TIMING_HOLD=busy gives it
    names = ("kaudit", "kaudit_busy_hold", "kaudit_no_nvml", "kaudit_gap_1ms", "do_bench")
    medians: dict[str, list[float]] = {n: [] for n in names}
    duty: dict[str, list[float]] = {n: [] for n in names}
    clocks: list[Any] = []
    for _ in range(repeats):
        for name in names:
            if name == "do_bench":
                t0 = time.perf_counter()
                ms = float(triton.testing.do_bench(fn, warmup=25, rep=int(window_ms), return_mode="median"))
                wall = (time.perf_counter() - t0) * 1e3
                medians[name].append(ms)
                duty[name].append(min(1.0, window_ms / wall))
            else:
                ms, d = _series(busy_timer if name == "kaudit_busy_hold" else timer, fn, name, window_ms)
                medians[name].append(ms)
                duty[name].append(d)
        if timer.nvml.available:
            r = timer.nvml.read()
            clocks.append(getattr(r, "sm_mhz", None))
    ref = statistics.median(medians["do_bench"])
    return {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "settle": settle,
        "window_ms": window_ms, "sm_mhz_after_repeat": clocks,
        "series": {n: {"median_ms": statistics.median(medians[n]), "medians_ms": medians[n],
                       "spread": _spread(medians[n]),
                       "vs_do_bench": statistics.median(medians[n]) / ref - 1.0,
                       "duty": statistics.median(duty[n])} for n in names},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--window-ms", type=float, default=1000.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    out = run(args.repeats, args.window_ms)
    for name, s in out["series"].items():
        print(f"timing_gap {name:16s} median_ms={s['median_ms']:.4f} spread={100 * s['spread']:.2f}% "
              f"vs_do_bench={100 * s['vs_do_bench']:+.2f}% duty={s['duty']:.3f} "
              f"medians={[round(m, 4) for m in s['medians_ms']]}")
    print(f"timing_gap gpu={out['gpu']!r} sm_mhz_after_repeat={out['sm_mhz_after_repeat']} settle={out['settle']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
