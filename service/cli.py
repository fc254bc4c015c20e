"""`kaudit`: the command-line door onto the same services the REST API uses.

Every rejection (a bad archive, a bad setting, an unknown run) exits with code 2 and one line on
stderr naming the reason; other failures exit 1.
"""

from __future__ import annotations

import csv
import io
import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError

from ingest.model import ArchiveRejected
from service.runs.repository import RunFilters
from service.settings import Settings, describe_validation_error

app = typer.Typer(name="kaudit", help="Audit and provenance service for AI-agent GPU kernel runs.", no_args_is_help=True)
runs_app = typer.Typer(help="Query stored runs.", no_args_is_help=True)
deck_app = typer.Typer(help="Registered decks.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens (stored hashed; roles reader, operator, admin).", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
app.add_typer(deck_app, name="deck")
app.add_typer(token_app, name="token")

EXPORT_COLUMNS = (
    "run_id", "problem", "model", "harness", "reasoning_effort", "hardware", "deck", "started_at",
    "verdict", "reward_hack", "contamination", "template_mutated", "correct", "correct_source",
    "failure_reason", "measurement_status", "publish_grade", "metric_name", "metric_value",
    "metric_source", "produced_by", "verdict_at", "archive_sha256",
)


def reject(message: str) -> NoReturn:
    typer.echo(message.replace("\n", " "), err=True)
    raise typer.Exit(2)


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        reject(f"invalid settings: {describe_validation_error(exc)}")


_MIGRATED: set[str] = set()
REPO_DATA = Path(__file__).resolve().parents[1] / "data"  # where scripts/serve.sh keeps its data


def _say_where(settings: Settings) -> None:
    """An embedded SQLite file that does not exist yet is about to be created: say where (once)."""
    if not settings.is_sqlite or settings.database_url in _MIGRATED:
        return
    from sqlalchemy.engine import make_url

    db_file = make_url(settings.database_url).database
    if not db_file or db_file == ":memory:" or Path(db_file).exists():
        return
    hint = ""
    if (REPO_DATA / "kaudit.db").exists() and Path(db_file).resolve() != (REPO_DATA / "kaudit.db").resolve():
        hint = f"; the server of scripts/serve.sh uses {REPO_DATA} (set KAUDIT_DATA_DIR={REPO_DATA} to share it)"
    typer.echo(f"kaudit: no database at {db_file}: creating a new, empty one{hint}", err=True)


def _services(settings: Settings | None = None) -> Any:
    from service.context import Services

    settings = settings or _settings()
    _say_where(settings)
    if settings.auto_migrate and settings.database_url not in _MIGRATED:
        from service.migrate import upgrade_head

        upgrade_head(settings)
        _MIGRATED.add(settings.database_url)
    return Services.build(settings)


def _filters(
    model: str | None, harness: str | None, problem: str | None, deck: str | None, hardware: str | None,
    verdict: str | None, reward_hack: bool | None, contamination: str | None, publish_grade: bool | None,
    started_from: datetime | None, started_to: datetime | None,
) -> RunFilters:
    from audit_rules.verdicts import Contamination, Verdict

    for name, value, enum in (("verdict", verdict, Verdict), ("contamination", contamination, Contamination)):
        allowed = [e.value for e in enum]
        if value is not None and value not in allowed:
            reject(f"unknown {name} {value!r}; allowed: {', '.join(allowed)}")
    return RunFilters(
        model=model, harness=harness, problem=problem, deck=deck, hardware=hardware, verdict=verdict,
        reward_hack=reward_hack, contamination=contamination, publish_grade=publish_grade,
        started_from=started_from, started_to=started_to,
    )


Opt = typer.Option
ModelOpt = Annotated[str | None, Opt(help="filter: model")]
HarnessOpt = Annotated[str | None, Opt(help="filter: harness")]
ProblemOpt = Annotated[str | None, Opt(help="filter: problem")]
DeckOpt = Annotated[str | None, Opt(help="filter: deck")]
HardwareOpt = Annotated[str | None, Opt(help="filter: hardware (GPU name)")]
VerdictOpt = Annotated[str | None, Opt(help="filter: current verdict")]
HackOpt = Annotated[bool | None, Opt("--reward-hack/--no-reward-hack", help="filter: reward_hack")]
ContamOpt = Annotated[str | None, Opt(help="filter: contamination")]
PublishOpt = Annotated[bool | None, Opt("--publish-grade/--no-publish-grade", help="filter: publish_grade")]
FromOpt = Annotated[datetime | None, Opt(help="started_at >= this")]
ToOpt = Annotated[datetime | None, Opt(help="started_at < this")]


@app.command()
def serve(
    host: Annotated[str | None, Opt(help="bind address (default KAUDIT_HOST)")] = None,
    port: Annotated[int | None, Opt(help="port (default KAUDIT_PORT)")] = None,
) -> None:
    """Run the REST API (and the in-process worker when KAUDIT_WORKER_MODE=inprocess)."""
    import uvicorn

    from service.app import create_app

    settings = _settings()
    # start_worker: the in-process worker (KAUDIT_WORKER_MODE=inprocess) and the periodic gc
    api = create_app(settings, svc=_services(settings), start_worker=True)
    uvicorn.run(api, host=host or settings.host, port=port or settings.port, log_level="info")


@app.command()
def ingest(paths: Annotated[list[Path], typer.Argument(help="run archives (.tar, .tar.gz, .zip)")]) -> None:
    """Ingest archives into the configured database (exit 2 on the first rejected archive)."""
    svc = _services()
    rejected = 0
    for path in paths:
        if not path.is_file():
            reject(f"{path}: no such file")
        try:
            outcome = svc.ingest.ingest_file(path)
        except ArchiveRejected as exc:
            _audit(svc, "upload", None, f"refused:{exc.reason.value}", {"file": str(path)})
            typer.echo(f"{path}: rejected: {exc.reason.value}: {exc.message}".replace("\n", " "), err=True)
            rejected += 1
            continue
        except Exception as exc:
            from service.runs.endpoints import is_storage_full
            from service.runs.service import RunConflict

            if isinstance(exc, RunConflict):
                _audit(svc, "upload", exc.run_id, "refused:run_id_conflict", {"file": str(path)})
                typer.echo(f"{path}: rejected: run_id_conflict: {exc}", err=True)
                rejected += 1
                continue
            if is_storage_full(exc):
                reject(f"{path}: insufficient_storage: no space left to store it; nothing was stored ({exc})")
            raise
        run = outcome.run
        _audit(svc, "upload", run.run_id, "created" if outcome.created else "existing", {"file": str(path)})
        state = "stored" if outcome.created else "already stored"
        typer.echo(f"{run.run_id}\t{state}\tverdict={run.verdict}")
    if rejected:
        raise typer.Exit(2)


def _summary_line(run: Any) -> str:
    started = run.started_at.isoformat() if run.started_at else "-"
    peak = f"{run.peak_fraction:.4f}" if run.peak_fraction is not None else "-"
    return "\t".join(
        [run.run_id, run.problem or "-", run.model or "-", run.harness or "-", started, run.verdict or "-", peak]
    )


@runs_app.command("list")
def runs_list(
    model: ModelOpt = None, harness: HarnessOpt = None, problem: ProblemOpt = None, deck: DeckOpt = None,
    hardware: HardwareOpt = None, verdict: VerdictOpt = None, reward_hack: HackOpt = None,
    contamination: ContamOpt = None, publish_grade: PublishOpt = None, started_from: FromOpt = None,
    started_to: ToOpt = None,
    sort: Annotated[str, Opt(help="started_at | ingested | peak_fraction | run_id")] = "started_at",
    order: Annotated[str, Opt(help="asc | desc")] = "desc",
    limit: Annotated[int, Opt(min=1, max=500)] = 50,
    cursor: Annotated[str | None, Opt(help="cursor printed by the previous page")] = None,
    as_json: Annotated[bool, Opt("--json", help="print JSON")] = False,
) -> None:
    """List runs (same filters and cursor as GET /runs)."""
    from service.runs.repository import SORT_COLUMNS, BadCursor
    from service.runs.schemas import RunSummary

    if sort not in SORT_COLUMNS or order not in ("asc", "desc"):
        reject(f"bad sort/order: {sort} {order}")
    svc = _services()
    filters = _filters(model, harness, problem, deck, hardware, verdict, reward_hack, contamination,
                       publish_grade, started_from, started_to)
    try:
        rows, next_cursor = svc.runs.page(filters, sort=sort, order=order, limit=limit, cursor=cursor)
    except BadCursor as exc:
        reject(f"bad cursor: {exc}")
    if as_json:
        items = [RunSummary.model_validate(r).model_dump(mode="json") for r in rows]
        typer.echo(json.dumps({"items": items, "next_cursor": next_cursor}, indent=2))
        return
    for r in rows:
        typer.echo(_summary_line(r))
    if next_cursor:
        typer.echo(f"# next: --cursor {next_cursor}", err=True)


@runs_app.command("show")
def runs_show(run_id: str) -> None:
    """Show one run as JSON (metadata, logs, template integrity, verdict, findings, measurements)."""
    from service.runs.schemas import detail_from

    svc = _services()
    data = svc.runs.detail(run_id)
    if data is None:
        reject(f"no run {run_id}")
    typer.echo(detail_from(data).model_dump_json(indent=2))


def export_records(svc: Any, filters: RunFilters) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for run, v in svc.runs.export_rows(filters):
        metric = (v.metric or {}) if v is not None else {}
        out.append(
            {
                "run_id": run.run_id, "problem": run.problem, "model": run.model, "harness": run.harness,
                "reasoning_effort": run.reasoning_effort, "hardware": run.hardware, "deck": run.deck,
                "started_at": run.started_at.isoformat() if run.started_at else None,
                "verdict": v.verdict if v else None, "reward_hack": v.reward_hack if v else None,
                "contamination": v.contamination if v else None,
                "template_mutated": v.template_mutated if v else None, "correct": v.correct if v else None,
                "correct_source": v.correct_source if v else None,
                "failure_reason": v.failure_reason if v else None,
                "measurement_status": v.measurement_status if v else None,
                "publish_grade": v.publish_grade if v else None,
                "metric_name": metric.get("name"), "metric_value": metric.get("value"),
                "metric_source": metric.get("source"), "produced_by": v.produced_by if v else None,
                "verdict_at": v.created_at.isoformat() if v else None, "archive_sha256": run.archive_sha256,
            }
        )
    return out


@app.command()
def export(
    fmt: Annotated[str, Opt("--format", help="csv | json | parquet")] = "csv",
    out: Annotated[Path | None, Opt("--out", help="output file (default stdout; required for parquet)")] = None,
    model: ModelOpt = None, harness: HarnessOpt = None, problem: ProblemOpt = None, deck: DeckOpt = None,
    hardware: HardwareOpt = None, verdict: VerdictOpt = None, reward_hack: HackOpt = None,
    contamination: ContamOpt = None, publish_grade: PublishOpt = None, started_from: FromOpt = None,
    started_to: ToOpt = None,
) -> None:
    """Export the current verdict of every (filtered) run."""
    if fmt not in ("csv", "json", "parquet"):
        reject(f"unknown format {fmt!r} (csv, json, parquet)")
    if fmt == "parquet" and out is None:
        reject("--out FILE is required for parquet")
    svc = _services()
    records = export_records(svc, _filters(model, harness, problem, deck, hardware, verdict, reward_hack,
                                           contamination, publish_grade, started_from, started_to))
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(records) if records else pa.table({c: pa.array([], pa.string()) for c in EXPORT_COLUMNS})
        assert out is not None
        pq.write_table(table, out)
        typer.echo(f"wrote {len(records)} rows to {out}", err=True)
        return
    if fmt == "json":
        text = json.dumps(records, indent=2)
    else:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(EXPORT_COLUMNS))
        writer.writeheader()
        writer.writerows(records)
        text = buf.getvalue()
    if out is None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    else:
        out.write_text(text)
        typer.echo(f"wrote {len(records)} rows to {out}", err=True)


