"""Template integrity, computed by kaudit itself whatever result.json claims.

An agent that edits check.py, loosens a tolerance in problem.yaml or rewrites the shared eval
modules grades itself. The harness's own `template_mutated` flag is a claim made by the
process under audit, so it is kept only for comparison. We compare, by sha256:

- `template_files/` (the deck as handed to the agent) and `repo/problems/<problem>/` (the
  deck as left at the end) against the registered canonical deck: any deck file modified,
  deleted or created is a mutation. Non-deck files in `repo/problems/<problem>/` (the agent's
  solution.py, __pycache__, scratch) are ignored; a created deck-named file counts;
- `repo/src/` against `trusted_src/` when both exist (the harness's shared eval modules).

Which deck: among registered decks that hold the problem, the one whose files best match
`template_files/` (else `repo/problems/<problem>/`). A snapshot that matches no file of any
registered deck is UNKNOWN_DECK (a deck we do not hold), not evidence of mutation; so is one
that matches fewer than half the files of the closest deck (another deck version sharing a
PROMPT.txt must not read as five "modified" files). template_files/ is taken before the
session, so it differing from the deck wholesale is a deck-version question, not an edit.
For such runs the archive still proves edits by itself: repo/problems/<problem>/ against its
own template_files/ and repo/src/ against trusted_src/.
"""

from __future__ import annotations

from collections.abc import Sequence

from ingest.decks import DECK_FILES
from ingest.model import (
    DeckSnapshot,
    FileDiff,
    FileHash,
    IntegrityStatus,
    TemplateIntegrity,
    UnpackedArchive,
)

TEMPLATE_AREA = "template_files"
REPO_PROBLEMS_AREA = "repo/problems"
REPO_SRC_AREA = "repo/src"


def _area_files(archive: UnpackedArchive, prefix: str) -> dict[str, str]:
    """Deck-named files directly inside `prefix/` -> sha256."""
    out: dict[str, str] = {}
    for path, sf in archive.files.items():
        if not path.startswith(prefix + "/"):
            continue
        rel = path[len(prefix) + 1 :]
        if "/" in rel or rel not in DECK_FILES:
            continue
        out[rel] = sf.sha256
    return out


def _has_any(archive: UnpackedArchive, prefix: str) -> bool:
    return any(p.startswith(prefix + "/") for p in archive.files)


def _template_prefix(archive: UnpackedArchive, problem: str | None) -> str:
    """KBH snapshots the deck flat in template_files/; tolerate template_files/<problem>/ too."""
    if problem and _has_any(archive, f"{TEMPLATE_AREA}/{problem}") and not _area_files(archive, TEMPLATE_AREA):
        return f"{TEMPLATE_AREA}/{problem}"
    return TEMPLATE_AREA


def _score(files: dict[str, str], expected: dict[str, FileHash]) -> tuple[int, int]:
    matches = sum(1 for n, sha in files.items() if n in expected and expected[n].sha256 == sha)
    misses = sum(1 for n in set(files) | set(expected) if n not in files or n not in expected
                 or expected[n].sha256 != files[n])
    return matches, -misses


def _diff(area: str, files: dict[str, str], expected: dict[str, FileHash]) -> list[FileDiff]:
    diffs: list[FileDiff] = []
    for name in sorted(set(files) | set(expected)):
        exp = expected.get(name)
        act = files.get(name)
        if exp is not None and act is None:
            diffs.append(FileDiff(area, name, "deleted", exp.sha256, None))
        elif exp is None and act is not None:
            diffs.append(FileDiff(area, name, "created", None, act))
        elif exp is not None and act is not None and exp.sha256 != act:
            diffs.append(FileDiff(area, name, "modified", exp.sha256, act))
    return diffs


def _src_diff(archive: UnpackedArchive) -> list[FileDiff]:
    def tree(prefix: str) -> dict[str, str]:
        return {
            p[len(prefix) + 1 :]: sf.sha256
            for p, sf in archive.files.items()
            if p.startswith(prefix + "/") and "/__pycache__/" not in f"/{p[len(prefix) + 1:]}"
        }

    trusted = tree("trusted_src")
    left = tree(REPO_SRC_AREA)
    diffs: list[FileDiff] = []
    for name in sorted(set(trusted) | set(left)):
        exp, act = trusted.get(name), left.get(name)
        if exp is not None and act is None:
            diffs.append(FileDiff(REPO_SRC_AREA, name, "deleted", exp, None))
        elif exp is None and act is not None:
            diffs.append(FileDiff(REPO_SRC_AREA, name, "created", None, act))
        elif exp != act:
            diffs.append(FileDiff(REPO_SRC_AREA, name, "modified", exp, act))
    return diffs


def _fmt_diffs(diffs: list[FileDiff]) -> str:
    summary = "; ".join(f"{d.area}/{d.path} {d.change}" for d in diffs[:8])
    return summary + (f" (+{len(diffs) - 8} more)" if len(diffs) > 8 else "")


