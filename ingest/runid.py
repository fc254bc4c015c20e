"""KBH run ids: `YYYYMMDD_HHMMSS_<harness>_<model-slug>_<problem>[_<pid>_<n>]`.

The model slug itself holds underscores (`/ : [ ]` and spaces become `_`), so the id cannot be
split on `_`: the problem is found by matching known problem ids against the END of the id
(after an optional collision suffix), and the harness is the first component after the
timestamp. result.json is authoritative wherever it has the field; this is the fallback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ingest.model import RunIdParts

MAX_RUN_ID_CHARS = 200
# KBH ids are `[A-Za-z0-9._+-]` (the model slug maps `/ : [ ]` and spaces to `_`); a run id is a
# URL path segment (`/runs/{run_id}`) and a folder name, so nothing else is accepted.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


def run_id_problem(run_id: object) -> str | None:
    """Why `run_id` is not a valid run id, or None when it is."""
    if not isinstance(run_id, str):
        return f"run_id must be a string, not {type(run_id).__name__}"
    if len(run_id) > MAX_RUN_ID_CHARS:
        return f"run_id of {len(run_id)} characters (limit {MAX_RUN_ID_CHARS})"
    if not RUN_ID.fullmatch(run_id):
        return (
            f"run_id {run_id[:60]!r} may hold only ASCII letters, digits and . _ + - "
            "and must start with a letter or digit"
        )
    return None


_TS = re.compile(r"^(\d{8}_\d{6})_(.*)$")
_COLLISION = re.compile(r"(_\d+_\d+)$")
# Routed harness variants (`zai-claude`, `or-fable`) use hyphens, so `_` still ends the harness.


def _match_problem(body: str, problems: list[str]) -> tuple[str, str] | None:
    """Return (prefix, problem) when `body` ends with `_<problem>` for a known problem."""
    for p in sorted(problems, key=len, reverse=True):
        if body.endswith("_" + p):
            return body[: -len(p) - 1], p
    return None


def parse_run_id(run_id: str, known_problems: Iterable[str]) -> RunIdParts:
    problems = [p for p in known_problems if p]
    m = _TS.match(run_id)
    ts: str | None = None
    body = run_id
    if m:
        ts, body = m.group(1), m.group(2)

    suffix: str | None = None
    found = _match_problem(body, problems)
    if found is None:
        cm = _COLLISION.search(body)
        if cm:
            cand = _match_problem(body[: cm.start()], problems)
            if cand is not None:
                found, suffix = cand, cm.group(1)
    if found is None:
        return RunIdParts(
            timestamp=ts, harness=_harness_only(body), model_slug=None, problem=None, collision_suffix=None
        )
    prefix, problem = found
    harness, _, slug = prefix.partition("_")
    return RunIdParts(
        timestamp=ts,
        harness=harness or None,
        model_slug=slug or None,
        problem=problem,
        collision_suffix=suffix,
    )


def _harness_only(body: str) -> str | None:
    head = body.split("_", 1)[0]
    return head or None