@deck_app.command("import")
def deck_import(
    directory: Annotated[Path, typer.Argument(help="a KBH-style deck: <problem>/ folders with the deck files")],
    name: Annotated[str, Opt("--name", help="deck name")],
    replace: Annotated[bool, Opt(help="replace a registered deck of that name with different files")] = False,
    harness: Annotated[Path | None, Opt(help="the harness library the deck's check.py/benchmark.py import "
                                             "(e.g. a KernelBench-Hard checkout's src/)")] = None,
) -> None:
    """Register a deck (and its harness) with per-file hashes; copy both into the data directory."""
    from graders.decks import DeckTampered
    from service.decks.service import DeckConflict

    svc = _services()
    try:
        deck, changed = svc.decks.import_dir(directory, name, replace=replace, harness=harness)
    except (DeckConflict, FileNotFoundError, DeckTampered, ValueError) as exc:
        _audit(svc, "deck_import", name, f"refused:{type(exc).__name__}", {"directory": str(directory)})
        reject(f"deck import rejected: {exc}")
    _audit(svc, "deck_import", deck.name, "registered" if changed else "unchanged",
           {"directory": str(directory), "sha256": deck.content_sha256, "replace": replace})
    problems = svc.decks.get(deck.name)
    n = len({f.problem for f in problems.files}) if problems else 0
    typer.echo(f"{deck.name}\t{'registered' if changed else 'unchanged'}\tproblems={n}\tsha256={deck.content_sha256}"
               + (f"\tharness={deck.harness_name}" if deck.harness_name else ""))


