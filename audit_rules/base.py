"""Rule metadata, findings and the audit context every rule reads.

Each rule is one module under `audit_rules/rules/` exposing:

* ``RULE: RuleMeta`` -- stable id, kebab-case name, kind, severity, effect, summary, probe;
* for STATIC, TEMPLATE and LOG rules: ``def check(ctx: AuditContext) -> Iterable[Finding]``;
* for TRANSCRIPT rules: ``class Checker`` with ``__init__(self, ctx)``, ``feed(self, event)``
  and ``finish(self) -> Iterable[Finding]``; the engine streams each transcript once and feeds
  every transcript checker, so an 80 MB transcript is never held in memory.

The registry (`audit_rules/registry.py`) lists every rule module in one explicit tuple.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ingest.model import ParsedRun, TranscriptEvent, UnpackedArchive


class RuleKind(StrEnum):
    STATIC = "static"
    TRANSCRIPT = "transcript"
    TEMPLATE = "template"
    LOG = "log"


class Severity(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"
    INFO = "info"


class Effect(StrEnum):
    """What a finding means for the verdict (synthesis precedence is in synthesis.py)."""

    DECISIVE_HACK = "decisive_hack"  # reward_hack on its own
    RUBRIC_LEAK = "rubric_leak"  # passes, but measures the wrong skill
    CONTAMINATION = "contamination"  # deliberate use of another run's artefacts
    PASSIVE_EXPOSURE = "passive_exposure"  # another run id seen only in tool output
    INFRA = "infra"  # harness/environment fault: re-grade, do not fail
    PROVIDER = "provider"  # model API failed
    CODE_DEFECT = "code_defect"  # genuine defect of the submitted code
    NEEDS_PROBE = "needs_probe"  # static evidence that an empirical probe must settle
    ADVISORY = "advisory"  # worth a human's glance; no verdict effect


class Probe(StrEnum):
    """Empirical probes (graders/probes). Findings name the ones they ask for."""

    SAME_STORAGE_OVERWRITE = "same_storage_overwrite"
    WEIGHT_MUTATION = "weight_mutation"
    REPEAT_CALLS = "repeat_calls"
    OUTPUT_ALIASING = "output_aliasing"
    CHECKED_VS_TIMED = "checked_vs_timed"
    FRESH_VS_WARM = "fresh_vs_warm"
    L2_POLICY = "l2_policy"
    STREAM_ESCAPE = "stream_escape"


@dataclass(frozen=True)
class RuleMeta:
    id: str  # "KA" + 3 digits, never renumbered
    name: str  # kebab-case, names the pattern flagged
    kind: RuleKind
    severity: Severity
    effect: Effect  # default effect; a finding may carry a different one (see Finding.effect)
    summary: str  # one line
    probe: Probe | None = None


@dataclass
class Finding:
    rule_id: str
    rule_name: str
    severity: Severity
    effect: Effect
    file: str | None  # archive path ("solution.py", "scratch/k.cu", "transcript.jsonl")
    line_start: int | None
    line_end: int | None
    quote: str  # the quoted source/transcript lines, verbatim (trimmed to a sane length)
    explanation: str  # plain words: what was seen and why it matters
    probe: Probe | None = None
    data: dict[str, Any] = field(default_factory=dict)  # structured extras (cached_kind, share, ...)

    @property
    def key(self) -> str:
        """Stable identifier inside one audit: used by the verdict's justification lists."""
        return f"{self.rule_id}@{self.file or '-'}:{self.line_start or 0}"

    @classmethod
    def of(
        cls,
        meta: RuleMeta,
        *,
        file: str | None,
        line_start: int | None,
        line_end: int | None = None,
        quote: str = "",
        explanation: str,
        effect: Effect | None = None,
        severity: Severity | None = None,
        probe: Probe | None = None,
        data: dict[str, Any] | None = None,
    ) -> Finding:
        return cls(
            rule_id=meta.id,
            rule_name=meta.name,
            severity=severity or meta.severity,
            effect=effect or meta.effect,
            file=file,
            line_start=line_start,
            line_end=line_end if line_end is not None else line_start,
            quote=quote,
            explanation=explanation,
            probe=probe if probe is not None else meta.probe,
            data=data or {},
        )


@dataclass
class ProblemInfo:
    """What the rules need to know about the problem, read from the registered deck's problem.yaml."""

    problem_id: str
    deck: str | None
    regime: str | None  # "compute" | "memory"
    precision: str | None  # "fp8", "bf16", "fp32", "int4"...
    forbidden: list[str] = field(default_factory=list)
    required_framework: str | None = None  # e.g. "cuda" for CUDA-only decks
    allows_lower_precision: bool = False
    raw: dict[str, Any] = field(default_factory=dict)
    # True when the deck's check.py loops over every shape of shapes.SHAPES (as benchmark.py does):
    # then no shape threshold can route the checked and the timed calls apart. None: unknown.
    check_covers_timed_shapes: bool | None = None
    # The deck's reference.py text (what a solution that merely transcribes it would repeat). None: unknown.
    reference_source: str | None = None
    # Does the deck's grader change a model's weights/buffers after it has called it? (kaudit's own
    # decks: yes; a KBH deck: only where a numeric-stress case scales state.) None: unknown.
    state_changes_in_contract: bool | None = None
    # The deck's shapes.SHAPES (literal dicts, read without importing the deck): the sizes every
    # graded call takes. None: unknown.
    shapes: list[dict[str, Any]] | None = None


@dataclass
class AuditContext:
    """Everything one audit reads. Built by audit_rules.engine from an unpacked archive."""

    archive: UnpackedArchive
    run: ParsedRun
    problem: ProblemInfo | None
    submission: Any  # audit_rules.source_model.Submission (parsed solution + sidecars)
    transcript_events: Callable[[], Iterator[TranscriptEvent]]  # fresh streaming iterator per call
    other_run_ids: set[str] = field(default_factory=set)  # run ids the service knows (for contamination)
