"""The verdict pipeline: audit -> (optional) regrade -> probes -> synthesis, once for every door.

`kaudit audit [--regrade]`, the ingest service, the regrade worker (``POST /runs/{id}/regrade``),
``kaudit reaudit`` and the library (`audit_rules.engine.audit_path`) all call `judge` (or
`judge_file`, which unpacks an archive first). What differs between the doors is only where the
archive comes from (a file, the blob store) and what is done with the verdict (printed, stored);
the decisions are made here, once:

* **archive limits**: `judge_file` unpacks with the `Limits` it is given (the service passes
  `Settings.limits`, the library the spec defaults, which are the settings' defaults too);
* **deck selection**: `select_deck`: the deck the run's template matched, else the first deck
  holding the problem with files on disk, else the first holding it at all;
* **staging**: `ingest.run.stage_solution` writes solution.py and its sidecars (split
  out of a public archive's solution.py) for the regrade, whatever the archive's origin;
* **probe selection**: `select_probes` (docs/verdicts.md, "Which probes run"): the contract
  probes every regrade runs, plus the probes the findings ask for. An explicit probe list (the
  API's ``probes``, ``kaudit audit --probes``) replaces the policy, in every door alike;
* **synthesis**: `audit_rules.synthesis.synthesize` with the findings and the GradeResult.

Nothing here knows about HTTP, queues or databases.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from audit_rules.base import Finding, Probe
from audit_rules.verdicts import VerdictResult
from graders.results import GradeResult
from ingest.model import DeckSnapshot, Limits, ParsedRun, UnpackedArchive

Progress = Callable[[str, dict[str, Any]], None]
RegradeFn = Callable[..., GradeResult]

# Probes every regrade runs, whatever the findings say. They run in the one warm probe process
# (a few extra forward calls each, no extra process start), and each tests a part of the call
# contract an honest kernel meets by construction: the output follows the current inputs and
# weights (same_storage_overwrite, weight_mutation), a repeated call and the benchmark's call
# pattern give the checked answer (repeat_calls, checked_vs_timed), the returned storage is
# reported (output_aliasing). On a GPU the two timing probes run too (l2_policy, stream_escape):
# a solution can defeat the timing contract from a compiled sidecar no static rule reads.
CONTRACT_PROBES: tuple[Probe, ...] = (
    Probe.SAME_STORAGE_OVERWRITE,
    Probe.WEIGHT_MUTATION,
    Probe.REPEAT_CALLS,
    Probe.OUTPUT_ALIASING,
    Probe.CHECKED_VS_TIMED,
    Probe.L2_POLICY,
    Probe.STREAM_ESCAPE,
)
# fresh_vs_warm needs a second, cold process (import and compile again): it runs when a finding
# asks for it (state that a warm process could carry from an earlier call).
CUDA_ONLY_PROBES = frozenset({Probe.L2_POLICY, Probe.STREAM_ESCAPE})


def select_probes(findings: Sequence[Finding], device: str) -> list[str]:
    """The probe-selection policy: the contract probes plus every probe a finding names.

    Probes that mean nothing on `device` (the timing probes on the CPU) are left out; a crashed
    rule's finding asks for nothing. Canonical order (graders.probes.ALL_PROBES).
    """
    wanted = set(CONTRACT_PROBES)
    wanted.update(f.probe for f in findings if f.probe is not None and not f.data.get("crashed"))
    if device != "cuda":
        wanted -= CUDA_ONLY_PROBES
    return [p.value for p in Probe if p in wanted]


def select_deck(decks: Sequence[DeckSnapshot], problem: str, prefer: str | None = None) -> DeckSnapshot | None:
    """The deck a run of `problem` is judged against (one choice for the audit and the regrade).

    The deck the run's template matched (`prefer`: an imported real deck and the bundled one may
    both hold a problem of that name), else the first deck holding the problem with files on
    disk, else the first holding it at all (its problem.yaml is then unknown).
    """
    holding = [d for d in decks if problem in d.problems]
    if prefer is not None:
        for d in holding:
            if d.name == prefer:
                return d
    with_root = [d for d in holding if d.root is not None]
    candidates = with_root or holding
    return candidates[0] if candidates else None


@dataclass(frozen=True)
class RegradeRequest:
    """Run kaudit's isolated regrade inside the pipeline (graders.regrade.regrade)."""

    device: str = "cuda"
    probes: Sequence[str] | None = None  # None: `select_probes`; a list: exactly those
    timeout_s: float = 3600.0
    lock: Any = None  # graders.gpu_lock.LockConfig; None: the default lock files (cuda only)
    gpu: int = 0
    progress: Progress | None = None
    run_dir: str = ""
    regrade_fn: RegradeFn | None = None  # graders.regrade.regrade unless a door passes its own
    mode: str | None = None  # official | hardened | both; None: the deck's default (graders.regrade)
    allow_unsafe_sandbox: bool | None = None  # None: the setting (graders.sandbox refuses without bwrap)
    build_deps: str | None = None  # DEST=SRC,... (graders.sandbox.parse_build_deps); None: KAUDIT_BUILD_DEPS
    # Where the staged solution and the regrade's own scratch live (a service passes
    # <data_dir>/scratch and a per-job prefix so `kaudit gc` finds a killed job's leftovers).
    scratch_dir: Path | None = None
    scratch_prefix: str = "kaudit-regrade-stage-"


