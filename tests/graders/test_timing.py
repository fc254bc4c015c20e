"""Timing logic on CPU: statistics, the escape cross-check, and the smoke benchmark log."""

from __future__ import annotations

from pathlib import Path

import pytest

from graders.logformat import parse_benchmark_log
from graders.nvml import ClockSummary
from graders.timing import (
    CAPPED_WINDOW_MS,
    CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE,
    MAX_TRIALS,
    SMOKE_LINE,
    SMOKE_TRIALS,
    SMOKE_WARMUP,
    L2Control,
    busy_fraction,
    capped_extra_trials,
    run_benchmark,
    summarize,
    window_trials,
)

from .conftest import DECK, SOLUTIONS


def test_cuda_limit_enum_value() -> None:
    assert CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE == 0x06


def test_summary_quantiles() -> None:
    ev = [float(i) for i in range(1, 11)]
    s = summarize(ev, [e + 0.02 for e in ev], 0.01, 2, 123, "reset")
    assert s.median_ms == pytest.approx(5.5)
    assert s.p10_ms == pytest.approx(1.9) and s.p90_ms == pytest.approx(9.1)
    assert not s.timing_escape


def test_escape_flagged_and_wall_time_reported() -> None:
    # Events see 0.1 ms, the device-wide sync 2 ms: work ran on another stream.
    s = summarize([0.1] * 5, [2.0] * 5, 0.02, 0, 0, "reset")
    assert s.timing_escape
    assert s.median_ms == pytest.approx(1.98)


def test_small_sync_overhead_is_not_an_escape() -> None:
    s = summarize([0.010] * 5, [0.035] * 5, 0.02, 0, 0, "reset")
    assert not s.timing_escape and s.median_ms == pytest.approx(0.010)


def test_l2_control_without_gpu_degrades_cleanly() -> None:
    ctl = L2Control()
    if ctl.lib is None:
        assert ctl.status() == "unavailable" and ctl.errors
        ctl.reset()  # a no-op, never raises


def test_cpu_benchmark_log_in_grammar() -> None:
    lines: list[str] = []
    out = run_benchmark(SOLUTIONS / "gemm" / "good.py", DECK / "gemm_tiny", device="cpu", shapes="small",
                        emit=lines.append, warmup=1, trials=3)
    assert out.ok and out.smoke and out.lines == lines and lines[0] == SMOKE_LINE
    log = parse_benchmark_log("\n".join(lines))
    assert [s.shape for s in log.shapes] == [0, 1]
    assert all(s.ms is not None and s.ms > 0 for s in log.shapes)
    assert [e.event for e in log.events] == ["variant_start", "variant_end"] * 2
    assert log.peak_fraction is None and log.result is None  # a smoke run has no SKU to score against
    assert not log.errors


def test_a_smoke_run_times_a_few_calls_and_says_how_many_the_deck_asks() -> None:
    # the bundled 01 deck asks 10 warm-ups and 30 trials; the CPU interpreter's run times fewer and
    # its timing line keeps the deck's count beside the count run
    root = Path(__file__).resolve().parents[2]
    deck = root / "kernels" / "hard" / "01_fp8_gemm"
    solution = root / "tests" / "regrade" / "fixtures" / "honest_torch.py"
    lines: list[str] = []
    out = run_benchmark(solution, deck, device="cpu", shapes="small", emit=lines.append)
    timing = [ln for ln in lines if ln.startswith("timing ")]
    assert out.ok and out.smoke and len(timing) == 3, lines
    assert all(f" trials={SMOKE_TRIALS} deck_trials=30 " in ln and f" warmup={SMOKE_WARMUP} " in ln for ln in timing)
    named: list[str] = []
    run_benchmark(solution, deck, device="cpu", shapes="small", emit=named.append, warmup=0, trials=7)
    assert all(" trials=7 deck_trials=7 " in ln and " warmup=0 " in ln for ln in named if ln.startswith("timing "))


