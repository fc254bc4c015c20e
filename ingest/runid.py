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
