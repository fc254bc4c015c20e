"""graders.nvml: what one measurement's clock readings say, and a host without NVML."""

from __future__ import annotations

from graders.nvml import Nvml, Reading, reason_names, summarize_readings


def test_summary_takes_the_clock_median_range_and_every_slowdown_seen() -> None:
    readings = [
        Reading(sm_mhz=1980, mem_mhz=2619, power_w=690.0, temp_c=61, reasons=0x0),
        Reading(sm_mhz=1755, mem_mhz=2619, power_w=700.0, temp_c=63, reasons=0x4),  # power cap
        Reading(sm_mhz=1830, mem_mhz=2619, power_w=699.0, temp_c=64, reasons=0x1 | 0x20),  # idle + thermal
    ]
    s = summarize_readings(readings)
    assert (s.samples, s.sm_mhz_median, s.sm_mhz_min, s.sm_mhz_max) == (3, 1830, 1755, 1980)
    assert s.power_w_median == 699.0 and s.temp_c_max == 64
    # gpu_idle is not a slowdown; the power cap and the thermal one are, from whichever reading
    assert s.slowdowns == ["sw_power_cap", "sw_thermal"]
    assert abs((s.sm_range or 0) - (1980 - 1755) / 1830) < 1e-12
    assert s.line() == ("sm_mhz=1830 sm_mhz_range=1755-1980 power_w=699 temp_c_max=64 "
                        "slowdown=sw_power_cap,sw_thermal")


def test_a_steady_clock_reports_no_slowdown() -> None:
    s = summarize_readings([Reading(1980, 2619, 300.0, 40, 0x0)] * 4)
    assert s.slowdowns == [] and s.sm_range == 0.0
    assert s.line().endswith("slowdown=none")


def test_no_readings_say_unavailable() -> None:
    s = summarize_readings([])
    assert s.samples == 0 and s.sm_mhz_median is None and s.sm_range is None
    assert s.line() == "clock=unavailable"
    # readings whose calls all failed (a driver without them) carry no numbers either
    s = summarize_readings([Reading(None, None, None, None, None)])
    assert s.line() == "clock=unavailable"


def test_reason_names_decode_the_nvml_bits() -> None:
    assert reason_names(0x4 | 0x40 | 0x80) == ["sw_power_cap", "hw_thermal", "hw_power_brake"]
    assert reason_names(0) == []


def test_a_host_without_nvml_is_unavailable_and_reads_nothing() -> None:
    n = Nvml(0, None, libname="libkaudit-no-such-nvml.so.1")
    assert not n.available and n.error is not None and "not loadable" in n.error
    assert n.read() == Reading(None, None, None, None, None)