def test_benchmark_error_is_a_variant_error_event() -> None:
    lines: list[str] = []
    out = run_benchmark(SOLUTIONS / "gemm" / "state_mismatch.py", DECK / "gemm_tiny", device="cpu",
                        shapes="small", emit=lines.append, warmup=0, trials=1)
    assert not out.ok
    log = parse_benchmark_log("\n".join(lines))
    assert [e.event for e in log.events].count("variant_error") == 2 and log.errors


def test_device_series_reported_and_host_inclusive_kept() -> None:
    # Host-inclusive calls see 0.09 ms (0.04 ms of it the host's launch latency); the calls queued
    # behind the GPU-side hold see the device work alone (0.05 ms): that is the reported figure.
    s = summarize([0.09] * 10, [0.11] * 10, 0.02, 2, 0, "reset", device_events=[0.05, 0.051, 0.049, 0.05],
                  hold_ms=0.1, host_enqueue_ms=0.04, uncovered=1)
    assert not s.timing_escape
    assert s.median_ms == pytest.approx(0.05) and s.trials == 4
    assert s.host_inclusive_ms == pytest.approx(0.09)
    assert s.event_ms == [0.05, 0.051, 0.049, 0.05]
    assert (s.hold_ms, s.host_enqueue_ms, s.uncovered) == (0.1, 0.04, 1)


def test_escape_overrides_the_device_series() -> None:
    # Work on a side stream: the device series (0.01 ms) saw nothing either; the sync-based host
    # series is what is reported, never the smaller device figure.
    s = summarize([0.1] * 5, [2.0] * 5, 0.02, 0, 0, "reset", device_events=[0.01] * 20)
    assert s.timing_escape and s.median_ms == pytest.approx(1.98) and s.trials == 5


def test_window_trials_fill_the_window_between_the_deck_floor_and_the_cap() -> None:
    # a 0.03 ms call: 1,000 ms of kernel time is 33,334 calls, capped at MAX_TRIALS
    assert window_trials(50, 0.03, 1000.0) == MAX_TRIALS
    # a 4 ms call: 250 calls hold the window, more than the deck's 50
    assert window_trials(50, 4.0, 1000.0) == 250
    # a 100 ms call: the deck's own count already holds more than the window
    assert window_trials(20, 100.0, 1000.0) == 20
    # a deck floor above the cap is kept: the policy only ever adds trials
    assert window_trials(5000, 0.01, 1000.0, max_trials=2000) == 5000
    # no window, or no usable estimate: the deck's count
    assert window_trials(50, 0.03, 0.0) == 50
    assert window_trials(50, float("nan"), 1000.0) == 50
    assert window_trials(50, 0.0, 1000.0) == 50


def _clock(*slowdowns: str, samples: int = 300) -> ClockSummary:
    return ClockSummary(samples=samples, sm_mhz_median=1400.0, sm_mhz_min=1365, sm_mhz_max=1440,
                        slowdowns=list(slowdowns))


def test_a_capped_clock_extends_the_window() -> None:
    # 314 calls of 3.15 ms (the H100's power-capped GEMM) hold ~1 s; capped, they go on to ~4 s
    assert capped_extra_trials(314, 3.15, _clock("sw_power_cap"), 1000.0, CAPPED_WINDOW_MS) == 1270 - 314
    assert capped_extra_trials(314, 3.15, _clock("hw_thermal"), 1000.0, 4000.0) == 1270 - 314
    # never past MAX_TRIALS in all, never negative
    assert capped_extra_trials(2000, 0.03, _clock("sw_power_cap"), 1000.0, 4000.0) == 0
    assert capped_extra_trials(1500, 0.5, _clock("sw_power_cap"), 1000.0, 4000.0, max_trials=1800) == 300
    # an uncapped clock (the copy at 1980 MHz), a clock with only non-slowdown reasons, no readings
    # (no NVML), no window (the deck's bare count) or the extension turned off: nothing added
    assert capped_extra_trials(355, 2.82, _clock(), 1000.0, 4000.0) == 0
    assert capped_extra_trials(355, 2.82, _clock("gpu_idle", "applications_clocks"), 1000.0, 4000.0) == 0
    assert capped_extra_trials(314, 3.15, _clock("sw_power_cap", samples=0), 1000.0, 4000.0) == 0
    assert capped_extra_trials(50, 3.15, _clock("sw_power_cap"), 0.0, 4000.0) == 0
    assert capped_extra_trials(314, 3.15, _clock("sw_power_cap"), 1000.0, 0.0) == 0
    assert capped_extra_trials(314, float("nan"), _clock("sw_power_cap"), 1000.0, 4000.0) == 0


