"""Re-audits as recorded jobs: validate, record, run (in the caller or a background thread), report.

`kaudit reaudit` runs one in its own process and records it; `POST /reaudit` validates the request
(a bad filter, an unknown rule or run id, or a selection that matches nothing is refused before
anything is stored), records it as `running` with the number of runs selected, answers 202 with
the record's id, and re-judges in a background thread of the server whose worker processes are
SPAWNED (a fork of a threaded server can inherit a held lock). `GET /reaudits/{id}` polls it.

While it runs, a heartbeat thread publishes progress (done/changed/errors) and a heartbeat with
the owner (host:pid) in the record's `summary`. A `running` record whose heartbeat is older than
STALE_AFTER_S belongs to a process that died (a server restart): the next read or start marks it
failed, saying so, so it never blocks new re-audits. The verdict rows it appended before dying
stay (each was judged and written whole, in batches); re-running it appends nothing for them.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from audit_rules.verdicts import Contamination, Verdict
from service.db import Database
from service.models import ReauditRow, utcnow
from service.reaudit import ReauditParams, ReauditResult, _load_rules, reaudit, select_runs
from service.reaudits.repository import ReauditRepository
from service.ruleset import ruleset_version
from service.settings import Settings

log = logging.getLogger(__name__)

HEARTBEAT_S = 2.0
STALE_AFTER_S = 60.0
MAX_PROBLEMS_KEPT = 500


class ReauditRejected(ValueError):
    """The request cannot run as given (bad filter, unknown rule or run id, nothing selected)."""


class ReauditBusy(RuntimeError):
    def __init__(self, running_id: int) -> None:
        super().__init__(f"re-audit {running_id} is still running; poll GET /reaudits/{running_id}")
        self.running_id = running_id


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class _Progress:
    total: int
    done: int = 0
    changed: int = 0
    errors: int = 0
    skipped: int = 0

    def snapshot(self) -> dict[str, int]:
        return {"total": self.total, "done": self.done, "changed": self.changed, "errors": self.errors,
                "skipped": self.skipped}


class _Heartbeat(threading.Thread):
    def __init__(self, service: ReauditService, reaudit_id: int, progress: _Progress) -> None:
        super().__init__(daemon=True, name=f"kaudit-reaudit-{reaudit_id}-heartbeat")
        self.service, self.reaudit_id, self.progress = service, reaudit_id, progress
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(HEARTBEAT_S):
            try:
                self.service._beat(self.reaudit_id, self.progress)
            except Exception:  # a DB hiccup: the next beat tries again; staleness has slack
                log.exception("re-audit %s: heartbeat failed", self.reaudit_id)


class ReauditService:
    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db

    # -- validation and selection ------------------------------------------------------------
    def validate(self, params: ReauditParams, *, require_match: bool) -> list[tuple[int, str]]:
        """Refuse what cannot run (ReauditRejected, nothing stored); return the (pk, run_id) selected."""
        f = params.filters
        for name, value, enum in (("verdict", f.verdict, Verdict), ("contamination", f.contamination, Contamination)):
            allowed = [e.value for e in enum]
            if value is not None and value not in allowed:
                raise ReauditRejected(f"unknown {name} {value!r}; allowed: {', '.join(allowed)}")
        if f.started_from is not None and f.started_to is not None and f.started_from >= f.started_to:
            raise ReauditRejected(f"started_from {f.started_from.isoformat()} is not before "
                                  f"started_to {f.started_to.isoformat()}: the range selects nothing")
        if params.rules is not None and not params.rules:
            raise ReauditRejected("rules is an empty list: name at least one rule id, or leave it out for every rule")
        try:
            _load_rules(params.rules)
        except ValueError as exc:
            raise ReauditRejected(str(exc)) from exc
        if params.run_ids is not None:
            if not params.run_ids:
                raise ReauditRejected("run_ids is an empty list: name at least one run, or leave it out")
            with self.db.read_session() as session:
                unknown = ReauditRepository(session).unknown_run_ids(params.run_ids)
            if unknown:
                more = f" (and {len(unknown) - 10} more)" if len(unknown) > 10 else ""
                raise ReauditRejected(f"no stored run {', '.join(unknown[:10])}{more}")
        selected = select_runs(self.db, params)
        if require_match and not selected:
            raise ReauditRejected("no stored run matches these filters; nothing to re-audit")
        return selected

    # -- records -----------------------------------------------------------------------------
    def reap_stale(self) -> None:
        """Fail `running` records whose owner stopped heart-beating (the process died)."""
        now = utcnow()
        with self.db.session() as session, session.begin():
            repo = ReauditRepository(session)
            for row in repo.running():
                beat = _heartbeat_of(row)
                if beat is not None and now - beat < timedelta(seconds=STALE_AFTER_S):
                    continue
                owner = (row.summary or {}).get("owner", "?")
                repo.mark_failed(row.id, f"the process running it ({owner}) stopped: no heartbeat since "
                                         f"{beat.isoformat() if beat else 'it started'}; verdicts it appended "
                                         f"before stopping stay, a new re-audit appends nothing for them", now)

    def record(self, params: ReauditParams, selected: Sequence[tuple[int, str]], *, exclusive: bool) -> ReauditRow:
        """Store the `running` record (committed before any judging starts)."""
        self.reap_stale()
        now = utcnow()
        with self.db.session() as session, session.begin():
            repo = ReauditRepository(session)
            if exclusive:
                running = repo.running()
                if running:
                    raise ReauditBusy(running[0].id)
            row = repo.add(ReauditRow(state="running", params=params.to_dict(), ruleset=ruleset_version(),
                                      total=len(selected), done=0, changed=0, errors=0,
                                      summary={"owner": owner_id(), "heartbeat_at": now.isoformat(),
                                               "progress": {"total": len(selected), "done": 0}},
                                      diff=[], created_at=now))
        return row

    def get(self, reaudit_id: int) -> ReauditRow | None:
        self.reap_stale()
        with self.db.read_session() as session:
            return ReauditRepository(session).get(reaudit_id)

    def listing(self, limit: int = 50) -> Sequence[ReauditRow]:
        self.reap_stale()
        with self.db.read_session() as session:
            return ReauditRepository(session).listing(limit)

    # -- running -----------------------------------------------------------------------------
    def execute(self, row: ReauditRow, params: ReauditParams, selected: list[tuple[int, str]], *,
                mp_context: str | None, always_pool: bool, beat_thread: bool) -> ReauditResult | None:
        """Run a recorded re-audit to its end and write its outcome into the record.

        `beat_thread`: publish the heartbeat from a thread (the server: its pool is spawned, so a
        thread is safe). Without it the progress callback beats, throttled (the CLI forks its pool,
        and a fork must not catch another thread holding a lock). Returns the result, or None when
        it failed (the record says why)."""
        params.reaudit_id = row.id
        progress = _Progress(total=len(selected))
        last_beat = [time.monotonic()]

        def on_progress(res: ReauditResult, total: int) -> None:
            progress.done, progress.changed = res.examined, res.changed
            progress.errors, progress.skipped = res.errors, res.skipped
            if not beat_thread and time.monotonic() - last_beat[0] >= HEARTBEAT_S:
                last_beat[0] = time.monotonic()
                self._beat(row.id, progress)

        beat = _Heartbeat(self, row.id, progress) if beat_thread else None
        if beat is not None:
            beat.start()
        try:
            result = reaudit(self.settings, self.db, params, mp_context=mp_context, on_progress=on_progress,
                             selected=selected, always_pool=always_pool)
        except Exception as exc:
            if beat is not None:
                beat.stop_event.set()
                beat.join(timeout=10)
            log.exception("re-audit %s failed", row.id)
            with self.db.session() as session, session.begin():
                ReauditRepository(session).update_running(
                    row.id, state="failed", error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-4000:]}",
                    finished_at=utcnow(), done=progress.done, changed=progress.changed, errors=progress.errors)
            return None
        if beat is not None:
            beat.stop_event.set()
            beat.join(timeout=10)
        summary: dict[str, Any] = {**result.summary(), "owner": owner_id(), "dry_run": params.dry_run,
                                   "problems": result.problems[:MAX_PROBLEMS_KEPT],
                                   "problems_total": len(result.problems)}
        with self.db.session() as session, session.begin():
            ReauditRepository(session).update_running(
                row.id, state="succeeded", finished_at=utcnow(), done=result.examined, changed=result.changed,
                errors=result.errors, summary=summary, diff=result.diff)
        return result

    def run_here(self, params: ReauditParams, *, mp_context: str | None) -> tuple[ReauditRow, ReauditResult | None]:
        """`kaudit reaudit`: validate, record and run in this process (a forked pool for --jobs > 1)."""
        selected = self.validate(params, require_match=False)
        row = self.record(params, selected, exclusive=False)
        return row, self.execute(row, params, selected, mp_context=mp_context, always_pool=False, beat_thread=False)

    def start_background(self, params: ReauditParams) -> ReauditRow:
        """Validate, record (refusing while another re-audit runs) and run in a background thread."""
        selected = self.validate(params, require_match=True)
        row = self.record(params, selected, exclusive=True)
        thread = threading.Thread(target=self.execute, args=(row, params, selected),
                                  kwargs={"mp_context": "spawn", "always_pool": True, "beat_thread": True},
                                  daemon=True, name=f"kaudit-reaudit-{row.id}")
        thread.start()
        return row

    def _beat(self, reaudit_id: int, progress: _Progress) -> None:
        now = utcnow()
        snap = progress.snapshot()
        with self.db.session() as session, session.begin():
            ReauditRepository(session).update_running(
                reaudit_id, done=snap["done"], changed=snap["changed"], errors=snap["errors"],
                summary={"owner": owner_id(), "heartbeat_at": now.isoformat(), "progress": snap})


def _heartbeat_of(row: ReauditRow) -> datetime | None:
    raw = (row.summary or {}).get("heartbeat_at")
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        return None
