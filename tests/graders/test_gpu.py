"""The grader on a real GPU (run by scripts/gpu_lane.sh on the H200; skipped without CUDA).

Full graded shapes, all three seeds, every stress case: each reference passes its own check,
genuine examples pass and broken ones fail through run_check, each genuine example benchmarks,
the persisting-L2 reset works, and the timer agrees with triton's do_bench.
"""

from __future__ import annotations

import ctypes
import importlib.util
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from graders.correctness import run_check
from graders.logformat import parse_benchmark_log, parse_check_log
from graders.roofline import detect_sku
from graders.timing import CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE, ColdL2Timer, run_benchmark

from .conftest import HARD, REPO

pytestmark = pytest.mark.gpu

PROBLEMS = sorted(p.name for p in HARD.iterdir() if (p / "problem.yaml").is_file()) if HARD.is_dir() else []
GENUINE = sorted(HARD.glob("*/examples/genuine_*.py")) if HARD.is_dir() else []
BROKEN = sorted(HARD.glob("*/examples/broken_*.py")) if HARD.is_dir() else []


def _id(p: Path) -> str:
    return f"{p.parent.parent.name}/{p.stem}"


@pytest.fixture(autouse=True)
def _cuda_mode(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # real kernels on the GPU
    yield
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def _check(solution: Path, problem: Path, **kw: object) -> list[str]:
    lines: list[str] = []
    run_check(solution, problem, device="cuda", shapes="all", emit=lines.append, **kw)  # type: ignore[arg-type]
    print("\n".join(lines))
    return lines


@pytest.mark.parametrize("problem", PROBLEMS)
def test_reference_passes_its_own_check(problem: str) -> None:
    # The reference calls what its problem forbids (torch.topk for top-k): forbidden-op
    # enforcement is off for this self-test only.
    lines = _check(HARD / problem / "reference.py", HARD / problem, enforce_forbidden=False)
    assert parse_check_log("\n".join(lines)).passed, lines[-1]


@pytest.mark.parametrize("example", GENUINE, ids=_id)
def test_genuine_example_passes_on_cuda(example: Path) -> None:
    lines = _check(example, example.parent.parent)
    assert parse_check_log("\n".join(lines)).passed, lines[-1]
    assert not any(ln.startswith("smoke:") for ln in lines)


@pytest.mark.parametrize("example", BROKEN, ids=_id)
def test_broken_example_fails_on_cuda(example: Path) -> None:
    lines = _check(example, example.parent.parent)
    log = parse_check_log("\n".join(lines))
    assert not log.passed and log.failure is not None


@pytest.mark.timing
@pytest.mark.parametrize("example", GENUINE, ids=_id)
def test_genuine_example_benchmarks(example: Path) -> None:
    lines: list[str] = []
    out = run_benchmark(example, example.parent.parent, device="cuda", shapes="all", emit=lines.append)
    print("\n".join(lines))
    log = parse_benchmark_log("\n".join(lines))
    assert out.ok and not log.errors
    assert all(s.ms is not None and s.ms > 0 for s in log.shapes)
    if detect_sku(torch.cuda.get_device_name()) is not None:
        assert log.peak_fraction is not None and log.result in ("OK", "LOW")
        assert all(s.plausible for s in out.shapes), [s for s in out.shapes if not s.plausible]


@pytest.mark.timing
def test_persisting_l2_limit_is_forced_to_zero() -> None:
    timer = ColdL2Timer()
    lib = timer.l2.lib
    assert lib is not None, timer.l2.errors
    # A solution raising the persisting-L2 carve-out (what an evict_last/access-policy hack needs).
    rc = lib.cudaDeviceSetLimit(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(4 << 20))
    lib.cudaGetLastError()
    if rc != 0:
        pytest.skip(f"device has no persisting L2 (cudaDeviceSetLimit rc={rc})")
    assert (timer.l2.persisting_limit() or 0) > 0
    timer.prepare()
    assert timer.l2.persisting_limit() == 0
    assert timer.l2.status() == "reset", timer.l2.errors
    assert timer.flush_bytes >= 2 * (torch.cuda.get_device_properties(0).L2_cache_size or 0)


@pytest.mark.timing
def test_each_device_timed_call_is_followed_by_a_clock_reading() -> None:
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    timer = ColdL2Timer()
    assert timer.nvml.available, timer.nvml.error
    stats = timer.measure(lambda: torch.mm(a, a), warmup=3, trials=20)
    c = stats.clock
    assert c.samples == 20 and c.sm_mhz_median is not None and c.sm_mhz_median > 100
    assert c.sm_mhz_min is not None and c.sm_mhz_max is not None and c.sm_mhz_min <= c.sm_mhz_median <= c.sm_mhz_max
    assert c.power_w_median is not None and c.power_w_median > 0
    print(c.line())


@pytest.mark.timing
def test_trials_are_raised_to_fill_the_window() -> None:
    """A GEMM of tens of microseconds with a floor of 20 trials and a 200 ms window: thousands of
    device-timed calls, capped at 500 here, each followed by its clock reading; the flush is queued behind the
    hold (the default), and the same call with the flush before the hold times within 10 %."""
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    timer = ColdL2Timer()
    assert timer.flush_in_queue
    stats = timer.measure(lambda: torch.mm(a, a), warmup=3, trials=20, window_ms=200.0, max_trials=500)
    assert stats.trials == 500 and len(stats.event_ms) == 500
    assert stats.clock.samples in (0, 500)
    timer.flush_in_queue = False
    before = timer.measure(lambda: torch.mm(a, a), warmup=3, trials=20, window_ms=200.0, max_trials=500)
    assert abs(before.median_ms - stats.median_ms) / stats.median_ms < 0.10, (before.median_ms, stats.median_ms)
    print(f"flush queued {stats.median_ms:.4f} ms, flush before hold {before.median_ms:.4f} ms")


@pytest.mark.timing
def test_a_capped_clock_extends_the_window_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The timer's wiring on a real device, with the clock readings fixed so the case is certain:
    a 100 ms window whose readings say sw_power_cap goes on until it holds the capped window (400 ms
    here); the same with readings that say nothing keeps its count. Then the real readings on a
    GEMM big enough to reach the cap on an H100/H200 (8192 x 8192 x 16384 bf16: ~700 W, 1365-1440
    MHz, sw_power_cap in the lane): printed, so the lane shows what the default did there."""
    from graders import nvml

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    timer = ColdL2Timer()
    for reasons, capped in ((0x4, True), (0x0, False)):
        monkeypatch.setattr(timer, "nvml", _FixedClock(nvml.Reading(1395, 2619, 690.0, 60, reasons)))
        stats = timer.measure(lambda: torch.mm(a, a), warmup=3, trials=10, window_ms=100.0, capped_window_ms=400.0)
        held = stats.trials * stats.median_ms
        print(f"reasons={reasons:#x} trials={stats.trials} capped_extension={stats.capped_extension} held_ms={held:.1f}")
        if capped:
            assert stats.capped_extension > 0 and held >= 0.8 * 400.0, (stats.trials, stats.median_ms)
        else:
            assert stats.capped_extension == 0 and held < 0.8 * 400.0, (stats.trials, stats.median_ms)
        assert stats.clock.samples == stats.trials
        # the timed calls fill part of the phase: the per-call sync and L2 reset leave the rest idle
        assert stats.duty is not None and 0.0 < stats.duty <= 1.0, stats.duty
    monkeypatch.undo()
    big_a = torch.randn(8192, 16384, device="cuda", dtype=torch.bfloat16)
    big_b = torch.randn(16384, 8192, device="cuda", dtype=torch.bfloat16)
    real = ColdL2Timer()
    stats = real.measure(lambda: torch.mm(big_a, big_b), warmup=3, trials=10, window_ms=1000.0)
    print(f"big GEMM default: trials={stats.trials} capped_extension={stats.capped_extension} "
          f"median_ms={stats.median_ms:.4f} duty={stats.duty:.3f} {stats.clock.line()}")


@pytest.mark.timing
def test_the_busy_and_call_holds_time_like_the_sleep_on_an_uncapped_kernel() -> None:
    """KAUDIT_TIMING_HOLD=busy and =call on the device: the busy kernel or an untimed call of the
    callable stands in for the sleep (the timing stats say which hold ran; the call hold calls the
    callable twice per timed trial, the others once), and on a kernel far from the power cap (a
    2048^2 bf16 GEMM) every hold gives the sleep's figure within 5 %; figures and duties are
    printed for the lane.

    Each hold is measured from a device that has left any power cap: NVML's power figure is an
    average over about a second, so right after a capped test (the big GEMM above) the governor
    still holds the clock down (session 17's lane: 1500 MHz, sw_power_cap, on a 30 us kernel) and
    the two holds would be compared at different clocks."""
    from graders import nvml

    reader = nvml.for_torch_device()
    if not reader.available:
        pytest.skip("NVML unavailable: the cap cannot be waited out")

    def settled() -> nvml.Reading:
        deadline = time.monotonic() + 30.0
        r = reader.read()
        while (r.reasons or 0) & nvml.SLOWDOWN_MASK and time.monotonic() < deadline:
            time.sleep(0.25)
            r = reader.read()
        assert not (r.reasons or 0) & nvml.SLOWDOWN_MASK, f"still capped after 30 s idle: {r}"
        return r

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    got = {}
    for hold in ("sleep", "busy", "call"):
        before = settled()
        print(f"hold={hold} before: sm_mhz={before.sm_mhz} power_w={before.power_w}")
        timer = ColdL2Timer(hold=hold)
        calls = [0]

        def gemm(calls: list[int] = calls) -> torch.Tensor:
            calls[0] += 1
            return torch.mm(a, a)

        stats = timer.measure(gemm, warmup=5, trials=200)
        assert stats.hold_kind == hold and stats.duty is not None and 0.0 < stats.duty <= 1.0
        per_trial = 2 if hold == "call" else 1
        assert calls[0] == 5 + ColdL2Timer.ESCAPE_TRIALS + per_trial * stats.trials, (hold, calls[0], stats.trials)
        got[hold] = stats.median_ms
        print(f"hold={hold} median_ms={stats.median_ms:.5f} duty={stats.duty:.3f} hold_ms={stats.hold_ms:.4f} "
              f"uncovered={stats.uncovered} {stats.clock.line()}")
    assert abs(got["busy"] / got["sleep"] - 1.0) < 0.05, got
    assert abs(got["call"] / got["sleep"] - 1.0) < 0.05, got


class _FixedClock:
    available = True
    error = None

    def __init__(self, reading: object) -> None:
        self.reading = reading

    def read(self) -> object:
        return self.reading


@pytest.mark.timing
def test_work_escaping_to_another_stream_is_flagged() -> None:
    """A call that launches its work on a side stream and returns: events see nothing."""
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()

    def escaping() -> None:
        with torch.cuda.stream(side):
            torch.mm(a, a)

    timer = ColdL2Timer()
    stats = timer.measure(escaping, warmup=2, trials=10)
    honest = timer.measure(lambda: torch.mm(a, a), warmup=2, trials=10)
    assert stats.timing_escape, (stats.event_ms, stats.wall_ms)
    assert not honest.timing_escape
    # The reported time is the wall-based one: the escape does not make the call look faster.
    assert stats.median_ms > 0.5 * honest.median_ms


@pytest.mark.timing
def test_timer_agrees_with_do_bench() -> None:
    path = REPO / "bench" / "timing_validation.py"
    spec = importlib.util.spec_from_file_location("kaudit_timing_validation", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    report = mod.validate(repeats=5)
    for row in report["rows"]:
        print(row)
    assert report["ok"], report["rows"]


@pytest.mark.timing
def test_device_timing_hides_host_launch_latency_and_agrees_with_do_bench() -> None:
    """A ~30-60 us GEMM behind a few small launches: the host-inclusive figure (KBH's time_fn) carries
    the launch latency, the device figure does not and agrees with triton.testing.do_bench."""
    import triton.testing

    a = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2048, 4096, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(4096, device="cuda", dtype=torch.bfloat16)

    def call() -> torch.Tensor:
        y = torch.mm(a, b)
        for _ in range(4):
            y = y.add_(bias)
        return y

    timer = ColdL2Timer()
    stats = timer.measure(call, warmup=10, trials=200)
    ref = float(triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median"))
    assert not stats.timing_escape
    assert stats.uncovered <= stats.trials // 10, (stats.hold_ms, stats.host_enqueue_ms, stats.uncovered)
    assert stats.host_inclusive_ms is not None and stats.median_ms < stats.host_inclusive_ms
    assert abs(stats.median_ms - ref) / ref <= 0.03, (stats.median_ms, ref, stats.host_inclusive_ms)


@pytest.mark.timing
def test_device_timing_of_a_launch_bound_call() -> None:
    """200 tiny launches: the host-inclusive window is mostly launch latency; the hold hides it."""
    x = torch.zeros(1024, device="cuda")

    def call() -> None:
        for _ in range(200):
            x.add_(1.0)

    stats = ColdL2Timer().measure(call, warmup=5, trials=30)
    assert stats.host_inclusive_ms is not None
    assert stats.median_ms < 0.8 * stats.host_inclusive_ms, (stats.median_ms, stats.host_inclusive_ms, stats.hold_ms)


def test_inputs_are_fully_written_before_the_solution_reads_them() -> None:
    """A solution that reads its input from a pool stream without waiting on the current stream
    (a real clean paged-attention run's capture launch did): the grader hands over inputs whose
    producing work is finished, as a deck's blocking host-to-device copy does, so it reads the
    case's values, not whatever the memory held before the queued write landed."""
    from graders.correctness import _Runner, _Where

    class SideStreamCopy(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = torch.empty_like(x)
            side = torch.cuda.Stream()
            with torch.cuda.stream(side):  # no wait_stream: unordered against the caller's writes
                out.copy_(x)
            side.synchronize()
            return out

    runner = _Runner(spec=None, sol_model=SideStreamCopy, device="cuda")  # type: ignore[arg-type]
    where = _Where(shape_index=0, shape={}, seed=0, case="nominal")
    x = torch.zeros(1 << 24, device="cuda")
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # the current stream is busy well past the call...
    x.fill_(7.0)  # ...so this write is still queued when the solution is called
    out = runner.call(SideStreamCopy(), [x], where)
    assert bool((out == 7.0).all())


def test_probe_comparisons_on_the_device_equal_the_cpu_ones() -> None:
    """The probe verifier compares outputs on the GPU (graders.probes.verify.Verifier.cmp_device):
    elementwise IEEE ops and exact reductions give the CPU's numbers, bad counts and worst index."""
    from graders.probes import cases as C

    g = torch.Generator().manual_seed(7)
    ref = torch.randn(4096, 1536, generator=g).to(torch.bfloat16)
    sol = (ref.float() + 0.02 * torch.randn(4096, 1536, generator=g)).to(torch.bfloat16)
    sol[17, 3] = float("nan")
    for atol, rtol in ((0.02, 0.02), (0.0, 0.01), (1e-3, 0.0)):
        on_cpu = C.compare([sol], [ref], atol=atol, rtol=rtol)
        on_gpu = C.compare([sol.cuda()], [ref.cuda()], atol=atol, rtol=rtol)
        assert on_gpu == on_cpu, (atol, rtol, on_cpu, on_gpu)
    assert C.change_and_moved([ref], [sol], 0.02, 0.02) == C.change_and_moved([ref.cuda()], [sol.cuda()], 0.02, 0.02)
    x = torch.randn(64, 4096, generator=g)
    vals, idx = torch.topk(x, 8)
    cpu = C.compare([vals, idx], [vals, idx], atol=0.0, rtol=0.0, output_kind="topk", inputs=[x])
    gpu = C.compare([vals.cuda(), idx.cuda()], [vals.cuda(), idx.cuda()], atol=0.0, rtol=0.0, output_kind="topk",
                    inputs=[x])
    assert gpu == cpu


def test_input_rewrites_draw_on_the_device_deterministically_from_the_inputs_own_values() -> None:
    """A probe's full / row / fresh rewrite (graders.probes.cases._resample) draws on the tensor's
    device, in chunks: the same seed gives the same values (the runner and the verifier each redraw
    them), every value comes from the input's own pool, and a rewrite spanning several chunks
    differs chunk to chunk."""
    from graders.probes import cases as C

    x = torch.randn(3000, 1000, device="cuda").to(torch.bfloat16)
    pool = C._pool_of(x)
    a = C._resample(pool, x.shape, x.dtype, 1234, x.device)
    b = C._resample(pool, x.shape, x.dtype, 1234, x.device)
    c = C._resample(pool, x.shape, x.dtype, 1235, x.device)
    assert a.device.type == "cuda" and a.dtype == x.dtype and a.shape == x.shape
    assert torch.equal(a, b) and not torch.equal(a, c)
    allowed = torch.unique(pool.to("cuda").to(x.dtype).float())
    assert bool(torch.isin(a.float().reshape(-1), allowed).all())
    old = C._RESAMPLE_CHUNK
    try:
        C._RESAMPLE_CHUNK = 1 << 20  # three chunks
        d = C._resample(pool, x.shape, x.dtype, 1234, x.device).reshape(-1)
    finally:
        C._RESAMPLE_CHUNK = old
    assert not torch.equal(d[: 1 << 20], d[1 << 20: 2 << 20])
    f8 = torch.randn(512, 512, device="cuda").to(torch.float8_e4m3fn)
    g8 = C._resample(C._pool_of(f8), f8.shape, f8.dtype, 5, f8.device)
    assert g8.dtype == torch.float8_e4m3fn and torch.isfinite(g8.float()).all()