@dataclass
class Judgement:
    """What the pipeline decided, and the evidence it decided on."""

    verdict: VerdictResult
    run_id: str
    findings: list[Finding]
    grade: GradeResult | None = None
    probes: list[str] = field(default_factory=list)  # the probe set the regrade was asked for
    regrade_skipped: str | None = None  # why a requested regrade did not run


def _regrade(archive: UnpackedArchive, run: ParsedRun, deck: DeckSnapshot, findings: Sequence[Finding],
             req: RegradeRequest) -> tuple[GradeResult, list[str]]:
    from ingest.run import stage_solution

    probes = list(req.probes) if req.probes is not None else select_probes(findings, req.device)
    fn: RegradeFn
    if req.regrade_fn is not None:
        fn = req.regrade_fn
    else:
        from graders.regrade import regrade

        fn = regrade
    assert run.problem is not None and deck.root is not None
    if req.progress is not None:
        req.progress("materialize", {"files": len(archive.files)})
    if req.scratch_dir is not None:
        Path(req.scratch_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=req.scratch_prefix, dir=req.scratch_dir) as tmp:
        sol_dir = stage_solution(archive, Path(tmp) / "solution")
        extra: dict[str, Any] = {"mode": req.mode} if req.mode else {}
        if req.scratch_dir is not None:
            extra["scratch_dir"] = Path(tmp)
        if req.allow_unsafe_sandbox is not None:
            extra["allow_unsafe_sandbox"] = req.allow_unsafe_sandbox
        if req.build_deps is not None:
            extra["build_deps"] = req.build_deps
        grade = fn(sol_dir, run.problem, Path(deck.root), device=req.device, probes=probes, lock=req.lock,
                   timeout_s=req.timeout_s, progress=req.progress, gpu=req.gpu, run_dir=req.run_dir, **extra)
    return grade, probes


def judge(
    archive: UnpackedArchive,
    run: ParsedRun,
    decks: Sequence[DeckSnapshot],
    *,
    regrade: RegradeRequest | None = None,
    grade: GradeResult | None = None,
    other_run_ids: frozenset[str] | set[str] = frozenset(),
    rules: Sequence[Any] | None = None,
) -> Judgement:
    """Audit one unpacked archive, regrade it when asked, and synthesize the verdict.

    `grade`: a GradeResult already measured (a stored regrade being re-judged); ignored when
    `regrade` runs a new one. `other_run_ids` may include the run's own id (it is removed).
    `rules`: the rule modules to run (default: every registered rule).
    """
    from audit_rules.engine import attach_context, audit_context_facts, build_context, run_rules
    from audit_rules.registry import RULES
    from audit_rules.synthesis import synthesize

    modules = RULES if rules is None else tuple(rules)
    ctx = build_context(archive, run, decks, frozenset(other_run_ids) - {run.run_id})
    findings = run_rules(ctx, modules)
    facts = audit_context_facts(ctx, findings)
    facts["rules_run"] = len(modules)
    probes: list[str] = []
    skipped: str | None = None
    if regrade is not None:
        prefer = run.template.deck if run.template is not None else None
        deck = select_deck(decks, run.problem, prefer) if run.problem else None
        if not run.has_solution:
            skipped = "the archive holds no solution.py"
        elif not run.problem:
            skipped = "the run's problem is unknown"
        elif deck is None or deck.root is None:
            skipped = f"no registered deck folder holds {run.problem}"
        else:
            grade, probes = _regrade(archive, run, deck, findings, regrade)
        if skipped is not None:
            facts["regrade_skipped"] = skipped
        facts["probes_selected"] = list(probes)
    verdict = attach_context(synthesize(run, findings, grade), facts, grade)
    return Judgement(verdict=verdict, run_id=run.run_id, findings=findings, grade=grade, probes=probes,
                     regrade_skipped=skipped)


def judge_file(
    path: Path,
    decks: Sequence[DeckSnapshot],
    *,
    limits: Limits | None = None,
    regrade: RegradeRequest | None = None,
    grade: GradeResult | None = None,
    other_run_ids: frozenset[str] | set[str] = frozenset(),
) -> Judgement:
    """Unpack `path` (under `limits`) into a temporary folder, `judge` it, clean up.

    Raises ingest.model.ArchiveRejected for an archive the limits or the format refuse.
    """
    from ingest.archive import safe_unpack
    from ingest.run import parse_run

    with tempfile.TemporaryDirectory(prefix="kaudit-audit-") as tmp:
        archive = safe_unpack(Path(path), Path(tmp) / "staged", limits)
        run = parse_run(archive, decks)
        return judge(archive, run, decks, regrade=regrade, grade=grade, other_run_ids=other_run_ids)