@deck_app.command("list")
def deck_list() -> None:
    """List registered decks."""
    svc = _services()
    for d in svc.decks.list():
        typer.echo(f"{d.name}\t{d.source}\tproblems={len({f.problem for f in d.files})}\t{d.content_sha256[:12]}")


def _archives_in(paths: list[Path]) -> list[Path]:
    """The archive files named, a folder standing for the archives directly inside it (sorted)."""
    from graders.runformat import is_archive_name

    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and is_archive_name(p.name))
            if not found:
                reject(f"{path}: no run archives (.tar, .tar.gz, .tgz, .zip) in this folder")
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            reject(f"{path}: no such file")
    return out


# Set once per pool process by _audit_init (fork or spawn), read by _audit_one.
_AUDIT_STATE: dict[str, Any] = {}


def _audit_init(state: dict[str, Any]) -> None:
    _AUDIT_STATE.clear()
    _AUDIT_STATE.update(state)


def _audit_one(path: str) -> dict[str, Any]:
    """One archive through the verdict pipeline; a JSON-ready line (errors are lines too)."""
    from audit_rules.pipeline import judge_file

    st = _AUDIT_STATE
    t0 = time.perf_counter()
    try:
        j = judge_file(Path(path), st["decks"], limits=st["limits"], regrade=st["regrade"],
                       other_run_ids=st["others"])
    except ArchiveRejected as exc:
        return {"path": path, "error": f"rejected: {exc.reason.value}: {exc.message}".replace("\n", " "),
                "rejected": True}
    except ValueError as exc:
        if st["regrade"] is None:
            raise
        # graders.regrade refuses a mode the deck cannot grade (e.g. official without a harness)
        return {"path": path, "error": f"regrade refused: {exc}".replace("\n", " "), "rejected": True}
    except Exception as exc:  # one broken archive must not stop the others: it is a line too
        return {"path": path, "error": f"{type(exc).__name__}: {exc}".replace("\n", " "), "rejected": False}
    v = j.verdict
    if st["full"]:
        return {"path": path, "run_id": j.run_id, **v.to_dict(), "seconds": round(time.perf_counter() - t0, 3)}
    return {
        "path": path, "run_id": j.run_id, "verdict": v.verdict.value, "reward_hack": v.reward_hack,
        "contamination": v.contamination.value, "correct": v.correct, "failure_reason": v.failure_reason,
        "measurement_status": v.measurement_status.value, "publish_grade": v.publish_grade,
        "decisive": list(v.justification.get("verdict", [])), "probes_required": list(v.probes_required),
        "probes_run": [f"{p['probe']}:{p['status']}" for p in v.probes_run],
        "regrade_skipped": j.regrade_skipped, "reasons": list(v.reasons),
        "regrade": (v.context or {}).get("regrade"),
        "seconds": round(time.perf_counter() - t0, 3),
    }


