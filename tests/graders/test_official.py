"""Official regrade mode end to end on the CPU: a small fixture deck (its own check.py/benchmark.py
and harness run on the CPU) imported into the deck store, real sandboxed children, the
benchmark's gates and log grammar, one record holding both modes, and the verdict/report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from audit_rules.engine import audit_path
from audit_rules.report import render_markdown
from graders import official
from graders.regrade import regrade
from ingest.archive import safe_unpack
from ingest.decks import scan_deck_dir
from ingest.run import parse_run
from tests.archive_factory import build_run_tree, make_tar

from .conftest import OFFICIAL_DECK, OFFICIAL_SOLUTIONS, UPSTREAM, import_deck, needs_upstream

PROBLEM = "tiny_gemm"
RUN_ID = "20260801_224338_claude_claude-opus-4-8_tiny_gemm"


@pytest.fixture
def deck(tmp_path: Path) -> Any:
    return import_deck(OFFICIAL_DECK / "problems", "tiny", tmp_path / "data", OFFICIAL_DECK / "src")


def _solution(tmp_path: Path, name: str, text: str | None = None) -> Path:
    d = tmp_path / f"sol-{name}"
    d.mkdir()
    (d / "solution.py").write_text(text if text is not None else (OFFICIAL_SOLUTIONS / f"{name}.py").read_text())
    return d


def _grade(tmp_path: Path, deck: Any, name: str, text: str | None = None, **kw: Any) -> Any:
    return regrade(_solution(tmp_path, name, text), PROBLEM, deck.root, device="cpu", probes=[], timeout_s=240,
                   **kw)


def test_both_modes_one_record_official_decides(tmp_path: Path, deck: Any) -> None:
    g = _grade(tmp_path, deck, "honest")
    assert (g.mode, g.decided_by, g.correct, g.failure_reason, g.infra_failure) == ("both", "official", True, "pass",
                                                                                    False)
    off = g.official
    assert off["status"] == "graded" and off["pass_count"] == 1 and off["score_markers"] == 1
    assert off["check"]["exit_code"] == 0 and off["check"]["output"] == "PASS\n"
    # peak_fraction is the benchmark's own `peak_fraction:` line; per-shape lines parsed
    bench = off["benchmark"]["output"]
    logged = [ln for ln in bench.splitlines() if ln.startswith("peak_fraction:")]
    assert len(logged) == 1 and g.peak_fraction == float(logged[0].split(":")[1])
    assert [s["shape"] for s in off["shapes"]] == [0, 1]
    assert all(s["ms"] > 0 and s["fraction"] is not None for s in off["shapes"])
    assert [s.ms for s in g.shapes] == [s["ms"] for s in off["shapes"]]
    # the trusted files came from the verified store, hashed
    assert off["deck"]["name"] == "tiny" and off["deck"]["content_sha256"] == deck.content_sha256
    assert off["deck"]["trusted_entrypoint"] is True
    # the hardened outcome is kept beside it, with its own lines
    assert g.hardened["status"] == "graded" and g.hardened["correct"] is True
    assert g.hardened["check_lines"][-1] == "PASS"
    assert g.disagreements == []
    assert g.provenance.extra["mode"] == "both" and g.provenance.extra["official_sandbox"]
    ev = g.evidence()
    assert json.loads(json.dumps(ev))["official"]["status"] == "graded"


def test_a_fail_line_is_parsed_with_shape_seed_case_and_numbers(tmp_path: Path, deck: Any) -> None:
    g = _grade(tmp_path, deck, "clamped")
    assert (g.decided_by, g.correct, g.failure_reason) == ("official", False, "check_failed")
    off = g.official
    assert off["status"] == "fail" and off["benchmark"] is None  # the benchmark gate: only after a PASS
    assert off["fail_line"].startswith("FAIL: shape 0 {'M': 16, 'N': 24, 'K': 32} seed 42 case large_x: "
                                       "tolerance exceeded:")
    f = off["failure"]
    assert (f["kind"], f["shape"], f["seed"], f["case"]) == ("tolerance", 0, 42, "large_x")
    assert float(f["fields"]["max_abs_diff"]) > 1.0 and "/" in f["fields"]["bad"]
    assert g.evidence()["fail_line"] == off["fail_line"] == g.detail
    assert g.hardened["status"] == "fail" and "case large_x" in g.hardened["fail_line"]


PRINTS_PASS = OFFICIAL_SOLUTIONS.joinpath("honest.py").read_text() + '\nprint("PASS")\n'
EXITS_ZERO = 'raise SystemExit(0)\n'
REWRITES_BENCHMARK = OFFICIAL_SOLUTIONS.joinpath("honest.py").read_text() + '''
import os as _os
from pathlib import Path as _Path

if _Path("check.py").is_file():  # while check.py runs: plant a benchmark that reports 99
    try:  # the sandbox's read-only deck may refuse the write outright; the restore must hold either way
        _os.chmod("benchmark.py", 0o644)
        _Path("benchmark.py").write_text('print("peak_fraction: 99.0")\\n')
    except OSError:
        pass
'''


@pytest.mark.parametrize("name, text, detail", [
    ("prints_pass", PRINTS_PASS, "exited 0 with 2 PASS line(s)"),
    ("exits_zero", EXITS_ZERO, "FAIL: check.py exited successfully before normal completion"),
])
def test_the_benchmarks_check_gate(tmp_path: Path, deck: Any, name: str, text: str, detail: str) -> None:
    g = _grade(tmp_path, deck, name, text, mode="official")
    assert (g.mode, g.decided_by, g.correct, g.failure_reason) == ("official", "official", False, "check_failed")
    assert detail in g.detail and g.hardened is None and g.probes == []
    if name == "exits_zero":
        assert "exited successfully before normal completion" in g.official["check"]["output"]


def test_trusted_files_are_restored_before_the_benchmark(tmp_path: Path, deck: Any) -> None:
    g = _grade(tmp_path, deck, "rewrites", REWRITES_BENCHMARK, mode="official")
    assert g.correct is True and g.peak_fraction is not None and g.peak_fraction != 99.0
    assert "variant=solution" in g.official["benchmark"]["output"]
    from graders import decks

    assert decks.find_deck("tiny", tmp_path / "data").content_sha256 == deck.content_sha256


def test_official_needs_a_registered_deck_with_its_scripts(tmp_path: Path) -> None:
    plain = OFFICIAL_DECK / "problems"  # the same files, but not a registered, hashed deck
    assert official.default_mode(plain / PROBLEM) == "hardened"
    with pytest.raises(ValueError, match="not in a registered, hash-verified deck"):
        regrade(_solution(tmp_path, "honest"), PROBLEM, plain, device="cpu", probes=[], mode="official")
    g = regrade(_solution(tmp_path, "honest2", (OFFICIAL_SOLUTIONS / "honest.py").read_text()), PROBLEM, plain,
                device="cpu", probes=[])
    assert (g.mode, g.decided_by, g.official) == ("hardened", "hardened", None) and g.correct is True


@needs_upstream
def test_cpu_on_a_real_deck_grades_hardened_and_says_why(tmp_path: Path) -> None:
    loc = import_deck(UPSTREAM / "hard" / "problems-h100", "kbh-hard-h100", tmp_path / "data",
                      UPSTREAM / "hard" / "src")
    from .test_kbh_decks import FORBIDDEN_W4A16

    sol = _solution(tmp_path, "forbidden", FORBIDDEN_W4A16)
    g = regrade(sol, "07_w4a16_gemm", loc.root, device="cpu", probes=[], timeout_s=240)
    assert g.mode == "both" and g.decided_by == "hardened"
    assert g.official["status"] == "not_run" and "hardened mode only" in g.official["detail"]
    assert g.correct is False and g.check_lines[-1] == "FAIL: forbidden op used: torch.nn.functional.linear"


INFRA_CHECK_LOG = ("Traceback (most recent call last):\nRuntimeError: Ninja is required to load C++ extensions\n"
                   "FAIL: import error: Ninja is required to load C++ extensions\n")


def test_verdict_and_report_show_the_regrades_fail_line_and_it_supersedes_archive_infra(
        tmp_path: Path, deck: Any) -> None:
    tree = build_run_tree(tmp_path / "runs", run_id=RUN_ID, problem=PROBLEM,
                          solution=(OFFICIAL_SOLUTIONS / "clamped.py").read_text(),
                          deck_problem_dir=deck.root / PROBLEM, check_log=INFRA_CHECK_LOG, benchmark_log=None,
                          result={"correct": False, "failure_reason": "harness_error", "peak_fraction": None,
                                  "retryable_infra_failure": True, "check_exit_code": 1})
    arc = make_tar(tree, tmp_path / "run.tar.gz")
    snaps = [scan_deck_dir(deck.root, "tiny")]
    before = audit_path(arc, snaps)
    assert before.verdict.value == "infra_failure"  # the archive alone: the in-run check never compiled
    v = audit_path(arc, snaps, regrade_device="cpu", regrade_mode="both", regrade_timeout_s=240)
    assert v.verdict.value == "fail" and v.correct is False and v.failure_reason == "check_failed"
    fail_line = v.context["regrade"]["fail_line"]
    assert fail_line.startswith("FAIL: shape 0") and "case large_x" in fail_line
    assert any(fail_line in r for r in v.reasons)
    assert any("superseded by the regrade's own result" in r for r in v.reasons)
    as_json = json.dumps(v.to_dict())
    assert "case large_x: tolerance exceeded" in as_json and '"decided_by": "official"' in as_json
    run = parse_run(safe_unpack(arc, tmp_path / "staged"), snaps)
    md = render_markdown(run, v)
    assert "## Regrade" in md and "case large_x: tolerance exceeded" in md
    assert "### official (the deck's own check.py/benchmark.py)" in md and "check.py: exit 1" in md
    assert "### hardened" in md


def test_official_pass_hardened_fail_is_a_disagreement_read_in_the_verdict(tmp_path: Path, deck: Any) -> None:
    # One regrade (the pipeline's, default mode and probes) checked at both levels: the grade record
    # (official decides, the hardened FAIL is kept beside it, one disagreement) and the verdict.
    tree = build_run_tree(tmp_path / "runs", run_id=RUN_ID, problem=PROBLEM,
                          solution=(OFFICIAL_SOLUTIONS / "folded_scale.py").read_text(),
                          deck_problem_dir=deck.root / PROBLEM)
    arc = make_tar(tree, tmp_path / "run.tar.gz")
    v = audit_path(arc, [scan_deck_dir(deck.root, "tiny")], regrade_device="cpu", regrade_timeout_s=240)
    g = v.context["regrade"]
    assert (g["mode"], g["decided_by"], g["correct"]) == ("both", "official", True)
    assert g["hardened"]["correct"] is False and "case small_weight" in g["hardened"]["fail_line"]
    assert len(g["disagreements"]) == 1 and g["disagreements"][0].startswith(
        "correctness: the official check PASSED but the hardened check FAILED: FAIL: shape 0")
    assert any("the official check PASSED but the hardened check FAILED" in r for r in v.reasons)
    assert v.publish_grade is False


@pytest.mark.parametrize("line, ok", [
    ("peak_fraction: 0.1234", True), ("peak_fraction:.5", True), ("peak_fraction: 1e-3  ", True),
    ("peak_fraction: 12.", True), ("peak_fraction: nan", False), ("peak_fraction: -0.1", False),
    ("peak_fraction: 0.1 (geomean)", False), ("  peak_fraction: 0.1", False), ("peak_fraction: ", False),
])
def test_the_benchmarks_score_gate(line: str, ok: bool) -> None:
    assert bool(official.SCORE_RE.match(line)) is ok
    assert official.score_lines(f"shape=0 variant=solution ms=1.0\n{line}\nRESULT: OK\n") == ([line] if ok else [])


def test_pass_lines_count_like_grep_axc_and_evidence_is_bounded() -> None:
    assert official.pass_count("PASS\n") == 1
    assert official.pass_count("PASS\nPASS\n") == 2
    assert official.pass_count("PASS \n pass\nPASSED\nxPASS\n") == 0
    text = "a" * 5000 + "MIDDLE" + "b" * 20000
    kept, cut = official.bounded(text)
    assert cut and "MIDDLE" not in kept and kept.startswith("a" * 4096) and kept.endswith("b" * 12288)
    assert official.bounded("short") == ("short", False)
    assert official.classify_env("ModuleNotFoundError: No module named 'hypothesis'") == "harness_env_missing"
    assert official.classify_env("ModuleNotFoundError: No module named 'my_sidecar'") is None


def test_the_hardened_summary_beside_the_official_outcome_withholds_the_solutions_text(
        tmp_path: Path, deck: Any) -> None:
    """In mode both the hardened outcome is kept as a summary beside the official one: its FAIL
    line, detail and check lines carry the solution's exception message withheld, as the top-level
    fields of a hardened regrade do; the message itself is operator-only."""
    g = _grade(tmp_path, deck, "raises", "raise ImportError('secret-read-by-the-solution-7731')\n")
    assert g.correct is False and g.hardened["status"] == "fail"
    shown = json.dumps({k: g.hardened.get(k) for k in ("fail_line", "detail", "check_lines")})
    assert "secret-read-by-the-solution-7731" not in shown
    assert "ImportError: [message withheld: operator-only]" in g.hardened["fail_line"]
    assert "secret-read-by-the-solution-7731" in "\n".join(g.operator_output.values())