def test_busy_fraction_is_the_timed_calls_share_of_the_phase() -> None:
    # session 15's GEMM: ~320 calls of 3.1 ms in a phase of ~1.1 s -> 0.90; with 1 ms of host
    # sleep after each call the same calls fill 0.70 of a longer phase
    assert busy_fraction([3.1] * 320, 1102.0) == pytest.approx(0.9002, abs=1e-4)
    assert busy_fraction([3.1] * 320, 1102.0 + 320 * 1.0) == pytest.approx(0.6976, abs=1e-4)
    # never above 1 (events and the host clock disagree by microseconds), None when nothing ran
    assert busy_fraction([2.0, 2.0], 3.99) == 1.0
    assert busy_fraction([], 10.0) is None
    assert busy_fraction([1.0], 0.0) is None
    assert busy_fraction([1.0], float("nan")) is None


def test_the_hold_kind_is_sleep_unless_busy_or_call_is_asked_and_anything_else_is_refused() -> None:
    from graders.hold import HOLD_ENV, hold_kind

    assert hold_kind({}) == "sleep" and hold_kind({HOLD_ENV: ""}) == "sleep"
    assert hold_kind({HOLD_ENV: " BUSY "}) == "busy" and hold_kind({HOLD_ENV: "sleep"}) == "sleep"
    assert hold_kind({HOLD_ENV: "call"}) == "call"
    with pytest.raises(ValueError, match="KAUDIT_TIMING_HOLD='spin'"):
        hold_kind({HOLD_ENV: "spin"})


def test_the_busy_hold_kernel_runs_its_multiply_add_chain() -> None:
    """graders.busy_hold's kernel through the Triton interpreter, in a fresh process (triton reads
    TRITON_INTERPRET when the kernel is decorated): every lane holds x_n of x <- 0.999 x + 0.001
    from x_0 = lane / 1000 + program."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import os, json; os.environ['TRITON_INTERPRET'] = '1'\n"
        "from graders.interp_fixes import apply; apply()\n"
        "import torch\n"
        "from graders.busy_hold import launch\n"
        "out = torch.zeros(2 * 32)\n"
        "launch(out, 2, 5, block=32)\n"
        "print(json.dumps(out.tolist()))\n"
    )
    root = Path(__file__).resolve().parents[2]
    res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout.strip().splitlines()[-1])
    for pid in range(2):
        for lane in (0, 7, 31):
            x = lane * 1e-3 + pid
            for _ in range(5):
                x = x * 0.999 + 0.001
            assert got[pid * 32 + lane] == pytest.approx(x, rel=1e-5), (pid, lane)


@pytest.mark.parametrize("window", [None, 500.0])
def test_cpu_benchmark_keeps_the_given_trials_and_says_the_window(window: float | None) -> None:
    # a CPU smoke run times wall clock with the count it was given, whatever window was asked for,
    # and its timing line says so
    lines: list[str] = []
    run_benchmark(SOLUTIONS / "gemm" / "good.py", DECK / "gemm_tiny", device="cpu", shapes="small",
                  emit=lines.append, warmup=1, trials=3, window_ms=window)
    timing = [ln for ln in lines if ln.startswith("timing shape=")]
    assert timing and all(" trials=3 deck_trials=3 window_ms=0 capped_extra=0 " in ln for ln in timing), timing