@app.command()
def audit(
    paths: Annotated[list[Path], typer.Argument(help="run archives, or folders of run archives; audited without a "
                                                     "server, nothing stored")],
    as_json: Annotated[bool, Opt("--json", help="print the verdict object as JSON")] = False,
    do_regrade: Annotated[bool, Opt("--regrade", help="also run kaudit's regrade and the probes")] = False,
    device: Annotated[str, Opt(help="cpu | cuda (with --regrade)")] = "cuda",
    probes: Annotated[str | None, Opt(help="comma-separated probe set (with --regrade; default: the "
                                           "pipeline's probe policy)")] = None,
    jobs: Annotated[int, Opt(min=1, max=64, help="archives audited at once (a process pool)")] = 1,
    mode: Annotated[str | None, Opt(help="official | hardened | both (with --regrade; default: both when the "
                                         "deck has a harness, else hardened)")] = None,
    unsafe_no_sandbox: Annotated[bool, Opt("--unsafe-no-sandbox", help="with --regrade: run the solution as a plain "
                                           "subprocess when bubblewrap is unusable (weaker; recorded)")] = False,
) -> None:
    """Audit archives through the verdict pipeline: registered decks of the configured DB plus the bundled deck.

    One archive file: the verdict (a summary, or the verdict object with --json). Several archives
    or a folder: one JSON line per archive, in the order given, as each is done (--json: the
    whole verdict object on the line); a rejected archive is a line with "error" and exit code 2.
    """
    from audit_rules.pipeline import RegradeRequest
    from graders.gpu_lock import LockConfig

    if device not in ("cpu", "cuda"):
        reject(f"unknown device {device!r} (cpu, cuda)")
    probe_list = [p.strip() for p in probes.split(",") if p.strip()] if probes else None
    if probe_list is not None:
        from graders.probes import ALL_PROBES

        unknown = sorted(set(probe_list) - set(ALL_PROBES))
        if unknown:
            reject(f"unknown probe(s): {', '.join(unknown)}; known: {', '.join(ALL_PROBES)}")
        if not do_regrade:
            reject("--probes needs --regrade")
    archives = _archives_in(paths)
    if mode is not None and mode not in ("official", "hardened", "both"):
        reject(f"unknown mode {mode!r} (official, hardened, both)")
    if mode is not None and not do_regrade:
        reject("--mode needs --regrade")
    settings = _settings()
    svc = _services(settings)
    regrade = None
    if do_regrade:
        lock = LockConfig(path_template=settings.gpu_lock_path, timeout_s=max(settings.gpu_busy_timeout_s, 1.0))
        regrade = RegradeRequest(device=device, probes=probe_list, timeout_s=settings.regrade_timeout_s,
                                 lock=lock if device == "cuda" else None, mode=mode,
                                 allow_unsafe_sandbox=True if (unsafe_no_sandbox or settings.allow_unsafe_sandbox) else None,
                                 build_deps=settings.build_deps or None)
    state = {"decks": svc.decks.snapshots(), "limits": settings.limits, "regrade": regrade,
             "others": frozenset(svc.runs.run_ids()), "full": as_json}
    svc.db.dispose()  # nothing below touches the database (and pool processes must not share it)
    single = len(archives) == 1 and len(paths) == 1 and not paths[0].is_dir()
    if single:
        _audit_init(state)
        line = _audit_one(str(archives[0]))
        if "error" in line:
            if line["rejected"]:
                reject(line["error"])
            typer.echo(f"{archives[0]}: {line['error']}", err=True)
            raise typer.Exit(1)
        skipped = line.get("regrade_skipped") or (line.get("context") or {}).get("regrade_skipped")
        if skipped:
            typer.echo(f"kaudit: regrade skipped: {skipped}; the verdict is the static audit's", err=True)
        if as_json:
            for key in ("path", "run_id", "seconds"):
                line.pop(key)
            typer.echo(json.dumps(line, indent=2))
        else:
            typer.echo(f"{line['run_id']}\tverdict={line['verdict']}\treward_hack={line['reward_hack']}")
            for reason in line["reasons"]:
                typer.echo(f"  - {reason}")
            evidence = line.get("regrade") or (line.get("context") or {}).get("regrade")
            if evidence:
                for ev in regrade_evidence_lines(evidence):
                    typer.echo(f"  {ev}")
        return
    rejected = crashed = 0
    for line in _audit_stream([str(a) for a in archives], state, jobs):
        if "error" in line:
            rejected += bool(line["rejected"])
            crashed += not line["rejected"]
        sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
        sys.stdout.flush()
    if rejected:
        raise typer.Exit(2)
    if crashed:
        raise typer.Exit(1)


