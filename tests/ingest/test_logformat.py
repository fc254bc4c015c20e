"""check.log / benchmark.log grammar: parsers, writers, round trips, geomean."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graders.logformat import (
    FRACTION_FLOOR,
    bench_event_line,
    bench_fraction_line,
    bench_shape_line,
    check_fail_line,
    check_pass_line,
    geomean_fraction,
    parse_benchmark_log,
    parse_check_log,
    peak_fraction_line,
    property_seed_line,
    result_line,
)


def test_check_pass() -> None:
    log = parse_check_log(property_seed_line(77) + "\nframework: triton\n" + check_pass_line() + "\n")
    assert log.passed and log.pass_count == 1
    assert log.property_seed == 77
    assert log.framework_line == "framework: triton"
    assert log.failure is None and log.last_line == "PASS"


@pytest.mark.parametrize(
    "text",
    [
        "PASS\nFAIL: forbidden op used: torch._scaled_mm\n",  # PASS not last
        "PASS\nPASS\n",  # two PASS lines
        "PASS\nsome trailing warning\n",
        "",
        "pass\n",
        "PASSED\n",
    ],
)
def test_check_not_passed(text: str) -> None:
    assert not parse_check_log(text).passed


def test_check_pass_with_trailing_blank_lines() -> None:
    assert parse_check_log("warning: x\nPASS\n\n\n").passed


@pytest.mark.parametrize(
    ("kind", "fields", "expected_kind"),
    [
        ("import_error", {"error": "No module named 'ninja'"}, "import_error"),
        ("solution_import_error", {"error": "SyntaxError"}, "import_error"),
        ("forbidden_op", {"op": "torch._scaled_mm"}, "forbidden_op"),
        ("state_dict_mismatch", {"shape": 2, "detail": "missing key weight"}, "state_dict_mismatch"),
        ("property_stress", {"shape": 1, "detail": "output unchanged after in-place overwrite"}, "property_stress"),
        ("timeout", {"detail": "check exceeded 1800s"}, "other"),
    ],
)
def test_check_fail_round_trip(kind: str, fields: dict[str, object], expected_kind: str) -> None:
    line = check_fail_line(kind, **fields)
    assert line.startswith("FAIL: ")
    log = parse_check_log(f"PROPERTY_SEED: 5\n{line}\n")
    assert not log.passed
    assert log.failure is not None and log.failure.kind == expected_kind
    assert log.last_line == line
    if kind == "forbidden_op":
        assert log.failure.op == "torch._scaled_mm"
    if kind == "state_dict_mismatch":
        assert log.failure.shape == 2


def test_check_tolerance_round_trip() -> None:
    line = check_fail_line(
        "tolerance", shape=3, shape_desc=(4096, 4096, 4127), seed=123, case="large_x",
        max_abs_diff=1.5, max_rel_diff=0.25, bad=10, total=1000, worst_idx=(5, 7),
    )
    assert line == (
        "FAIL: shape 3 (4096,4096,4127) seed 123 case large_x: tolerance exceeded: "
        "max_abs_diff=1.5 max_rel_diff=0.25 bad=10/1000 worst_idx=(5,7)"
    )
    f = parse_check_log(line).failure
    assert f is not None
    assert (f.kind, f.shape, f.seed, f.case) == ("tolerance", 3, 123, "large_x")
    assert f.fields["max_abs_diff"] == "1.5" and f.fields["bad"] == "10/1000"


def test_kbh_real_fail_line() -> None:
    text = ("FAIL: shape 0 {'M': 4096, 'N': 4096, 'K': 4096} seed 42 case base: tolerance exceeded: "
            "max_abs_diff=3.2 max_rel_diff=1.1 bad=77/16777216 worst_idx=(1, 2)")
    f = parse_check_log(text).failure
    assert f is not None and f.kind == "tolerance" and f.shape == 0 and f.seed == 42 and f.case == "base"


def _bench_lines(fracs: list[float]) -> str:
    lines = []
    for i, fr in enumerate(fracs):
        lines.append(bench_event_line("variant_start", i, "solution", 1000.0 + i))
        lines.append(bench_event_line("variant_end", i, "solution", 1001.0 + i, elapsed_s=1.0, ms=0.25))
        lines.append(bench_shape_line(i, tflops=100.0 * (i + 1), gbps=50.0, ms=0.25))
        lines.append(bench_fraction_line(i, fr))
    pf = geomean_fraction(fracs)
    lines += [peak_fraction_line(pf), result_line(pf)]
    return "\n".join(lines) + "\n"


def test_benchmark_round_trip() -> None:
    fracs = [0.3306, 0.2527, 0.05]
    log = parse_benchmark_log(_bench_lines(fracs))
    assert [s.shape for s in log.shapes] == [0, 1, 2]
    assert [s.fraction for s in log.shapes] == fracs
    assert log.shapes[1].tflops == pytest.approx(200.0) and log.shapes[1].ms == pytest.approx(0.25)
    assert log.shapes[0].gbps == pytest.approx(50.0)
    assert log.peak_fraction == pytest.approx(round(geomean_fraction(fracs), 4))
    assert log.recomputed_peak_fraction() == pytest.approx(geomean_fraction(fracs))
    assert log.result == "OK"
    assert len(log.events) == 6 and log.events[1].fields["ms"] == "0.25"
    assert log.events[1].ts == "1001" and log.events[1].shape == 0
    assert log.errors == [] and log.other == []


def test_benchmark_tolerant_of_noise_and_errors() -> None:
    text = "\n".join([
        "/usr/lib/python3/warnings.py:1: UserWarning: something",
        "benchmark_event event=variant_error shape=1 variant=solution ts=5 error=CUDA_OOM",
        "Traceback (most recent call last):",
        "RuntimeError: CUDA out of memory",
        "shape=0 variant=solution tflops=1.0 gbps=2.0 ms=3.0",
        "shape=0 solution_peak_fraction=0.0010",
        "peak_fraction: 0.0010",
        "RESULT: LOW",
    ])
    log = parse_benchmark_log(text)
    assert log.result == "LOW" and log.peak_fraction == pytest.approx(0.001)
    assert len(log.errors) == 3
    assert log.other[0].startswith("/usr/lib")
    assert log.shapes[0].fraction == pytest.approx(0.001)


def test_result_line_threshold() -> None:
    assert result_line(0.1) == "RESULT: OK"
    assert result_line(0.0999) == "RESULT: LOW"


def test_geomean_floor() -> None:
    assert geomean_fraction([0.0, 1.0]) == pytest.approx(math.sqrt(FRACTION_FLOOR))
    assert geomean_fraction([-1.0]) == pytest.approx(FRACTION_FLOOR)
    assert geomean_fraction([float("nan"), 0.25]) == pytest.approx(math.sqrt(FRACTION_FLOOR * 0.25))
    assert geomean_fraction([0.25, 0.25]) == pytest.approx(0.25)
    assert geomean_fraction([]) == FRACTION_FLOOR


@given(st.lists(st.floats(min_value=1e-6, max_value=2.0), min_size=1, max_size=8))
def test_geomean_within_min_max(fracs: list[float]) -> None:
    g = geomean_fraction(fracs)
    assert min(fracs) * (1 - 1e-9) <= g <= max(fracs) * (1 + 1e-9)


@given(st.lists(st.floats(min_value=0.0001, max_value=1.5), min_size=1, max_size=6))
def test_bench_writers_round_trip_property(fracs: list[float]) -> None:
    fracs = [round(f, 4) for f in fracs]
    log = parse_benchmark_log(_bench_lines(fracs))
    assert [s.fraction for s in log.shapes] == fracs


def test_benchmark_other_variants_recorded() -> None:
    text = "\n".join([
        "shape=0 variant=reference tflops=10.0 gbps=5.0 ms=4.0",
        "shape=0 variant=sota tflops=400.0 gbps=100.0 ms=0.1",
        bench_shape_line(0, tflops=200.0, gbps=50.0, ms=0.2),
        "shape=0 sota_peak_fraction=0.2000",
        bench_fraction_line(0, 0.1),
    ])
    log = parse_benchmark_log(text)
    sh = log.shapes[0]
    assert sh.ms == pytest.approx(0.2) and sh.fraction == pytest.approx(0.1)
    assert sh.variants["reference"]["ms"] == pytest.approx(4.0)
    assert sh.variants["sota"] == {"tflops": 400.0, "gbps": 100.0, "ms": 0.1, "peak_fraction": 0.2}
    assert sh.variants["solution"]["peak_fraction"] == pytest.approx(0.1)
    assert log.other == []


def test_kbh_language_gate_line_is_the_framework_line() -> None:
    log = parse_check_log("cuda_language: ok framework=cuda_raw evidence=global_kernel\nPASS\n")
    assert log.passed and log.framework_line == "cuda_language: ok framework=cuda_raw evidence=global_kernel"
