"""Deck scanning and template integrity, on real archives built from a tiny deck."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.archive import safe_unpack
from ingest.decks import DECK_FILES, REQUIRED_DECK_FILES, bundled_decks, scan_deck_dir
from ingest.model import DeckSnapshot, IntegrityStatus, UnpackedArchive
from ingest.template import check_template_integrity
from tests.archive_factory import DEFAULT_PROBLEM, build_run_tree, make_deck, make_tar

P = DEFAULT_PROBLEM


@pytest.fixture
def deck_dir(tmp_path: Path) -> Path:
    return make_deck(tmp_path / "deck", problems=(P, "05_topk_bitonic"))


@pytest.fixture
def deck(deck_dir: Path) -> DeckSnapshot:
    return scan_deck_dir(deck_dir, "tiny")


def _unpack(tmp: Path, **kw: object) -> UnpackedArchive:
    tree = build_run_tree(tmp / "src", **kw)  # type: ignore[arg-type]
    return safe_unpack(make_tar(tree, tmp / "run.tgz"), tmp / "staging")


def test_scan_deck_dir(deck_dir: Path, deck: DeckSnapshot) -> None:
    assert set(deck.problems) == {P, "05_topk_bitonic"}
    assert set(deck.problems[P]) == set(REQUIRED_DECK_FILES)  # examples/ not a deck file
    (deck_dir / P / "baseline.py").write_text("baseline\n")
    again = scan_deck_dir(deck_dir, "tiny")
    assert "baseline.py" in again.problems[P]
    fh = again.problems[P]["check.py"]
    assert fh.size == (deck_dir / P / "check.py").stat().st_size and len(fh.sha256) == 64 and len(fh.md5) == 32
    assert deck.root == deck_dir.resolve()
    assert "baseline.py" in DECK_FILES


def test_bundled_decks_scans_a_kernels_like_root(tmp_path: Path) -> None:
    make_deck(tmp_path / "kernels" / "mini", problems=("01_a", "02_b"))
    (tmp_path / "kernels" / "notadeck").mkdir()
    (tmp_path / "kernels" / "__pycache__").mkdir()
    decks = bundled_decks(tmp_path / "kernels")
    assert [d.name for d in decks] == ["mini"]
    assert set(decks[0].problems) == {"01_a", "02_b"}


def test_bundled_decks_default_root_works() -> None:
    # kernels/hard is written by another part; whatever is there must scan without error
    for d in bundled_decks():
        assert d.root is not None and d.problems


def test_verified(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path, deck_problem_dir=deck_dir / P)
    ti = check_template_integrity(un, P, [deck], False)
    assert ti.status is IntegrityStatus.VERIFIED, ti.reason
    assert ti.deck == "tiny" and not ti.mutated and ti.diffs == []
    assert ti.checked_areas == ["template_files", f"repo/problems/{P}"]
    assert ti.harness_claim is False


def test_modified_in_repo(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path, deck_problem_dir=deck_dir / P,
                 extra_files={f"repo/problems/{P}/check.py": "def check(): return True\n"})
    ti = check_template_integrity(un, P, [deck], False)
    assert ti.status is IntegrityStatus.MUTATED and ti.mutated
    assert [(d.area, d.path, d.change) for d in ti.diffs] == [(f"repo/problems/{P}", "check.py", "modified")]
    d = ti.diffs[0]
    assert d.expected_sha256 == deck.problems[P]["check.py"].sha256 and d.actual_sha256 != d.expected_sha256
    assert "check.py modified" in ti.reason


def test_modified_in_template_files(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    """template_files/ still matches the deck on most files: the deck is chosen, one file differs."""
    un = _unpack(tmp_path, deck_problem_dir=deck_dir / P,
                 extra_files={"template_files/problem.yaml": "tolerance: {atol: 9}\n"})
    ti = check_template_integrity(un, P, [deck], False)
    assert ti.status is IntegrityStatus.MUTATED
    assert ("template_files", "problem.yaml", "modified") in [(d.area, d.path, d.change) for d in ti.diffs]


def test_deleted(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path, deck_problem_dir=deck_dir / P, drop=[f"repo/problems/{P}/reference.py"])
    ti = check_template_integrity(un, P, [deck], None)
    assert ti.status is IntegrityStatus.MUTATED
    assert [(d.path, d.change, d.actual_sha256) for d in ti.diffs] == [("reference.py", "deleted", None)]


def test_created_deck_named_file(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path, deck_problem_dir=deck_dir / P,
                 extra_files={f"repo/problems/{P}/baseline.py": "fake baseline\n"})
    ti = check_template_integrity(un, P, [deck], False)
    assert ti.status is IntegrityStatus.MUTATED
    assert [(d.path, d.change) for d in ti.diffs] == [("baseline.py", "created")]


def test_non_deck_files_ignored(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path, deck_problem_dir=deck_dir / P,
                 extra_files={f"repo/problems/{P}/notes.md": "mine\n", f"repo/problems/{P}/examples/x.py": "y\n",
                              "template_files/README": "x\n"})
    assert check_template_integrity(un, P, [deck], False).status is IntegrityStatus.VERIFIED


def test_repo_src_mutated(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path, deck_problem_dir=deck_dir / P,
                 trusted_src={"eval/correctness.py": "ATOL = 0.2\n", "eval/timing.py": "x\n"},
                 repo_src={"eval/correctness.py": "ATOL = 20\n", "eval/timing.py": "x\n", "eval/new.py": "n\n"})
    ti = check_template_integrity(un, P, [deck], False)
    assert ti.status is IntegrityStatus.MUTATED
    assert sorted((d.area, d.path, d.change) for d in ti.diffs) == [
        ("repo/src", "eval/correctness.py", "modified"), ("repo/src", "eval/new.py", "created")]
    assert "repo/src" in ti.checked_areas


def test_repo_src_equal_is_verified(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    src = {"eval/correctness.py": "ATOL = 0.2\n"}
    un = _unpack(tmp_path, deck_problem_dir=deck_dir / P, trusted_src=src, repo_src=src)
    ti = check_template_integrity(un, P, [deck], False)
    assert ti.status is IntegrityStatus.VERIFIED and "repo/src" in ti.checked_areas


def test_chooses_best_matching_deck(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    other_dir = make_deck(tmp_path / "other", problems=(P,), salt=" v2")
    other = scan_deck_dir(other_dir, "other")
    un = _unpack(tmp_path, deck_problem_dir=other_dir / P)
    ti = check_template_integrity(un, P, [deck, other], False)
    assert ti.status is IntegrityStatus.VERIFIED and ti.deck == "other"


def test_unknown_deck_snapshot_matches_nothing(tmp_path: Path, deck: DeckSnapshot) -> None:
    foreign = make_deck(tmp_path / "foreign", problems=(P,), salt=" foreign")
    un = _unpack(tmp_path, deck_problem_dir=foreign / P)
    ti = check_template_integrity(un, P, [deck], False)
    assert ti.status is IntegrityStatus.UNKNOWN_DECK and not ti.mutated
    assert "matches no registered deck" in ti.reason


def test_unknown_problem(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path, problem="99_mystery", deck_problem_dir=deck_dir / P)
    ti = check_template_integrity(un, "99_mystery", [deck], None)
    assert ti.status is IntegrityStatus.UNKNOWN_DECK
    assert "99_mystery" in ti.reason and "tiny" in ti.reason
    assert check_template_integrity(un, None, [deck], None).status is IntegrityStatus.UNKNOWN_DECK


def test_not_checkable(tmp_path: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path)  # no deck_problem_dir: neither template_files/ nor repo/problems/
    ti = check_template_integrity(un, P, [deck], True)
    assert ti.status is IntegrityStatus.NOT_CHECKABLE and ti.harness_claim is True
    assert "template_files" in ti.reason


def test_repo_only(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path, deck_problem_dir=deck_dir / P, template=False)
    ti = check_template_integrity(un, P, [deck], False)
    assert ti.status is IntegrityStatus.VERIFIED and ti.checked_areas == [f"repo/problems/{P}"]


def test_harness_claim_is_not_trusted(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path, deck_problem_dir=deck_dir / P,
                 extra_files={f"repo/problems/{P}/shapes.py": "SHAPES = []\n"})
    ti = check_template_integrity(un, P, [deck], False)  # the harness claims "not mutated"
    assert ti.status is IntegrityStatus.MUTATED and ti.harness_claim is False


def test_unknown_deck_but_workspace_edited_against_own_snapshot(tmp_path: Path, deck: DeckSnapshot) -> None:
    """A deck we do not hold can still prove an edit: repo/problems vs the archive's template_files."""
    foreign = make_deck(tmp_path / "foreign", problems=(P,), salt=" foreign")
    un = _unpack(tmp_path, deck_problem_dir=foreign / P,
                 extra_files={f"repo/problems/{P}/check.py": "print('PASS')\n"})
    ti = check_template_integrity(un, P, [deck], False)
    assert ti.status is IntegrityStatus.MUTATED and ti.deck is None
    assert [(d.area, d.path, d.change) for d in ti.diffs] == [(f"repo/problems/{P}", "check.py", "modified")]
    assert "matches no registered deck" in ti.reason and "pre-session snapshot" in ti.reason


def test_unknown_problem_but_workspace_edited(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    un = _unpack(tmp_path, problem="99_mystery", deck_problem_dir=deck_dir / P,
                 drop=["repo/problems/99_mystery/shapes.py"])
    ti = check_template_integrity(un, "99_mystery", [deck], None)
    assert ti.status is IntegrityStatus.MUTATED
    assert [(d.path, d.change) for d in ti.diffs] == [("shapes.py", "deleted")]


def test_partial_match_is_another_deck_version(tmp_path: Path, deck_dir: Path, deck: DeckSnapshot) -> None:
    """Two shared files out of seven do not make the snapshot our deck: no false 'mutated'."""
    other = make_deck(tmp_path / "v2", problems=(P,), salt=" v2")
    for name in ("PROMPT.txt", "sota.py"):
        (other / P / name).write_bytes((deck_dir / P / name).read_bytes())
    un = _unpack(tmp_path, deck_problem_dir=other / P)
    ti = check_template_integrity(un, P, [deck], False)
    assert ti.status is IntegrityStatus.UNKNOWN_DECK and not ti.mutated
    assert "only 2 of 7" in ti.reason