def _audit_stream(archives: list[str], state: dict[str, Any], jobs: int) -> Any:
    """Lines in the order given; with jobs > 1, a process pool audits ahead of the printing."""
    if jobs == 1 or len(archives) == 1:
        _audit_init(state)
        yield from map(_audit_one, archives)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with ProcessPoolExecutor(min(jobs, len(archives)), mp_context=ctx, initializer=_audit_init,
                             initargs=(state,)) as pool:
        yield from pool.map(_audit_one, archives, chunksize=1)


@app.command()
def reaudit(
    model: ModelOpt = None, harness: HarnessOpt = None, problem: ProblemOpt = None, deck: DeckOpt = None,
    hardware: HardwareOpt = None, verdict: VerdictOpt = None, reward_hack: HackOpt = None,
    contamination: ContamOpt = None, publish_grade: PublishOpt = None, started_from: FromOpt = None,
    started_to: ToOpt = None,
    run_id: Annotated[list[str] | None, Opt("--run-id", help="only this run (repeatable)")] = None,
    since_version: Annotated[str | None, Opt(help="only runs whose current verdict was recorded under this "
                                                  "rule set (version+hash, hash, version, or 'none')")] = None,
    jobs: Annotated[int, Opt(min=1, max=64, help="worker processes")] = 1,
    rules: Annotated[str | None, Opt(help="comma-separated rule ids to run instead of every rule (what-if)")] = None,
    dry_run: Annotated[bool, Opt(help="print the diff, append nothing")] = False,
    as_json: Annotated[bool, Opt("--json", help="print the whole result as JSON")] = False,
) -> None:
    """Re-judge stored runs with the current rules; append a verdict only where something changed."""
    from service.reaudit import ReauditParams
    from service.reaudits.service import ReauditRejected, ReauditService

    svc = _services()
    params = ReauditParams(
        filters=_filters(model, harness, problem, deck, hardware, verdict, reward_hack, contamination,
                         publish_grade, started_from, started_to),
        run_ids=list(run_id) if run_id else None, since_version=since_version, jobs=jobs,
        rules=[r.strip() for r in rules.split(",") if r.strip()] if rules else None, dry_run=dry_run,
    )
    try:
        row, result = ReauditService(svc.settings, svc.db).run_here(
            params, mp_context="fork" if sys.platform == "linux" else None)
    except ReauditRejected as exc:
        _audit(svc, "reaudit", None, "refused", {"error": str(exc)[:500]})
        reject(f"reaudit rejected: {exc}")
    if result is None:
        failed = ReauditService(svc.settings, svc.db).get(row.id)
        _audit(svc, "reaudit", None, "failed", {"reaudit_id": row.id})
        typer.echo(f"reaudit {row.id} failed: {failed.error if failed else '?'}", err=True)
        raise typer.Exit(1)
    _audit(svc, "reaudit", ",".join(run_id)[:255] if run_id else None, "dry_run" if dry_run else "done",
           {"summary": result.summary(), "rules": rules, "reaudit_id": row.id})
    if as_json:
        typer.echo(json.dumps({"id": row.id, **result.to_dict()}, indent=2))
        if result.errors:
            raise typer.Exit(1)
        return
    for d in result.diff:
        before = f"{d['from']['verdict']}{'/hack' if d['from']['reward_hack'] else ''}" if d["from"] else "none"
        after = f"{d['to']['verdict']}{'/hack' if d['to']['reward_hack'] else ''}"
        rules_txt = ",".join(d["rules"]) or "-"
        plus = " ".join(f"+{k}" for k in d["decisive_added"] or d["findings_added"])
        minus = " ".join(f"-{k}" for k in d["decisive_removed"] or d["findings_removed"])
        typer.echo(f"{d['run_id']}\t{before} -> {after}\trules={rules_txt}\t{' '.join(x for x in (plus, minus) if x)}")
    for p in result.problems:
        typer.echo(f"{p['run_id']}\t{'error: ' + p['error'] if 'error' in p else 'skipped: ' + p['skipped']}",
                   err=True)
    s = result.summary()
    typer.echo(f"# reaudit {row.id} (GET /reaudits/{row.id}), ruleset {s['ruleset']}: examined {s['examined']}, changed {s['changed']}, appended "
               f"{s['appended']}, errors {s['errors']}, skipped {s['skipped']}, {s['wall_s']} s", err=True)
    if result.errors:
        raise typer.Exit(1)


