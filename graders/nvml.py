"""The GPU's clocks, power and clock-event reasons through NVML (ctypes; no pynvml needed).

The timer reads them after each timed call (outside the timed window) so a benchmark record says
at what SM clock it was measured and why the clock was held down (power cap, thermal slowdown).
A kernel's time under a power cap moves with its clock; without these readings a run-to-run
difference cannot be told apart from the timer's own noise. kaudit only reads: it never sets
clocks, power limits or application clocks (the lent machines forbid it, and so would any
operator sharing a card).

Everything here degrades to "unavailable" (no libnvidia-ml, no device, a driver without a call):
timing goes on without the readings and the record says so.
"""

from __future__ import annotations

import ctypes
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_TEMPERATURE_GPU = 0

# nvmlClocksEventReasons (nvml.h); GpuIdle and the application/display settings are not slowdowns.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


@dataclass(frozen=True)
class Reading:
    sm_mhz: int | None
    mem_mhz: int | None
    power_w: float | None
    temp_c: int | None
    reasons: int | None


@dataclass
class ClockSummary:
    """What the readings of one measurement say: the SM clock's median and range, the power, and
    every slowdown reason seen in any reading."""

    samples: int = 0
    sm_mhz_median: float | None = None
    sm_mhz_min: int | None = None
    sm_mhz_max: int | None = None
    power_w_median: float | None = None
    temp_c_max: int | None = None
    slowdowns: list[str] = field(default_factory=list)

    @property
    def sm_range(self) -> float | None:
        """(max - min) / median of the SM clock over the measurement."""
        if self.sm_mhz_median is None or self.sm_mhz_min is None or self.sm_mhz_max is None:
            return None
        return (self.sm_mhz_max - self.sm_mhz_min) / self.sm_mhz_median if self.sm_mhz_median else None

    def line(self) -> str:
        if not self.samples or self.sm_mhz_median is None:
            return "clock=unavailable"
        parts = [f"sm_mhz={self.sm_mhz_median:.0f}", f"sm_mhz_range={self.sm_mhz_min}-{self.sm_mhz_max}"]
        if self.power_w_median is not None:
            parts.append(f"power_w={self.power_w_median:.0f}")
        if self.temp_c_max is not None:
            parts.append(f"temp_c_max={self.temp_c_max}")
        parts.append("slowdown=" + (",".join(self.slowdowns) if self.slowdowns else "none"))
        return " ".join(parts)


def summarize_readings(readings: Sequence[Reading]) -> ClockSummary:
    sm = [r.sm_mhz for r in readings if r.sm_mhz is not None]
    pw = [r.power_w for r in readings if r.power_w is not None]
    tc = [r.temp_c for r in readings if r.temp_c is not None]
    mask = 0
    for r in readings:
        mask |= (r.reasons or 0) & SLOWDOWN_MASK
    return ClockSummary(
        samples=len(readings),
        sm_mhz_median=statistics.median(sm) if sm else None,
        sm_mhz_min=min(sm) if sm else None,
        sm_mhz_max=max(sm) if sm else None,
        power_w_median=statistics.median(pw) if pw else None,
        temp_c_max=max(tc) if tc else None,
        slowdowns=reason_names(mask),
    )


class Nvml:
    """One device's NVML handle. `available` is False when any step of the setup failed; `error`
    says which."""

    def __init__(self, cuda_index: int = 0, uuid: str | None = None, libname: str = "libnvidia-ml.so.1") -> None:
        self.lib: ctypes.CDLL | None = None
        self.handle = ctypes.c_void_p()
        self.error: str | None = None
        self._reasons_fn: str | None = None
        try:
            self.lib = ctypes.CDLL(libname)
        except OSError as exc:
            self.error = f"libnvidia-ml not loadable: {exc}"
            return
        if self.lib.nvmlInit_v2() != 0:
            self.error, self.lib = "nvmlInit_v2 failed", None
            return
        if not self._open(cuda_index, uuid):
            self.lib = None
            return
        for name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if hasattr(self.lib, name):
                self._reasons_fn = name
                break

    def _open(self, cuda_index: int, uuid: str | None) -> bool:
        assert self.lib is not None
        if uuid:
            key = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
            if self.lib.nvmlDeviceGetHandleByUUID(key.encode(), ctypes.byref(self.handle)) == 0:
                return True
        if os.environ.get("CUDA_VISIBLE_DEVICES", "").strip() not in ("",):
            # a remapped device order: an NVML index would name another card
            self.error = "device uuid not found by NVML and CUDA_VISIBLE_DEVICES remaps indices"
            return False
        if self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(cuda_index), ctypes.byref(self.handle)) == 0:
            return True
        self.error = f"no NVML handle for device {cuda_index}"
        return False

    @property
    def available(self) -> bool:
        return self.lib is not None

    def _uint(self, fn: str, *args: object) -> int | None:
        assert self.lib is not None
        v = ctypes.c_uint(0)
        return int(v.value) if getattr(self.lib, fn)(self.handle, *args, ctypes.byref(v)) == 0 else None

    def read(self) -> Reading:
        if self.lib is None:
            return Reading(None, None, None, None, None)
        power = self._uint("nvmlDeviceGetPowerUsage")
        reasons = None
        if self._reasons_fn is not None:
            r = ctypes.c_ulonglong(0)
            if getattr(self.lib, self._reasons_fn)(self.handle, ctypes.byref(r)) == 0:
                reasons = int(r.value)
        return Reading(
            sm_mhz=self._uint("nvmlDeviceGetClockInfo", ctypes.c_int(NVML_CLOCK_SM)),
            mem_mhz=self._uint("nvmlDeviceGetClockInfo", ctypes.c_int(NVML_CLOCK_MEM)),
            power_w=power / 1000.0 if power is not None else None,
            temp_c=self._uint("nvmlDeviceGetTemperature", ctypes.c_int(NVML_TEMPERATURE_GPU)),
            reasons=reasons,
        )


def for_torch_device(device: object = None) -> Nvml:
    """NVML for the CUDA device torch uses (matched by UUID, so CUDA_VISIBLE_DEVICES is honoured)."""
    import torch

    index = torch.device(device).index if device is not None else None  # type: ignore[call-overload]
    if index is None:
        index = torch.cuda.current_device()
    uuid = None
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except Exception:
        pass
    return Nvml(index, uuid)