def check_template_integrity(
    archive: UnpackedArchive,
    problem: str | None,
    decks: Sequence[DeckSnapshot],
    harness_claim: bool | None,
) -> TemplateIntegrity:
    """Verify the deck files and shared eval modules of a run; see the module docstring.

    When no registered deck applies (unknown problem, or a template_files/ snapshot that matches
    fewer than half the files of the closest registered deck: another deck or another version),
    the archive can still prove an edit by itself: repo/problems/<p>/ against its own
    template_files/ snapshot and repo/src/ against trusted_src/. Such a difference is MUTATED
    (deck None); otherwise the status is UNKNOWN_DECK with the reason.
    """
    tmpl_prefix = _template_prefix(archive, problem)
    repo_prefix = f"{REPO_PROBLEMS_AREA}/{problem}" if problem else None
    has_template = _has_any(archive, tmpl_prefix)
    has_repo = repo_prefix is not None and _has_any(archive, repo_prefix)
    has_src_pair = _has_any(archive, REPO_SRC_AREA) and _has_any(archive, "trusted_src")
    tmpl_files = _area_files(archive, tmpl_prefix) if has_template else {}
    repo_files = _area_files(archive, repo_prefix) if has_repo and repo_prefix else {}

    def result(status: IntegrityStatus, deck: str | None, reason: str, diffs: list[FileDiff] | None = None,
               areas: list[str] | None = None) -> TemplateIntegrity:
        return TemplateIntegrity(
            status=status,
            deck=deck,
            problem=problem,
            diffs=diffs or [],
            checked_areas=areas or [],
            reason=reason,
            harness_claim=harness_claim,
        )

    def unregistered(reason: str) -> TemplateIntegrity:
        diffs: list[FileDiff] = []
        areas: list[str] = []
        if has_template and has_repo and repo_prefix:
            areas.append(repo_prefix)
            snapshot = {n: FileHash(sha256=sha, md5="", size=0) for n, sha in tmpl_files.items()}
            diffs += _diff(repo_prefix, repo_files, snapshot)
        if has_src_pair:
            areas.append(REPO_SRC_AREA)
            diffs += _src_diff(archive)
        if diffs:
            return result(
                IntegrityStatus.MUTATED,
                None,
                f"{reason}; but the workspace differs from the archive's own pre-session snapshot "
                f"(template_files/, trusted_src/): {_fmt_diffs(diffs)}",
                diffs,
                areas,
            )
        if areas:
            reason += f"; {' and '.join(areas)} match the archive's own pre-session snapshot"
        return result(IntegrityStatus.UNKNOWN_DECK, None, reason, areas=areas)

    if not problem:
        return unregistered("the run names no problem, so no deck can be chosen")
    candidates = [d for d in decks if problem in d.problems]
    if not candidates:
        names = ", ".join(d.name for d in decks) or "none"
        return unregistered(f"no registered deck holds problem {problem!r} (registered decks: {names})")
    if not has_template and not has_repo:
        if has_src_pair:
            src_diffs = _src_diff(archive)
            if src_diffs:
                return result(IntegrityStatus.MUTATED, None, f"repo/src differs from trusted_src: "
                              f"{_fmt_diffs(src_diffs)}", src_diffs, [REPO_SRC_AREA])
            return result(
                IntegrityStatus.NOT_CHECKABLE,
                None,
                f"repo/src matches trusted_src, but the archive has neither template_files/ nor "
                f"repo/problems/{problem}/ to compare against the deck",
                areas=[REPO_SRC_AREA],
            )
        return result(
            IntegrityStatus.NOT_CHECKABLE,
            None,
            f"the archive has neither template_files/ nor repo/problems/{problem}/ to compare",
        )

    basis = tmpl_files if has_template else repo_files
    scored = sorted(
        ((_score(basis, d.problems[problem]), i, d) for i, d in enumerate(candidates)),
        key=lambda t: (t[0][0], t[0][1], -t[1]),
        reverse=True,
    )
    (best_matches, _neg_misses), _i, deck = scored[0]
    expected = deck.problems[problem]
    if has_template and best_matches * 2 < len(expected):
        names = ", ".join(d.name for d in candidates)
        if best_matches == 0:
            why = f"template_files/ snapshot matches no registered deck holding {problem!r} (checked: {names})"
        else:
            why = (
                f"template_files/ snapshot matches only {best_matches} of {len(expected)} files of the closest "
                f"registered deck {deck.name!r}: another deck or deck version (checked: {names})"
            )
        return unregistered(why)

    diffs: list[FileDiff] = []
    areas: list[str] = []
    if has_template:
        areas.append(tmpl_prefix)
        diffs += _diff(tmpl_prefix, tmpl_files, expected)
    if has_repo and repo_prefix:
        areas.append(repo_prefix)
        diffs += _diff(repo_prefix, repo_files, expected)
    if has_src_pair:
        areas.append(REPO_SRC_AREA)
        diffs += _src_diff(archive)
    if diffs:
        return result(IntegrityStatus.MUTATED, deck.name, f"deck {deck.name!r}: {_fmt_diffs(diffs)}", diffs, areas)
    return result(
        IntegrityStatus.VERIFIED,
        deck.name,
        f"every deck file in {', '.join(areas)} is byte-identical to deck {deck.name!r}",
        [],
        areas,
    )