@app.command()
def check(
    solution: Annotated[Path, typer.Argument(help="solution.py")],
    problem: Annotated[str, Opt(help="problem id, e.g. 01_fp8_gemm")],
    deck: Annotated[str, Opt(help="deck name")] = "hard",
    device: Annotated[str, Opt(help="cpu | cuda")] = "cuda",
    shapes: Annotated[str, Opt(help="all | small")] = "all",
) -> None:
    """kaudit's own correctness check (delegates to graders.cli.check_main)."""
    from graders.cli import check_main

    raise typer.Exit(check_main(solution, problem, deck, device, shapes, deck_root=_deck_root(deck, problem)))


@app.command()
def bench(
    solution: Annotated[Path, typer.Argument(help="solution.py")],
    problem: Annotated[str, Opt(help="problem id")],
    deck: Annotated[str, Opt(help="deck name")] = "hard",
    device: Annotated[str, Opt(help="cpu | cuda")] = "cuda",
    shapes: Annotated[str, Opt(help="all | small")] = "all",
    window_ms: Annotated[float | None, Opt(help="kernel time each shape's trials hold on a GPU "
                                                "(default 1000 ms; 0: the deck's num_perf_trials)")] = None,
) -> None:
    """kaudit's own benchmark (delegates to graders.cli.bench_main)."""
    from graders.cli import bench_main

    if window_ms is not None and not window_ms >= 0:  # NaN too
        reject(f"--window-ms must be >= 0, got {window_ms}")
    raise typer.Exit(bench_main(solution, problem, deck, device, shapes, deck_root=_deck_root(deck, problem),
                                window_ms=window_ms))


def _deck_root(deck: str, problem: str) -> Path | None:
    """The problems folder of deck `deck`: the bundled kernels/<deck>/ (None: graders resolve it)
    or the verified copy an import materialized in the configured data directory."""
    from graders.cli import REPO_ROOT
    from graders.decks import DeckNotFound, DeckTampered, find_deck, registered_names

    if Path(problem).is_dir() or (REPO_ROOT / "kernels" / deck).is_dir():
        return None
    settings = _settings()
    try:
        return find_deck(deck, settings.data_dir).root
    except DeckNotFound:
        known = ", ".join(["hard", *registered_names(settings.data_dir)])
        reject(f"no deck {deck!r} (bundled or imported into {settings.data_dir}); known: {known}")
    except DeckTampered as exc:
        reject(f"deck {deck!r} refused: {exc}")


