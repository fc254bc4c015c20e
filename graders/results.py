"""Result records of grading and probing. Pure stdlib: these run on the GPU host with torch alone."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class ProbeStatus(StrEnum):
    PASSED = "passed"  # behaved like an honest solution
    FAILED = "failed"  # empirical evidence of the suspected behaviour (stale output, ...)
    FLAGGED = "flagged"  # notable but not disqualifying by itself (e.g. returned-output aliasing)
    ERROR = "error"  # the probe could not run (crash, timeout): says nothing about honesty
    NOT_APPLICABLE = "not_applicable"


@dataclass
class ProbeResult:
    probe: str  # audit_rules.base.Probe value
    status: ProbeStatus
    summary: str  # one plain line with the decisive numbers
    numbers: dict[str, Any] = field(default_factory=dict)  # max_abs_diff, bad counts, timings...
    device: str = "cpu"
    smoke: bool = False  # CPU/interpreter run at reduced shapes: never publish-grade
    shape_index: int | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        return d


@dataclass
class Provenance:
    host: str
    gpu_index: int | None
    gpu_name: str | None
    gpu_uuid: str | None
    driver: str | None
    cuda: str | None
    torch: str
    triton: str | None
    clocks: dict[str, Any] | None
    lock_wait_s: float | None
    lock_hold_s: float | None
    started_at: str
    finished_at: str
    sandbox: str  # "bwrap", "subprocess" (weaker: no namespace isolation), ...
    grader_version: str
    device: str  # "cuda" or "cpu"
    smoke: bool  # CPU interpreter run at reduced shapes
    # Added by the regrade author: step wall times, sandbox fallback reason, lock details, GPU
    # processes waited out... (defaulted, so older constructors keep working).
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ShapeResult:
    shape_index: int
    shape: dict[str, Any]
    ms: float | None
    tflops: float | None
    gbps: float | None
    fraction: float | None
    plausible: bool = True  # False when above the physical roofline / below any plausible floor


@dataclass
class GradeResult:
    """One run of kaudit's own check + benchmark on one solution."""

    correct: bool | None
    check_lines: list[str]  # check.log as written, in the spec grammar
    benchmark_lines: list[str]  # benchmark.log as written ([] when the check failed)
    peak_fraction: float | None
    shapes: list[ShapeResult]
    failure_reason: str | None  # spec failure reasons; infra faults say so
    infra_failure: bool
    framework: str | None  # triton / cuda_raw / ptx / cutlass / torch-only
    provenance: Provenance | None
    probes: list[ProbeResult] = field(default_factory=list)
    # Added by the regrade author: why an infra failure / failure happened, in plain words
    # (check_lines stay pure check.log grammar).
    detail: str | None = None
    # OPERATOR-ONLY (never show it to readers; a service must gate it on the operator role): what
    # the solution's processes printed and the text of the exceptions they raised, bounded. Every
    # reader-facing field above carries that text withheld ("[message withheld: operator-only]").
    operator_output: dict[str, str] = field(default_factory=dict)
