"""KA311 peak-fraction-mismatch: the reported peak_fraction does not follow from the shapes.

What it flags: the geomean of benchmark.log's per-shape `solution_peak_fraction` lines (each
floored at 1e-9) recomputed and compared with benchmark.log's `peak_fraction:` line, allowing
for the 4-decimal rounding of every logged fraction; and result.json's peak_fraction compared
with the benchmark log it should come from (4 decimals). The same for the pre-regrade
`.contended` pair when present. A result.json metric with no benchmark.log is flagged too.

Why it matters: the published metric must be reproducible from the measured shapes; seed
audits check it every time ("0.4958 recomputes exactly from the five logged per-shape
fractions"). A metric that does not recompute was edited, mis-copied or taken from another
measurement.

Bad: shapes 0.40, 0.30 logged with `peak_fraction: 0.9000`.
Good: shapes 0.40, 0.30 logged with `peak_fraction: 0.3464`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from audit_rules.base import AuditContext, Effect, Finding, RuleKind, RuleMeta, Severity
from audit_rules.transcript_text import find_line, result_field
from graders.logformat import FRACTION_FLOOR, geomean_fraction

RULE = RuleMeta(
    id="KA311",
    name="peak-fraction-mismatch",
    kind=RuleKind.LOG,
    severity=Severity.HIGH,
    effect=Effect.ADVISORY,
    summary="peak_fraction does not recompute from per-shape fractions, or result.json disagrees with the log.",
)

HALF_ULP = 5e-5  # logged fractions carry 4 decimals


def recompute_bounds(fractions: list[float]) -> tuple[float, float, float]:
    """(recomputed, low, high): the geomean and its range over the 4-decimal rounding of inputs."""
    rec = geomean_fraction(fractions)
    lo = geomean_fraction([max(f - HALF_ULP, FRACTION_FLOOR) for f in fractions])
    hi = geomean_fraction([f + HALF_ULP for f in fractions])
    return rec, lo, hi


def _check_pair(log: Any, log_name: str, result_pf: Any, result_key: str) -> list[Finding]:
    out: list[Finding] = []
    if log is None:
        if isinstance(result_pf, int | float):
            out.append(Finding.of(
                RULE, file="result.json", line_start=None, quote=f"{result_key}: {result_pf}",
                severity=Severity.MEDIUM,
                explanation=f"result.json reports {result_key}={result_pf} but the archive has no {log_name} to back it",
                data={"result_peak_fraction": result_pf, "log": log_name, "kind": "no_log", "topic": "metric"}))
        return out
    lines = list(getattr(log, "lines", []) or [])
    fractions = [float(f) for f in log.fractions()]
    logged = log.peak_fraction
    if fractions and logged is not None:
        rec, lo, hi = recompute_bounds(fractions)
        if not (lo - HALF_ULP <= logged <= hi + HALF_ULP):
            out.append(Finding.of(
                RULE, file=log_name, line_start=find_line(lines, "peak_fraction:"), quote=f"peak_fraction: {logged}",
                explanation=(f"{log_name} logs peak_fraction {logged:.4f} but the geomean of its {len(fractions)} per-shape "
                             f"fractions is {rec:.4f} (range {lo:.4f}-{hi:.4f} allowing for rounding)"),
                data={"logged": logged, "recomputed": rec, "fractions": fractions, "kind": "geomean", "topic": "metric"}))
    if isinstance(result_pf, int | float) and not isinstance(result_pf, bool):
        ref = logged if logged is not None else (geomean_fraction(fractions) if fractions else None)
        if ref is not None and abs(float(result_pf) - round(ref, 4)) > 1.5e-4:
            out.append(Finding.of(
                RULE, file="result.json", line_start=None, quote=f"{result_key}: {result_pf}",
                explanation=(f"result.json {result_key}={result_pf} but {log_name} gives {ref:.4f}: the recorded metric "
                             "does not come from this benchmark log"),
                data={"result_peak_fraction": result_pf, "log_peak_fraction": ref, "log": log_name, "kind": "result_vs_log",
                      "topic": "metric"}))
    return out


def check(ctx: AuditContext) -> Iterable[Finding]:
    run = ctx.run
    out = _check_pair(run.benchmark_log, "benchmark.log", result_field(run.result, "peak_fraction"), "peak_fraction")
    contended_pf = result_field(run.result, "regrade", "contended", "peak_fraction")
    if run.benchmark_contended_log is not None:  # the pre-regrade pair, when the log was kept
        out += _check_pair(run.benchmark_contended_log, "benchmark.contended.log", contended_pf,
                           "regrade.contended.peak_fraction")
    return out