@app.command()
def worker(
    gpus: Annotated[str | None, Opt(help="all (every GPU nvidia-smi lists), or GPU indices such as 0,1 "
                                         "(default KAUDIT_WORKER_GPUS); one worker process per GPU")] = None,
    pool: Annotated[str | None, Opt(help="GPU pool (the GPU kind) to take jobs from "
                                         "(default KAUDIT_WORKER_GPU_POOL)")] = None,
    once: Annotated[bool, Opt(help="process at most one job per GPU, then exit")] = False,
) -> None:
    """Run regrade workers: one process per GPU, each pinned with CUDA_VISIBLE_DEVICES (service.worker.multi)."""
    from service.worker.multi import GpuSpecError, parse_gpus, run_gpu_worker, run_supervisor

    settings = _settings()
    _services(settings)  # migrations, when KAUDIT_AUTO_MIGRATE is on
    try:
        gpu_list = parse_gpus(gpus, settings.gpu_indices)
    except GpuSpecError as exc:
        reject(str(exc))
    the_pool = pool or settings.worker_gpu_pool
    if len(gpu_list) == 1:
        code = run_gpu_worker(settings, gpu_list[0], the_pool, once)
    else:
        code = run_supervisor(gpu_list, the_pool, once)
    raise typer.Exit(int(code or 0))


@app.command("regrade")
def regrade_cmd(
    run_id: str,
    force: Annotated[bool, Opt(help="enqueue even if an identical job exists")] = False,
    wait: Annotated[bool, Opt(help="wait until the job finishes, printing its phase")] = False,
    probes: Annotated[str | None, Opt(help="comma-separated probe set (default: the pipeline's probe policy)")] = None,
    mode: Annotated[str | None, Opt(help="official | hardened | both (default: both when the deck has a "
                                         "harness, else hardened)")] = None,
) -> None:
    """Enqueue a regrade of a stored run."""
    from service.jobs.service import ForcePending, NotRegradable, UnknownMode, UnknownProbe, UnknownRun

    svc = _services()
    try:
        outcome = svc.jobs.enqueue_regrade(
            run_id, force=force, probes=[p.strip() for p in probes.split(",")] if probes else None, mode=mode
        )
    except UnknownRun:
        reject(f"no run {run_id}")
    except (NotRegradable, UnknownProbe, UnknownMode) as exc:
        reject(f"cannot regrade {run_id}: {exc}")
    except ForcePending as exc:
        _audit(svc, "regrade", run_id, "refused:force_regrade_pending", {"force": force})
        reject(f"force_regrade_pending: {exc}")
    job = outcome.job
    _audit(svc, "regrade", run_id, f"queued:{job.id}" if outcome.created else f"existing:{job.id}",
           {"force": force, "probes": probes})
    if not outcome.created and job.state == "failed":
        from service.runs.endpoints import failed_job_message

        reject(failed_job_message(job))
    typer.echo(f"job {job.id}\t{'enqueued' if outcome.created else 'already enqueued'}\tstate={job.state}")
    if not wait:
        return
    last = None
    while True:
        current = svc.jobs.get(job.id)
        if current is None:
            reject(f"job {job.id} vanished")
        line = f"job {current.id}\tstate={current.state}\tphase={current.phase}\tattempts={current.attempts}"
        if line != last:
            typer.echo(line)
            last = line
        if current.state in ("succeeded", "failed", "cancelled"):
            if current.state != "succeeded" and current.error:
                typer.echo(f"job {current.id} error:\n{current.error.strip()}", err=True)
            elif current.state == "succeeded" and current.result:
                r = current.result
                typer.echo(f"job {current.id}\tverdict={r.get('verdict')}\tpeak_fraction={r.get('peak_fraction')}"
                           f"\tpublish_grade={r.get('publish_grade')}")
                for text in regrade_evidence_lines(r.get("regrade") or {}):
                    typer.echo(f"  {text}")
            raise typer.Exit(0 if current.state == "succeeded" else 1)
        time.sleep(1.0)


