"""Result records of grading and probing. Pure stdlib: these run on the GPU host with torch alone."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

# Why kaudit's verifier refuted a PASS the solution's process reported (graders.correctness
# verify_recorded's "refuted" field, read by graders.regrade and kept in provenance.extra):
REFUTED_FORGED = "compare_subverted"  # the output is out of tolerance of that process's OWN reference too
REFUTED_REF_SHIFT = "reference_shifted"  # that process's reference differs from the verifier's beyond tolerance
REFUTED_UNSTABLE = "reference_unstable"  # the two references agree within tolerance; the output lies between
REFUTED_UNEXPLAINED = "no_reference_record"  # that process left no readable reference record
# What each kind says, for the grade's detail and the verdict's reason alike.
REFUTED_CAUSE = {
    REFUTED_FORGED: "its own reference (recorded beside the output) refutes the output too, so its comparison was "
                    "subverted",
    REFUTED_REF_SHIFT: "the reference that process computed differs from the verifier's, so something in it (a "
                       "global numerics flag, a patched reference) shifted the reference",
    REFUTED_UNEXPLAINED: "that process left no readable reference record",
}
# A checked_vs_timed result whose numbers["kind"] is this failed because the CODE run depends on the
# inputs' magnitude (the deck's numeric-stress inputs run ops or Triton kernels/flags the benchmark's
# inputs never run), not because an output was wrong: honesty evidence, not a correctness failure.
PATH_SWITCH = "path_switch"


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
    # Regrade modes (graders.official): which ran, which decided the fields above, each mode's own
    # outcome (official: graders.official.OfficialResult.to_dict(); hardened: mode_summary()) and
    # where they disagree. One record holds both.
    mode: str = "hardened"  # hardened | official | both
    decided_by: str | None = None  # the mode whose outcome the top-level fields are
    official: dict[str, Any] | None = None
    hardened: dict[str, Any] | None = None
    disagreements: list[str] = field(default_factory=list)
    # A graded run whose own output shows a failed extension build it survived (graders.regrade.
    # survived_build_fault): {"reason": infra reason, "steps": [...], "note": reader text}. The
    # measured figure may be a fallback path's, so the synthesis does not publish it.
    build_fallback: dict[str, Any] | None = None
    # OPERATOR-ONLY (never show it to readers; a service must gate it on the operator role): what
    # the solution's processes printed and the text of the exceptions they raised, bounded. Every
    # reader-facing field above carries that text withheld ("[message withheld: operator-only]").
    operator_output: dict[str, str] = field(default_factory=dict)

    def evidence(self) -> dict[str, Any]:
        """What a reader needs to see why the regrade decided as it did (bounded, JSON-ready):
        the modes, the deciding outcome, each mode's FAIL line / output, probe numbers, provenance."""
        return {
            "mode": self.mode,
            "decided_by": self.decided_by or self.mode,
            "correct": self.correct,
            "failure_reason": self.failure_reason,
            "infra_failure": self.infra_failure,
            "peak_fraction": self.peak_fraction,
            "detail": self.detail,
            "fail_line": last_fail_line(self.check_lines),
            "shapes": [asdict(s) for s in self.shapes],
            "disagreements": list(self.disagreements),
            "build_fallback": self.build_fallback,
            "official": self.official,
            "hardened": self.hardened if self.hardened is not None else (
                mode_summary(self) if self.mode == "hardened" else None),
            "probes": [p.to_dict() for p in self.probes],
            "provenance": self.provenance.to_dict() if self.provenance is not None else None,
        }


def last_fail_line(lines: list[str]) -> str | None:
    for ln in reversed(lines):
        if ln.strip().startswith("FAIL:"):
            return ln.strip()
    return None


def mode_summary(g: GradeResult) -> dict[str, Any]:
    """The hardened mode's own outcome, bounded, for a record another mode may decide."""
    status = "infra_failure" if g.infra_failure else ("graded" if g.correct else "fail")
    if g.correct is None and not g.infra_failure:
        status = "not_run"
    return {
        "status": status, "correct": g.correct, "peak_fraction": g.peak_fraction,
        "failure_reason": g.failure_reason, "fail_line": last_fail_line(g.check_lines), "detail": g.detail,
        "framework": g.framework, "check_lines": list(g.check_lines[-40:]),
        "benchmark_lines": list(g.benchmark_lines[-40:]), "shapes": [asdict(s) for s in g.shapes],
    }
