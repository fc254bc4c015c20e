"""The rule-set version recorded on every verdict row: `<kaudit version>+<hash of the judging code>`.

The hash covers every Python source of `audit_rules/` (rules, engine, synthesis) and `ingest/`
(the parsing the rules read), so a changed rule, a changed synthesis or a changed parser gives
a new version even when the package version was not bumped. `kaudit reaudit --since-version V`
selects runs whose current verdict was recorded under V.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JUDGING_PACKAGES = ("audit_rules", "ingest")


@cache
def ruleset_hash() -> str:
    h = hashlib.sha256()
    for package in JUDGING_PACKAGES:
        base = ROOT / package
        for path in sorted(base.rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            h.update(path.relative_to(ROOT).as_posix().encode())
            h.update(b"\0")
            h.update(path.read_bytes())
            h.update(b"\0")
    return h.hexdigest()[:16]


@cache
def ruleset_version() -> str:
    from audit_rules import kaudit_version

    return f"{kaudit_version()}+{ruleset_hash()}"[:64]