def regrade_evidence_lines(ev: dict[str, Any]) -> list[str]:
    """A regrade's evidence as plain lines: modes, who decided, each mode's outcome and FAIL
    line, per-shape ms, probe numbers, disagreements (GradeResult.evidence())."""
    if not ev:
        return []
    out = [f"regrade: mode={ev.get('mode')} decided_by={ev.get('decided_by')} correct={ev.get('correct')} "
           f"peak_fraction={ev.get('peak_fraction')} failure_reason={ev.get('failure_reason')}"
           + (" INFRA" if ev.get("infra_failure") else "")]
    for name in ("official", "hardened"):
        m = ev.get(name) or {}
        if not m:
            continue
        shapes = " ".join(f"{s.get('shape', s.get('shape_index'))}:{s.get('ms')}" for s in m.get("shapes") or [])
        out.append(f"{name}: status={m.get('status')} correct={m.get('correct')} peak_fraction={m.get('peak_fraction')}"
                   + (f" ms[{shapes}]" if shapes else ""))
        line = m.get("fail_line") or (m.get("detail") if m.get("status") != "graded" else None)
        if line:
            out.append(f"  {name} says: {line}")
    for p in ev.get("probes") or []:
        nums = ", ".join(f"{k}={v}" for k, v in list((p.get("numbers") or {}).items())[:6])
        out.append(f"probe {p.get('probe')}: {p.get('status')}: {p.get('summary')}" + (f" ({nums})" if nums else ""))
    for d in ev.get("disagreements") or []:
        out.append(f"DISAGREEMENT: {d}")
    fb = ev.get("build_fallback")
    if isinstance(fb, dict) and fb.get("note"):
        out.append(f"BUILD FALLBACK: {fb['note']}")
    return out


def _audit(svc: Any, action: str, target: str | None, outcome: str, detail: dict[str, Any]) -> None:
    from service.auth import cli_actor

    svc.audit.record(actor=cli_actor(), role=None, door="cli", action=action, target=target, outcome=outcome,
                     detail=detail)


@token_app.command("add")
def token_add(
    name: Annotated[str, typer.Argument(help="who the token is for (shown in the audit log)")],
    role: Annotated[str, Opt(help="reader, operator or admin")] = "operator",
) -> None:
    """Issue a token; it is printed once (only a salted hash is stored)."""
    from service.auth import ROLE_NAMES, Role, TokenStore

    if role not in ROLE_NAMES:
        reject(f"unknown role {role!r}; allowed: {', '.join(ROLE_NAMES)}")
    svc = _services()
    try:
        row, token = TokenStore(svc.db).add(name, Role[role])
    except ValueError as exc:
        reject(f"token add rejected: {exc}")
    _audit(svc, "token_add", name, "created", {"role": role, "key_id": row.key_id})
    typer.echo(token)
    typer.echo(f"# token {name!r} ({role}, key {row.key_id}): shown once, store it now", err=True)


@token_app.command("list")
def token_list() -> None:
    """List tokens (names, roles, key ids, use; never the secret)."""
    from service.auth import TokenStore

    svc = _services()
    typer.echo("name\trole\tkey_id\tcreated_at\tlast_used_at\trevoked_at")
    for t in TokenStore(svc.db).listing():
        typer.echo(f"{t.name}\t{t.role}\t{t.key_id}\t{t.created_at.isoformat()}\t"
                   f"{t.last_used_at.isoformat() if t.last_used_at else '-'}\t"
                   f"{t.revoked_at.isoformat() if t.revoked_at else '-'}")


@token_app.command("revoke")
def token_revoke(name: str) -> None:
    """Revoke a token: refused from the next request on."""
    from service.auth import TokenStore

    svc = _services()
    try:
        row = TokenStore(svc.db).revoke(name)
    except LookupError as exc:
        reject(str(exc))
    _audit(svc, "token_revoke", name, "revoked", {"key_id": row.key_id})
    typer.echo(f"{name}\trevoked\t{row.revoked_at.isoformat() if row.revoked_at else ''}")


@app.command()
def gc(
    dry_run: Annotated[bool, Opt(help="only say what would be removed")] = False,
    min_age: Annotated[float | None, Opt(help="seconds a leftover must be untouched (default KAUDIT_GC_MIN_AGE_S)",
                                         min=0)] = None,
    as_json: Annotated[bool, Opt("--json", help="print the report as JSON")] = False,
) -> None:
    """Remove staging leftovers, scratch folders of dead regrades and blobs no row references."""
    from service.gc import GarbageCollector

    svc = _services()
    report = GarbageCollector(svc.settings, svc.db, svc.blobs, min_age_s=min_age).run(dry_run=dry_run)
    if not dry_run:
        _audit(svc, "gc", None, "done", report.summary())
    if as_json:
        typer.echo(json.dumps({**report.summary(), "removed": {
            "staging": report.staging, "scratch": report.scratch, "blob_tmp": report.blob_tmp, "blobs": report.blobs,
        }}, indent=2))
        return
    s = report.summary()
    verb = "would remove" if dry_run else "removed"
    typer.echo(f"gc {verb}: staging {s['staging']}, scratch {s['scratch']}, blob temp files {s['blob_tmp']}, "
               f"orphan blobs {s['blobs']} ({s['bytes_freed']} bytes); kept {s['kept_blobs']} found in use")


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)


__all__ = ["app", "main"]


if __name__ == "__main__":
    main()
