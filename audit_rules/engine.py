"""The audit engine: build the AuditContext, run every registered rule, synthesize the verdict.

* STATIC, TEMPLATE and LOG rules: ``check(ctx)`` is called once each.
* TRANSCRIPT rules: one ``Checker(ctx)`` per rule; each transcript file is streamed ONCE
  (``ingest.transcripts.iter_events``) and every event is fed to every checker, so an 80 MB
  transcript is never held in memory and never read twice.
* A rule that raises does not stop the audit: it yields an ADVISORY "rule crashed" finding
  naming the rule and the exception (tests keep the corpus free of such findings).
* Findings are de-duplicated, then `audit_rules.synthesis.synthesize` decides the verdict.

`audit_path` and `audit_unpacked` are the library's doors onto the verdict pipeline
(`audit_rules.pipeline`): audit -> optional regrade -> probes -> synthesis, the same function
the CLI, the ingest service and the regrade worker call.
"""

from __future__ import annotations

import ast
import copy
import logging
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from audit_rules import kaudit_version
from audit_rules.base import AuditContext, Effect, Finding, Probe, ProblemInfo, RuleKind, Severity
from audit_rules.memo import FileStatMemo
from audit_rules.registry import RULES, meta_of
from audit_rules.report import run_facts
from audit_rules.source_model import build_submission
from audit_rules.synthesis import dedup_findings, sort_findings
from audit_rules.verdicts import VerdictResult
from graders.results import GradeResult
from graders.runformat import CHECK_PY, PROBLEM_YAML, SOLUTION
from ingest.model import DeckSnapshot, EventKind, Limits, ParsedRun, TranscriptEvent, UnpackedArchive
from ingest.run import solution_sources
from ingest.transcripts import TRANSCRIPT_FILES, iter_events

log = logging.getLogger(__name__)



# ---------------------------------------------------------------------------------------------
# Problem info


def _deck_for(decks: Sequence[DeckSnapshot], problem: str, prefer: str | None = None) -> DeckSnapshot | None:
    from audit_rules.pipeline import select_deck  # one deck choice for the audit and the regrade

    return select_deck(decks, problem, prefer)


def problem_info(decks: Sequence[DeckSnapshot], problem: str | None, prefer: str | None = None) -> ProblemInfo | None:
    """ProblemInfo from the registered deck's problem.yaml (None when no deck holds the problem)."""
    if not problem:
        return None
    deck = _deck_for(decks, problem, prefer)
    if deck is None:
        return None
    raw, check_covers, reference, shapes = _deck_problem_files(Path(deck.root) / problem if deck.root is not None else None)
    forbidden = raw.get("forbidden") or []
    return ProblemInfo(
        problem_id=problem,
        deck=deck.name,
        regime=raw.get("regime"),
        precision=normalize_precision(raw.get("precision")),
        forbidden=[str(x) for x in forbidden] if isinstance(forbidden, list) else [],
        required_framework=raw.get("required_framework"),
        allows_lower_precision=bool(raw.get("allows_lower_precision", False)),
        raw=raw,
        check_covers_timed_shapes=check_covers,
        reference_source=reference,
        shapes=shapes,
        state_changes_in_contract=_state_changes_in_contract(
            raw, Path(deck.root) / problem if deck.root is not None else None, problem),
    )


def _state_changes_in_contract(raw: dict[str, Any], problem_dir: Path | None, problem: str) -> bool | None:
    """Does this deck's grader change weights/buffers after calling the model (graders.problem's
    `ProblemSpec.state_changes_in_contract`, read without importing the deck)? kaudit's own schema:
    yes. A KBH problem: whether its harness's numeric-stress table scales state for it; None when the
    harness or the problem's row cannot be read."""
    from graders import kbh

    if not raw:
        return None
    if not kbh.is_kbh_yaml(raw):
        return True
    harness = kbh.harness_dir_for(problem_dir) if problem_dir is not None else None
    if harness is None:
        return None
    stress_py = harness / "eval" / "numeric_stress.py"
    table = _SCALING_MEMO.get(str(stress_py), (stress_py,), lambda: kbh.problems_scaling_state(harness))
    name = str(raw.get("name") or problem)
    return table.get(name) if table is not None else None


# harness numeric_stress.py -> graders.kbh.problems_scaling_state
_SCALING_MEMO: FileStatMemo[dict[str, bool] | None] = FileStatMemo(64)
# problem dir -> what _deck_problem_files reads from problem.yaml, check.py, reference.py and shapes.py
_DECK_FILES_MEMO: FileStatMemo[tuple[dict[str, Any], bool | None, str | None, list[dict[str, Any]] | None]] = (
    FileStatMemo(1024))


