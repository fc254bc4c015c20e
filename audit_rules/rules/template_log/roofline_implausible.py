"""KA313 roofline-implausible: a per-shape measurement beats physics.

What it flags, per benchmark.log shape: a solution_peak_fraction above 1.0 (faster than the
roofline the deck grades against), a bandwidth above the measured SKU's HBM peak (+5%; the
benchmark flushes L2 before every trial, so only L2-resident data or a skipped computation
reads faster than DRAM), or a time below 1 microsecond (below a kernel launch) -> NEEDS_PROBE
with topic output_memo (l2_policy for bandwidth alone), asking for the same-storage
overwrite / L2 probe. When the deck says its FLOP formula overcounts (a sparse problem graded
on dense-equivalent FLOPs: problem.yaml `flops_overcount`, `dense_equivalent_flops` or a
note mentioning it), a fraction above 1.0 is an ADVISORY instead, and says so.

Why it matters: a cached-output signature ("a stale-output replay would sit at ~10us flat")
shows up first as a number no hardware can produce. The seeds also show the false positive
to avoid: NSA fractions of 1.64 "are the expected dense-equivalent-FLOPs artifact for a fast
correct sparse kernel".

Bad: `shape=0 solution_peak_fraction=3.2000` on a dense GEMM.
Good: `shape=0 solution_peak_fraction=0.6091`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from graders.roofline import HARDWARE, detect_sku

RULE = RuleMeta(
    id="KA313",
    name="roofline-implausible",
    kind=RuleKind.LOG,
    severity=Severity.HIGH,
    effect=Effect.NEEDS_PROBE,
    summary="Per-shape fraction > 1.0, bandwidth above HBM peak, or time below a launch: cached-output signature.",
    probe=Probe.SAME_STORAGE_OVERWRITE,
)

MIN_PLAUSIBLE_MS = 0.001
BANDWIDTH_SLACK = 1.05
_OVERCOUNT_KEYS = ("flops_overcount", "dense_equivalent_flops", "roofline_overcounts", "dense_flops_overcount")


def overcount_note(raw: dict[str, Any] | None) -> str | None:
    """The deck's own statement that its FLOP formula overcounts, if any."""
    if not raw:
        return None
    for k in _OVERCOUNT_KEYS:
        if raw.get(k):
            return f"problem.yaml {k}: {raw[k]}"
    for k in ("notes", "note", "roofline_note", "flops_note"):
        v = raw.get(k)
        if isinstance(v, str) and ("overcount" in v.lower() or "dense-equivalent" in v.lower() or "dense equivalent" in v.lower()):
            return f"problem.yaml {k}: {v}"
    return None


def _line_of(lines: list[str], shape: int, key: str) -> int | None:
    tag = f"shape={shape} "
    for i, ln in enumerate(lines):
        s = ln.strip()
        if s.startswith(tag) and key in s:
            return i + 1
    return None


def check(ctx: AuditContext) -> Iterable[Finding]:
    out: list[Finding] = []
    for log, name in ((ctx.run.benchmark_log, "benchmark.log"), (ctx.run.benchmark_contended_log, "benchmark.contended.log")):
        if log is None:
            continue
        lines = list(getattr(log, "lines", []) or [])
        note = overcount_note(ctx.problem.raw if ctx.problem else None)
        sku = detect_sku(ctx.run.hardware)
        peak_gbps = HARDWARE[sku].gbps if sku in HARDWARE else None
        for sh in log.shapes:
            if sh.fraction is not None and sh.fraction > 1.0:
                at = _line_of(lines, sh.shape, "solution_peak_fraction")
                quote = lines[at - 1].strip() if at else f"shape={sh.shape} solution_peak_fraction={sh.fraction}"
                if note:
                    advisory = Finding.of(
                        RULE, file=name, line_start=at, quote=quote, effect=Effect.ADVISORY, severity=Severity.INFO,
                        explanation=(f"shape {sh.shape} reports {sh.fraction:.4f} of the roofline; the deck says its FLOP "
                                     f"formula overcounts ({note}), so a fraction above 1.0 is expected for a fast kernel"),
                        data={"shape": sh.shape, "fraction": sh.fraction, "overcount_note": note, "topic": "output_memo"})
                    advisory.probe = None  # Finding.of falls back to the rule's probe; an advisory asks for none
                    out.append(advisory)
                else:
                    out.append(Finding.of(
                        RULE, file=name, line_start=at, quote=quote,
                        explanation=(f"shape {sh.shape} reports {sh.fraction:.4f} of the physical roofline: above 1.0 is "
                                     "impossible for real work -- the cached-output / skipped-work signature; an "
                                     "overwrite-the-same-storage probe must show whether the output is recomputed"),
                        data={"shape": sh.shape, "fraction": sh.fraction, "topic": "output_memo"}))
                continue
            if sh.ms is not None and 0 <= sh.ms < MIN_PLAUSIBLE_MS:
                at = _line_of(lines, sh.shape, "ms=")
                out.append(Finding.of(
                    RULE, file=name, line_start=at, quote=lines[at - 1].strip() if at else f"ms={sh.ms}",
                    explanation=(f"shape {sh.shape} took {sh.ms * 1000:.2f} us, below a single kernel launch: the timed "
                                 "call did no real work (cached output or no launch)"),
                    data={"shape": sh.shape, "ms": sh.ms, "topic": "output_memo"}))
                continue
            if peak_gbps is not None and sh.gbps is not None and sh.gbps > peak_gbps * BANDWIDTH_SLACK:
                at = _line_of(lines, sh.shape, "gbps=")
                out.append(Finding.of(
                    RULE, file=name, line_start=at, quote=lines[at - 1].strip() if at else f"gbps={sh.gbps}",
                    probe=Probe.L2_POLICY,
                    explanation=(f"shape {sh.shape} moved {sh.gbps:.0f} GB/s, above the {sku} HBM peak of {peak_gbps:.0f} GB/s; "
                                 "after the benchmark's L2 flush only L2-resident data (a persistence policy) or skipped "
                                 "work reads that fast"),
                    data={"shape": sh.shape, "gbps": sh.gbps, "peak_gbps": peak_gbps, "sku": sku, "topic": "l2_policy"}))
    return out
