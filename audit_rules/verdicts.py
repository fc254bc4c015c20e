"""The verdict vocabulary of the run-archive spec, as closed enums, and the verdict object."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    CLEAN = "clean"
    INTERESTING = "interesting"
    RUBRIC_LEAK = "rubric_leak"
    REWARD_HACK = "reward_hack"
    CONTAMINATED = "contaminated"
    FAIL = "fail"
    INFRA_FAILURE = "infra_failure"
    PROVIDER_FAILURE = "provider_failure"
    PENDING_EMPIRICAL = "pending_empirical"


class Contamination(StrEnum):
    CLEAN = "clean"
    PASSIVE_EXPOSURE = "passive_exposure"
    CONTAMINATED = "contaminated"


class MeasurementStatus(StrEnum):
    IN_RUN_CONTENDED = "in_run_contended"
    SEQUENTIAL_ISOLATED = "sequential_isolated"
    SEQUENTIAL_ISOLATED_EMPIRICAL_FAILED = "sequential_isolated_empirical_failed"
    WRONG_HARDWARE_SKU = "wrong_hardware_sku"
    NOT_MEASURED = "not_measured"


class FailureReason(StrEnum):
    PASS = "pass"
    CHECK_FAILED = "check_failed"
    CHECK_TIMEOUT = "check_timeout"
    BENCHMARK_FAILED = "benchmark_failed"
    BENCHMARK_TIMEOUT = "benchmark_timeout"
    TEMPLATE_MUTATED = "template_mutated"
    PROVIDER_INSUFFICIENT_CREDITS = "provider_insufficient_credits"
    PROVIDER_RATE_LIMITED = "provider_rate_limited"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    PROVIDER_EARLY_STOP = "provider_early_stop"
    TIMEOUT = "timeout"
    INCOMPLETE_SESSION = "incomplete_session"
    NO_SOLUTION = "no_solution"
    HARNESS_ERROR = "harness_error"
    INCORRECT = "incorrect"  # legacy
    AUDIT_EMPIRICAL_FAILED = "audit_empirical_failed"


class Producer(StrEnum):
    """Which component produced a verdict row (kept in the append-only history)."""

    INGEST = "ingest"  # decided from the archive alone (spine, before/without the audit library)
    AUDIT = "audit"  # audit_rules synthesis over static/transcript/template/log findings
    REGRADE = "regrade"  # synthesis after an isolated regrade and empirical probes
    REAUDIT = "reaudit"  # a stored run judged again by changed rules (service.reaudit); no regrade
    OPERATOR = "operator"  # a human override


@dataclass
class Metric:
    name: str  # "peak_fraction" or "speedup"
    value: float | None
    source: str  # "in_run", "regrade:<job id>", "result.regrade", ...
    superseded: list[dict[str, Any]] = field(default_factory=list)  # earlier figures, kept as provenance


@dataclass
class VerdictResult:
    verdict: Verdict
    reward_hack: bool
    contamination: Contamination
    template_mutated: bool | None
    correct: bool | None
    correct_source: str  # "in_run", "regrade", "result.regrade", "unknown"
    failure_reason: str | None
    measurement_status: MeasurementStatus
    publish_grade: bool
    metric: Metric | None
    reasons: list[str]  # plain-words lines, most important first
    justification: dict[str, list[str]]  # field name -> finding keys / probe names that decide it
    findings: list[Any] = field(default_factory=list)  # audit_rules.base.Finding
    probes_required: list[str] = field(default_factory=list)
    probes_run: list[dict[str, Any]] = field(default_factory=list)  # graders.results.ProbeResult as dicts
    produced_by: Producer = Producer.AUDIT
    producer_detail: str = ""  # e.g. "kaudit 0.1.0 rules=37" or "regrade job 12"
    # Audit facts for the report (archive sha, deck, framework, transcripts, rules run...).
    context: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The verdict object of the spec, JSON-ready (what `kaudit audit --json` prints)."""
        d = asdict(self)
        d["findings"] = [f if isinstance(f, dict) else asdict(f) for f in self.findings]
        return _jsonable(d)


def _jsonable(value: Any) -> Any:
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value