def _deck_problem_files(
    problem_dir: Path | None,
) -> tuple[dict[str, Any], bool | None, str | None, list[dict[str, Any]] | None]:
    """(problem.yaml as a dict, check_loops_all_shapes(check.py), reference.py text, shapes.SHAPES)
    of a deck problem."""
    if problem_dir is None:
        return {}, None, None, None
    yaml_path, check_py, ref_py = problem_dir / PROBLEM_YAML, problem_dir / CHECK_PY, problem_dir / "reference.py"
    shapes_py = problem_dir / "shapes.py"

    def read() -> tuple[dict[str, Any], bool | None, str | None, list[dict[str, Any]] | None]:
        raw: dict[str, Any] = {}
        if yaml_path.is_file():
            loaded = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
            if isinstance(loaded, dict):
                raw = loaded
        reference = ref_py.read_text(encoding="utf-8", errors="replace") if ref_py.is_file() else None
        return raw, check_loops_all_shapes(check_py), reference, literal_shapes(shapes_py)

    raw, check_covers, reference, shapes = _DECK_FILES_MEMO.get(
        str(problem_dir), (yaml_path, check_py, ref_py, shapes_py), read)
    # each audit its own problem.yaml dict and shape list
    return copy.deepcopy(raw), check_covers, reference, copy.deepcopy(shapes)


