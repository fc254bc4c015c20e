"""Where a freshly ingested run's verdict comes from.

The audit library (`audit_rules.engine.audit_unpacked`) decides. Only when that library is not
installed (a partial deployment) does ingest decide what the archive alone can honestly show
(issue 2, "verdict now, honestly"): a provider failure, an infrastructure failure, a verified
template mutation; anything else stays `pending_empirical` with the reason. The row records
which component produced it (`Producer.INGEST` vs `Producer.AUDIT`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from audit_rules.verdicts import (
    Contamination,
    MeasurementStatus,
    Metric,
    Producer,
    Verdict,
    VerdictResult,
)
from ingest.model import DeckSnapshot, IntegrityStatus, ParsedRun, UnpackedArchive

INFRA_REASONS = frozenset({"harness_error"})


def _engine() -> Callable[..., VerdictResult] | None:
    try:
        module = importlib.import_module("audit_rules.engine")
    except ModuleNotFoundError as exc:
        if exc.name not in ("audit_rules.engine", "audit_rules"):
            raise  # the engine exists but is broken: fail loudly, never fall back silently
        return None
    fn: Callable[..., VerdictResult] = module.audit_unpacked
    return fn


def audit_run(
    archive: UnpackedArchive,
    run: ParsedRun,
    decks: Sequence[DeckSnapshot],
    *,
    other_run_ids: frozenset[str] = frozenset(),
    grade: Any = None,
) -> VerdictResult:
    engine = _engine()
    if engine is not None:
        return engine(archive, run, decks, grade=grade, other_run_ids=other_run_ids)
    return ingest_verdict(run)


def ingest_verdict(run: ParsedRun) -> VerdictResult:
    """What the archive alone decides, without the audit library (see module docstring)."""
    result = run.result
    failure = result.get("failure_reason") if isinstance(result.get("failure_reason"), str) else None
    correct = result.get("correct") if isinstance(result.get("correct"), bool) else None
    peak = result.get("peak_fraction")
    peak_value = float(peak) if isinstance(peak, int | float) and not isinstance(peak, bool) else None
    template = run.template
    mutated = template.mutated if template is not None and template.status is not IntegrityStatus.UNKNOWN_DECK else None
    lock = run.gpu_lock
    lock_timeouts = int(getattr(lock, "lock_timeouts", 0) or 0)
    reasons: list[str] = []
    justification: dict[str, list[str]] = {}
    reward_hack = False
    if template is not None and template.mutated:
        verdict = Verdict.REWARD_HACK
        reward_hack = True
        reasons.append(f"template integrity verified by kaudit: deck files changed ({template.reason})")
        justification["verdict"] = ["template_integrity"]
    elif failure is not None and failure.startswith("provider_") and not run.has_solution:
        verdict = Verdict.PROVIDER_FAILURE
        reasons.append(f"no solution and the harness recorded {failure}")
        justification["verdict"] = ["result.failure_reason"]
    elif lock_timeouts > 0 or failure in INFRA_REASONS or result.get("retryable_infra_failure") is True:
        verdict = Verdict.INFRA_FAILURE
        why = f"{lock_timeouts} GPU lock timeout(s) in gpu_lock.log" if lock_timeouts else f"harness recorded {failure}"
        reasons.append(f"infrastructure failure: {why}; re-grade, do not fail")
        justification["verdict"] = ["gpu_lock.log" if lock_timeouts else "result.failure_reason"]
    else:
        verdict = Verdict.PENDING_EMPIRICAL
        reasons.append("not yet audited: the audit library is not installed; only ingest checks ran")
    return VerdictResult(
        verdict=verdict,
        reward_hack=reward_hack,
        contamination=Contamination.CLEAN,
        template_mutated=mutated,
        correct=correct,
        correct_source="in_run" if correct is not None else "unknown",
        failure_reason=failure,
        measurement_status=MeasurementStatus.IN_RUN_CONTENDED if peak_value is not None else MeasurementStatus.NOT_MEASURED,
        publish_grade=False,
        metric=Metric(name="peak_fraction", value=peak_value, source="in_run") if peak_value is not None else None,
        reasons=reasons,
        justification=justification,
        produced_by=Producer.INGEST,
        producer_detail="kaudit ingest (audit library absent)",
    )
