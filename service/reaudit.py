"""Re-judge stored runs with the current rules: `kaudit reaudit`, `POST /reaudit`.

For every selected run the static, transcript, template and log audit runs again over the run's
STORED files (the blob store; nothing is unpacked from an upload again), in a pool of processes
whose initializer loads the decks, the other run ids and the rule modules once. The parent
compares each new verdict with the run's current verdict row and appends a new row
(`produced_by=reaudit`, `ruleset` = the current rule-set version) only where something that
matters changed: the verdict, reward_hack, contamination, or the set of decisive finding keys
(the rule findings that `justification.verdict/reward_hack/contamination` name).

Regrade results already stored stay evidence: when a run has a measurement of kaudit's own
regrade (`source = regrade:<job>`), the newest one is rebuilt into a `GradeResult` (with its
probe results) and the verdict is synthesized WITH it, through the same verdict pipeline
(`audit_rules.pipeline.judge`) the regrade worker uses. Nothing is regraded. A current verdict that is an operator override is left alone.

The diff names, per moved run, the verdict before and after and the rules responsible: finding
keys added and removed, the decisive ones first.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, fields
from types import ModuleType
from typing import Any

from sqlalchemy import or_, select

from audit_rules.verdicts import Producer, VerdictResult
from graders.results import GradeResult, ProbeResult, ProbeStatus, Provenance, ShapeResult
from ingest.model import DeckSnapshot
from service.blobs import BlobStore
from service.db import Database
from service.models import Measurement, ProbeResultRow, Run, VerdictRow
from service.ruleset import ruleset_version
from service.runs.repository import RunFilters, RunRepository
from service.settings import Settings

log = logging.getLogger(__name__)

DECISIVE_FIELDS = ("verdict", "reward_hack", "contamination")
WRITE_BATCH = 200


@dataclass
class ReauditParams:
    filters: RunFilters = field(default_factory=RunFilters)
    run_ids: list[str] | None = None  # only these runs (by run_id)
    since_version: str | None = None  # only runs whose current verdict was recorded under this rule set
    jobs: int = 1
    rules: list[str] | None = None  # rule ids to run (default: every registered rule)
    dry_run: bool = False  # compute and print the diff, append nothing
    reaudit_id: int | None = None  # the `reaudits` record this re-audit reports to (named in producer_detail)

    def to_dict(self) -> dict[str, Any]:
        f = {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in vars(self.filters).items()
             if v is not None and k != "hardware_in"}
        return {"filters": f, "run_ids": self.run_ids, "since_version": self.since_version, "jobs": self.jobs,
                "rules": self.rules, "dry_run": self.dry_run}


# ---------------------------------------------------------------------------------------------
# Selection


def select_runs(db: Database, params: ReauditParams) -> list[tuple[int, str]]:
    """(pk, run_id) of the runs to re-judge, in id order."""
    with db.read_session() as session:
        filters = RunRepository(session).resolve(params.filters)  # a short hardware name, as GET /runs reads it
    stmt = select(Run.id, Run.run_id).where(*filters.clauses())
    if params.run_ids is not None:
        stmt = stmt.where(Run.run_id.in_(params.run_ids))
    if params.since_version is not None:
        v = params.since_version
        stmt = stmt.join(VerdictRow, VerdictRow.id == Run.current_verdict_id)
        if v in ("none", "legacy"):
            stmt = stmt.where(VerdictRow.ruleset.is_(None))
        else:  # the full "<version>+<hash>", the bare hash, or the kaudit version alone
            stmt = stmt.where(or_(VerdictRow.ruleset == v, VerdictRow.ruleset.like(f"%+{v}"),
                                  VerdictRow.ruleset.like(f"{v}+%")))
    with db.read_session() as session:
        return [(int(pk), str(rid)) for pk, rid in session.execute(stmt.order_by(Run.id)).all()]


# ---------------------------------------------------------------------------------------------
# Stored regrade evidence -> GradeResult


def grade_from_rows(m: Measurement, probes: Sequence[ProbeResultRow]) -> GradeResult:
    """Rebuild the GradeResult a regrade job stored (service.worker.engine._finish wrote these rows)."""
    prov_raw = dict(m.provenance or {})
    names = {f.name for f in fields(Provenance)}
    prov: Provenance | None = None
    if all(n in prov_raw for n in names if n != "extra"):
        prov = Provenance(**{k: v for k, v in prov_raw.items() if k in names})
    shape_names = {f.name for f in fields(ShapeResult)}
    shapes = [ShapeResult(**{k: v for k, v in s.items() if k in shape_names}) for s in (m.shapes or [])
              if isinstance(s, dict) and {"shape_index", "shape", "ms", "tflops", "gbps", "fraction"} <= s.keys()]
    return GradeResult(
        correct=m.correct,
        check_lines=[str(x) for x in prov_raw.get("check_lines") or []],
        benchmark_lines=[str(x) for x in prov_raw.get("benchmark_lines") or []],
        peak_fraction=m.peak_fraction,
        shapes=shapes,
        failure_reason=prov_raw.get("failure_reason"),
        infra_failure=False,  # an infra failure never writes a measurement
        framework=prov_raw.get("framework"),
        provenance=prov,
        probes=[ProbeResult(probe=p.probe, status=ProbeStatus(p.status), summary=p.summary,
                            numbers=dict(p.numbers or {}), device=p.device, smoke=p.smoke,
                            shape_index=p.shape_index) for p in probes],
        detail=prov_raw.get("detail"),
        # regrade modes (graders.official), stored by the worker beside the provenance
        mode=str(prov_raw.get("mode") or "hardened"),
        decided_by=prov_raw.get("decided_by"),
        official=prov_raw.get("official") if isinstance(prov_raw.get("official"), dict) else None,
        hardened=prov_raw.get("hardened") if isinstance(prov_raw.get("hardened"), dict) else None,
        disagreements=[str(d) for d in prov_raw.get("disagreements") or []],
        build_fallback=prov_raw.get("build_fallback") if isinstance(prov_raw.get("build_fallback"), dict) else None,
    )


# ---------------------------------------------------------------------------------------------
# Comparing verdicts


def _finding_key(rule_id: str, file: str | None, line: int | None) -> str:
    return f"{rule_id}@{file or '-'}:{line or 0}"


def decisive_keys(justification: dict[str, Any]) -> set[str]:
    """The rule findings (KAnnn@file:line) that decide verdict, reward_hack or contamination."""
    out: set[str] = set()
    for name in DECISIVE_FIELDS:
        for key in justification.get(name) or []:
            k = str(key).split("<-", 1)[0]
            if k.startswith("KA") and "@" in k:
                out.add(k)
    return out


@dataclass
class Judged:
    verdict: str
    reward_hack: bool
    contamination: str
    decisive: set[str]
    findings: set[str]

    def label(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "reward_hack": self.reward_hack, "contamination": self.contamination}


def judged_row(row: VerdictRow) -> Judged:
    return Judged(row.verdict, bool(row.reward_hack), row.contamination, decisive_keys(row.justification or {}),
                  {_finding_key(f.rule_id, f.file, f.line_start) for f in row.findings})


def judged_result(v: VerdictResult) -> Judged:
    return Judged(v.verdict.value, bool(v.reward_hack), v.contamination.value, decisive_keys(v.justification),
                  {f.key for f in v.findings})


def _rule(key: str) -> str:
    return key.split("@", 1)[0]


def describe_change(old: Judged | None, new: Judged) -> dict[str, Any] | None:
    """None when nothing that matters moved; else the diff entry (without run identity)."""
    if old is not None and (old.verdict, old.reward_hack, old.contamination, old.decisive) == (
            new.verdict, new.reward_hack, new.contamination, new.decisive):
        return None
    old_f = old.findings if old else set()
    old_d = old.decisive if old else set()
    added, removed = sorted(new.findings - old_f), sorted(old_f - new.findings)
    d_added, d_removed = sorted(new.decisive - old_d), sorted(old_d - new.decisive)
    responsible = sorted({_rule(k) for k in d_added + d_removed}) or sorted({_rule(k) for k in added + removed})
    return {
        "from": old.label() if old else None,
        "to": new.label(),
        "rules": responsible,
        "decisive_added": d_added,
        "decisive_removed": d_removed,
        "findings_added": added,
        "findings_removed": removed,
    }


# ---------------------------------------------------------------------------------------------
# The per-process judging state (loaded once by the pool initializer)


@dataclass
class _State:
    db: Database
    blobs: BlobStore
    decks: list[DeckSnapshot]
    run_ids: frozenset[str]
    rules: tuple[ModuleType, ...] | None
    ruleset: str
    reaudit_id: int | None = None


_STATE: _State | None = None


def _load_rules(rule_ids: Sequence[str] | None) -> tuple[ModuleType, ...] | None:
    if rule_ids is None:
        return None
    from audit_rules.registry import rules_by_id

    known = rules_by_id()
    unknown = [r for r in rule_ids if r not in known]
    if unknown:
        raise ValueError(f"unknown rule id(s): {', '.join(unknown)}")
    return tuple(known[r] for r in sorted(set(rule_ids)))


def init_worker(database_url: str, data_dir: str, rule_ids: list[str] | None, reaudit_id: int | None = None) -> None:
    """Pool initializer: one engine, the decks, every run id and the rule modules, once per process."""
    global _STATE
    import audit_rules.engine  # noqa: F401  (imports every rule module once, before the first run)
    from service.decks.service import DeckService

    settings = Settings(database_url=database_url, data_dir=data_dir)
    db = Database(settings)
    blobs = BlobStore(settings.blob_dir)
    with db.read_session() as session:
        ids = RunRepository(session).run_ids()
    _STATE = _State(db, blobs, DeckService(db, blobs).snapshots(), ids, _load_rules(rule_ids), ruleset_version(),
                    reaudit_id)


def _judge(state: _State, unpacked: Any, parsed: Any, grade: GradeResult | None, others: frozenset[str]) -> VerdictResult:
    from audit_rules.pipeline import judge

    # the same verdict pipeline as ingest and the regrade worker (a rule subset for a what-if)
    return judge(unpacked, parsed, state.decks, grade=grade, other_run_ids=others, rules=state.rules).verdict


# Module-level memos of the audit library keyed by identity of one submission's parse (a
# PyModule / AST node): each entry keeps a parsed submission alive. They are bounded LRUs now
# (audit_rules/memo.py: at most 128 modules / 4096 bodies), but entries never serve a later run
# (a new submission each time), so the re-audit worker still empties them after every run and
# holds no parse beyond the run it judges (bench: docs/bench-reaudit.md).
_PER_SUBMISSION_MEMOS = (
    ("audit_rules.rules.static._caches", ("_MUTATED", "_STATE", "_CACHE")),
    ("audit_rules.rules.static._support", ("_GLOBALS_CACHE",)),
    ("audit_rules.source_model", ("_BODY_CACHE",)),
)


def drop_per_submission_memos() -> None:
    import sys

    from audit_rules.memo import IdentityMemo

    for module_name, names in _PER_SUBMISSION_MEMOS:
        module = sys.modules.get(module_name)
        for name in names:
            memo = getattr(module, name, None)
            if isinstance(memo, (dict, IdentityMemo)):
                memo.clear()


def judge_one(run_pk: int) -> dict[str, Any]:
    """Re-judge one stored run (in a pool process). Returns a picklable outcome."""
    try:
        return _judge_one(run_pk)
    finally:
        drop_per_submission_memos()


def _judge_one(run_pk: int) -> dict[str, Any]:
    state = _STATE
    assert state is not None, "init_worker was not called"
    t0 = time.perf_counter()
    out: dict[str, Any] = {"run_pk": run_pk}
    try:
        from ingest.run import parse_run
        from service.runs.rehydrate import unpacked_from_store

        with state.db.read_session() as session:
            repo = RunRepository(session)
            run = session.get(Run, run_pk)
            if run is None:
                return {**out, "error": "run is gone"}
            out["run_id"] = run.run_id
            artifacts = list(repo.artifacts(run.id))
            current = repo.verdict(run.current_verdict_id)
            m = session.scalars(select(Measurement).where(Measurement.run_id == run.id,
                                                          Measurement.source.like("regrade:%"))
                                .order_by(Measurement.id.desc()).limit(1)).first()
            probes = list(session.scalars(select(ProbeResultRow).where(ProbeResultRow.measurement_id == m.id)
                                          .order_by(ProbeResultRow.id))) if m is not None else []
            session.expunge_all()
        out["current_verdict_id"] = current.id if current is not None else None
        if current is not None and current.produced_by == Producer.OPERATOR.value:
            return {**out, "skipped": "current verdict is an operator override"}
        missing = [a.path for a in artifacts if not state.blobs.exists(a.blob_key)]
        if missing:
            return {**out, "error": f"stored files missing from the blob store: {', '.join(missing[:5])}"}
        unpacked = unpacked_from_store(run, artifacts, state.blobs)
        parsed = parse_run(unpacked, state.decks)
        grade = grade_from_rows(m, probes) if m is not None else None
        verdict = _judge(state, unpacked, parsed, grade, state.run_ids - {run.run_id})
        verdict.produced_by = Producer.REAUDIT
        detail = (f"reaudit {state.reaudit_id}" if state.reaudit_id is not None else "reaudit") + \
            f" under rules {state.ruleset}"
        if m is not None:
            detail += f", with the stored regrade of job {m.job_id} (measurement {m.id}) as evidence; not regraded"
            out["regrade_evidence"] = m.job_id
        verdict.producer_detail = detail
        change = describe_change(judged_row(current) if current is not None else None, judged_result(verdict))
        if change is not None:
            out["change"] = change
            out["verdict"] = verdict
    except Exception as exc:  # one broken run must not sink the re-audit
        log.exception("reaudit of run %s failed", run_pk)
        out["error"] = f"{type(exc).__name__}: {exc}"
        out["traceback"] = traceback.format_exc()[-2000:]
    out["seconds"] = round(time.perf_counter() - t0, 4)
    return out


# ---------------------------------------------------------------------------------------------
# Driving a re-audit


@dataclass
class ReauditResult:
    ruleset: str
    examined: int = 0
    changed: int = 0
    unchanged: int = 0
    skipped: int = 0
    errors: int = 0
    appended: int = 0
    wall_s: float = 0.0
    moves: Counter[str] = field(default_factory=Counter)
    diff: list[dict[str, Any]] = field(default_factory=list)
    problems: list[dict[str, Any]] = field(default_factory=list)  # errors and skips, per run
    judge_s: list[float] = field(default_factory=list)  # per run, inside its pool process

    def summary(self) -> dict[str, Any]:
        js = sorted(self.judge_s)
        per_run = ({"p50": js[len(js) // 2], "p95": js[min(len(js) - 1, int(len(js) * 0.95))], "max": js[-1],
                    "sum": round(sum(js), 3)} if js else None)
        return {"ruleset": self.ruleset, "examined": self.examined, "changed": self.changed,
                "unchanged": self.unchanged, "skipped": self.skipped, "errors": self.errors,
                "appended": self.appended, "wall_s": round(self.wall_s, 3),
                "runs_per_s": round(self.examined / self.wall_s, 2) if self.wall_s > 0 else None,
                "judge_s": per_run, "moves": dict(sorted(self.moves.items()))}

    def to_dict(self) -> dict[str, Any]:
        return {**self.summary(), "diff": self.diff, "problems": self.problems}


def _outcomes(settings: Settings, pks: list[int], params: ReauditParams, mp_context: str | None,
              always_pool: bool = False) -> Iterator[dict[str, Any]]:
    args = (settings.database_url, str(settings.data_dir), params.rules, params.reaudit_id)
    if not pks:
        return
    if not always_pool and (params.jobs <= 1 or len(pks) <= 1):
        init_worker(*args)
        for pk in pks:
            yield judge_one(pk)
        return
    ctx = multiprocessing.get_context(mp_context) if mp_context else None
    # One run per task: per-run cost is heavy-tailed (p50 ~0.1 s, the largest real solution ~2 s),
    # so chunks of consecutive runs leave one process finishing a heavy chunk alone; a task's own
    # overhead (pickling a pk and an outcome dict) is well under a millisecond.
    chunk = 1
    with ProcessPoolExecutor(max_workers=params.jobs, mp_context=ctx, initializer=init_worker,
                             initargs=args) as pool:
        yield from pool.map(judge_one, pks, chunksize=chunk)


def _write(db: Database, batch: list[dict[str, Any]], ruleset: str) -> int:
    """Append the changed verdicts of a batch in one transaction; a run whose current verdict moved
    meanwhile (a regrade finished) is left alone: its new verdict was judged with the current rules."""
    written = 0
    with db.session() as session, session.begin():
        repo = RunRepository(session)
        for o in batch:
            run = session.get(Run, o["run_pk"])
            if run is None or run.current_verdict_id != o["current_verdict_id"]:
                o["change"]["written"] = False
                o["change"]["not_written"] = "the run's current verdict changed while re-auditing"
                continue
            row = repo.append_verdict(run, o["verdict"])
            row.ruleset = ruleset
            o["change"]["verdict_id"] = row.id
            o["change"]["written"] = True
            written += 1
    return written


def reaudit(settings: Settings, db: Database, params: ReauditParams, *, mp_context: str | None = None,
            on_progress: Callable[[ReauditResult, int], None] | None = None,
            selected: list[tuple[int, str]] | None = None, always_pool: bool = False) -> ReauditResult:
    """Re-judge the selected runs; append verdict rows where something changed; return the diff.

    `selected` is the (pk, run_id) list when the caller already selected (POST /reaudit counts it
    before answering); `always_pool` judges in worker processes even with one job (a server must
    not judge in its own process: the GIL would stall its requests).
    """
    _load_rules(params.rules)  # bad rule ids fail here, before any pool starts
    t0 = time.perf_counter()
    if selected is None:
        selected = select_runs(db, params)
    res = ReauditResult(ruleset=ruleset_version())
    pending: list[dict[str, Any]] = []

    def flush() -> None:
        if pending and not params.dry_run:
            res.appended += _write(db, pending, res.ruleset)
        pending.clear()

    for o in _outcomes(settings, [pk for pk, _ in selected], params, mp_context, always_pool):
        res.examined += 1
        if isinstance(o.get("seconds"), float):
            res.judge_s.append(o["seconds"])
        if "error" in o:
            res.errors += 1
            res.problems.append({"run_id": o.get("run_id"), "error": o["error"]})
        elif "skipped" in o:
            res.skipped += 1
            res.problems.append({"run_id": o.get("run_id"), "skipped": o["skipped"]})
        elif "change" in o:
            res.changed += 1
            ch = o["change"]
            before = ch["from"]["verdict"] if ch["from"] else "none"
            res.moves[f"{before}->{ch['to']['verdict']}"] += 1
            ch_entry = {"run_id": o["run_id"], **ch}
            if "regrade_evidence" in o:
                ch_entry["regrade_evidence_job"] = o["regrade_evidence"]
            o["change"] = ch_entry
            res.diff.append(ch_entry)
            pending.append(o)
            if len(pending) >= WRITE_BATCH:
                flush()
        else:
            res.unchanged += 1
        if on_progress is not None:
            on_progress(res, len(selected))
    flush()
    res.wall_s = time.perf_counter() - t0
    return res


def default_jobs() -> int:
    return max(1, min(8, os.cpu_count() or 1))