def literal_shapes(shapes_py: Path) -> list[dict[str, Any]] | None:
    """The `SHAPES = [...]` list of a deck's shapes.py when it is a literal of dicts (the KBH and
    kaudit decks write it so); None when absent or not a literal. Nothing is imported."""
    try:
        tree = ast.parse(shapes_py.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SHAPES" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                return None
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                return value
            return None
    return None


def normalize_precision(value: object) -> str | None:
    """The deck's precision in the rules' short names: fp8_e4m3 -> fp8, int4_bf16 -> int4, bfloat16 -> bf16."""
    if not isinstance(value, str) or not value.strip():
        return None
    v = value.strip().lower()
    for prefix, short in (("fp8", "fp8"), ("float8", "fp8"), ("int4", "int4"), ("int8", "int8"), ("bfloat16", "bf16"),
                          ("bf16", "bf16"), ("fp16", "fp16"), ("float16", "fp16"), ("half", "fp16"), ("tf32", "tf32"),
                          ("fp32", "fp32"), ("float32", "fp32")):
        if v.startswith(prefix):
            return short
    return v


def check_loops_all_shapes(check_py: Path) -> bool | None:
    """Does the deck's check.py iterate over every entry of shapes.SHAPES (directly or via a name)?"""
    try:
        tree = ast.parse(check_py.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None

    def is_shapes(expr: ast.expr, aliases: set[str]) -> bool:
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("enumerate", "list", "tuple"):
            return bool(expr.args) and is_shapes(expr.args[0], aliases)
        if isinstance(expr, ast.Attribute) and expr.attr == "SHAPES":
            return True
        return isinstance(expr, ast.Name) and expr.id in aliases

    aliases: set[str] = {"SHAPES"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and is_shapes(node.value, aliases):
            aliases.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return any(isinstance(node, ast.For) and is_shapes(node.iter, aliases) for node in ast.walk(tree))


def deck_root(decks: Sequence[DeckSnapshot], problem: str | None, prefer: str | None = None) -> Path | None:
    if not problem:
        return None
    deck = _deck_for(decks, problem, prefer)
    return Path(deck.root) if deck is not None and deck.root is not None else None


# ---------------------------------------------------------------------------------------------
# Context


def transcript_paths(archive: UnpackedArchive) -> list[str]:
    return [name for name in TRANSCRIPT_FILES if archive.has(name)]


def _event_factory(archive: UnpackedArchive) -> Callable[[], Iterator[TranscriptEvent]]:
    def events() -> Iterator[TranscriptEvent]:
        for name in transcript_paths(archive):
            yield from iter_events(archive.files[name].staged_path, name)

    return events


def build_context(
    archive: UnpackedArchive,
    run: ParsedRun,
    decks: Sequence[DeckSnapshot],
    other_run_ids: frozenset[str] = frozenset(),
) -> AuditContext:
    prefer = run.template.deck if run.template is not None else None
    try:
        submission = build_submission(solution_sources(archive))
    except Exception as exc:  # the static model must not sink the audit: static rules then report crashes
        log.exception("build_submission failed")
        run.warnings.append(f"static model failed: {type(exc).__name__}: {exc}")
        submission = None
    return AuditContext(
        archive=archive,
        run=run,
        problem=problem_info(decks, run.problem, prefer),
        submission=submission,
        transcript_events=_event_factory(archive),
        other_run_ids=set(other_run_ids),
    )


# ---------------------------------------------------------------------------------------------
# Running rules


def _crash_finding(module: ModuleType, exc: BaseException) -> Finding:
    meta = meta_of(module)
    tb = traceback.extract_tb(exc.__traceback__)
    where = f"{tb[-1].filename}:{tb[-1].lineno}" if tb else "?"
    return Finding(
        rule_id=meta.id,
        rule_name=meta.name,
        severity=Severity.INFO,
        effect=Effect.ADVISORY,
        file=None,
        line_start=None,
        line_end=None,
        quote="",
        explanation=f"rule crashed: {type(exc).__name__}: {exc} (at {where}); its evidence is missing from this audit",
        data={"crashed": True},
    )


_Feed = Callable[[TranscriptEvent], object]


def _feed_table(checkers: Sequence[tuple[ModuleType, Any, _Feed]]) -> dict[EventKind, tuple[_Feed, ...]]:
    """For each event kind, the bound feed() of the checkers that want it, in rule order.

    A Checker may declare `KINDS` (the event kinds its feed() acts on; feed must ignore every
    other kind): it is then only called for those. On a 400k-event transcript this skips about
    half of the nine checkers' calls per event. A Checker without KINDS gets every event.
    """
    return {
        kind: tuple(
            feed for _, checker, feed in checkers if getattr(checker, "KINDS", None) is None or kind in checker.KINDS
        )
        for kind in EventKind
    }


def run_rules(ctx: AuditContext, rules: Sequence[ModuleType] = RULES) -> list[Finding]:
    """Every rule over one context; crashes isolated; findings de-duplicated and sorted."""
    findings: list[Finding] = []
    checkers: list[tuple[ModuleType, Any]] = []
    for module in rules:
        meta = meta_of(module)
        try:
            if meta.kind is RuleKind.TRANSCRIPT:
                checkers.append((module, module.Checker(ctx)))
            else:
                findings.extend(module.check(ctx))
        except Exception as exc:  # a broken rule must not sink the audit
            log.exception("rule %s crashed", meta.id)
            findings.append(_crash_finding(module, exc))

    if checkers:
        alive = list(checkers)
        # One bound feed per checker for the whole stream (the table holds these same objects,
        # so a crashing feed maps back to its rule by identity).
        feeding = [(module, checker, checker.feed) for module, checker in alive]
        owners = {id(feed): (module, checker) for module, checker, feed in feeding}
        table = _feed_table(feeding)
        for name in transcript_paths(ctx.archive):
            if not alive:
                break
            for event in iter_events(ctx.archive.files[name].staged_path, name):
                for feed in table[event.kind]:
                    try:
                        feed(event)
                    except Exception as exc:
                        module, checker = owners[id(feed)]
                        log.exception("transcript rule %s crashed", meta_of(module).id)
                        findings.append(_crash_finding(module, exc))
                        alive = [p for p in alive if p[1] is not checker]
                        feeding = [f for f in feeding if f[1] is not checker]
                        table = _feed_table(feeding)
        for module, checker in alive:
            try:
                findings.extend(checker.finish())
            except Exception as exc:
                log.exception("transcript rule %s crashed in finish", meta_of(module).id)
                findings.append(_crash_finding(module, exc))
    return sort_findings(dedup_findings(findings))


def audit_findings(
    archive: UnpackedArchive,
    run: ParsedRun,
    decks: Sequence[DeckSnapshot],
    *,
    other_run_ids: frozenset[str] = frozenset(),
) -> tuple[list[Finding], AuditContext]:
    ctx = build_context(archive, run, decks, other_run_ids)
    return run_rules(ctx), ctx


def required_probes(findings: Sequence[Finding]) -> list[Probe]:
    """The empirical probes the findings ask for, in a stable order.

    Every finding that names a probe contributes (NEEDS_PROBE ones gate the verdict; advisory
    ones, such as a graph replaying live buffers, are confirmed by the same regrade).
    """
    wanted = {f.probe for f in findings if f.probe is not None and not f.data.get("crashed")}
    return [p for p in Probe if p in wanted]


def audit_context_facts(ctx: AuditContext, findings: Sequence[Finding]) -> dict[str, Any]:
    """Facts the report's summary and provenance sections print (kept on the verdict)."""
    archive, run = ctx.archive, ctx.run
    framework: str | None = None
    evidence: list[str] = []
    sub = ctx.submission
    # the static model's parse of a source, where it parsed exactly that text (no second parse)
    trees = {m.path: m.tree for m in sub.modules.values() if sub.sources.get(m.path) == m.source} if sub else {}
    try:
        from graders.framework import detect

        rep = detect(sub.sources if sub else solution_sources(archive), trees)
        framework = getattr(rep, "framework", None)
        evidence = list(getattr(rep, "evidence", []) or [])
    except Exception:  # graders.framework is optional for the report
        framework = None
    doc: str | None = None
    if archive.has(SOLUTION):
        text = archive.read_text(SOLUTION)
        parsed = sub.modules.get(SOLUTION) if sub else None
        try:
            doc = ast.get_docstring(parsed.tree if parsed is not None and parsed.source == text else ast.parse(text))
        except SyntaxError:
            doc = None
    kernels = getattr(sub, "triton", None)
    native = getattr(sub, "native", None)
    return {
        **run_facts(run),
        "archive_sha256": archive.archive_sha256,
        "archive_size": archive.archive_size,
        "archive_format": archive.archive_format,
        "deck": ctx.problem.deck if ctx.problem else None,
        "problem": run.problem,
        "problem_regime": ctx.problem.regime if ctx.problem else None,
        "problem_precision": ctx.problem.precision if ctx.problem else None,
        "framework": framework,
        "solution_doc": " ".join(doc.split())[:600] if doc else None,
        "framework_evidence": evidence[:6],
        "triton_kernels": len(kernels) if isinstance(kernels, list | tuple) else None,
        "native_sources": len(native) if isinstance(native, list | tuple) else None,
        "rules_run": len(RULES),
        "rules_crashed": sorted({f.rule_id for f in findings if f.data.get("crashed")}),
        "kaudit_version": kaudit_version(),
        "warnings": list(run.warnings[:20]),
    }


def attach_context(verdict: VerdictResult, facts: dict[str, Any], grade: GradeResult | None) -> VerdictResult:
    """Keep the audit's facts (and the regrade's provenance) on the verdict, for the report."""
    ctx = dict(facts)
    if grade is not None and grade.provenance is not None:
        ctx["grade_provenance"] = grade.provenance.to_dict()
    if grade is not None:
        # the regrade's own evidence: modes, the deciding outcome, FAIL lines, outputs, probe numbers
        ctx["regrade"] = grade.evidence()
    verdict.context = ctx
    return verdict


def audit_unpacked(
    archive: UnpackedArchive,
    run: ParsedRun,
    decks: Sequence[DeckSnapshot],
    *,
    grade: GradeResult | None = None,
    other_run_ids: frozenset[str] = frozenset(),
) -> VerdictResult:
    """Audit one unpacked archive: every rule, then synthesis (with the grade when given).

    The verdict pipeline (`audit_rules.pipeline.judge`) without a regrade.
    """
    from audit_rules.pipeline import judge

    return judge(archive, run, decks, grade=grade, other_run_ids=other_run_ids).verdict


def audit_path(
    path: Path,
    decks: Sequence[DeckSnapshot],
    *,
    grade: GradeResult | None = None,
    regrade_device: str | None = None,
    other_run_ids: frozenset[str] = frozenset(),
    regrade_timeout_s: float = 3600.0,
    limits: Limits | None = None,
    regrade_mode: str | None = None,
    allow_unsafe_sandbox: bool | None = None,
) -> VerdictResult:
    """Unpack `path` into a temporary folder, audit it, optionally regrade, clean up.

    With `regrade_device` ("cpu" or "cuda"), kaudit's own isolated regrade runs the check, the
    benchmark and the probes of the pipeline's policy (`audit_rules.pipeline.select_probes`),
    and the verdict is synthesized with that GradeResult (a `grade` passed in is then ignored).
    The library door onto `audit_rules.pipeline.judge_file`.
    `regrade_mode`: official | hardened | both (graders.regrade; None: the deck's default); ValueError when
    that mode cannot grade it.
    """
    from audit_rules.pipeline import RegradeRequest, judge_file

    req = (RegradeRequest(device=regrade_device, timeout_s=regrade_timeout_s, mode=regrade_mode,
                          allow_unsafe_sandbox=allow_unsafe_sandbox)
           if regrade_device is not None else None)
    return judge_file(Path(path), decks, limits=limits, regrade=req, grade=grade, other_run_ids=other_run_ids).verdict
