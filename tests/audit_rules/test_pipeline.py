"""audit_rules.pipeline: the one probe policy, the one deck choice, and what a skipped regrade says.

The three doors agreeing end to end (CLI, API + CPU worker, library) is
tests/regrade/test_three_doors.py; this file pins the pipeline's own decisions.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from audit_rules.base import Effect, Probe
from audit_rules.pipeline import (
    CONTRACT_PROBES,
    RegradeRequest,
    judge,
    judge_file,
    select_deck,
    select_probes,
)
from graders.probes import ALL_PROBES
from ingest.archive import safe_unpack
from ingest.model import DeckSnapshot
from ingest.run import parse_run
from tests.audit_rules.test_synthesis import finding
from tests.corpus.build import add_template_files, synthesized_result, tar_tree, write_json


def test_probe_policy_contract_probes_plus_what_the_findings_ask() -> None:
    cpu = select_probes([], "cpu")
    assert cpu == ["same_storage_overwrite", "weight_mutation", "repeat_calls", "output_aliasing", "checked_vs_timed"]
    cuda = select_probes([], "cuda")
    assert cuda == [p.value for p in CONTRACT_PROBES]  # plus the GPU timing probes
    assert "fresh_vs_warm" not in cuda  # a second cold process: only when a finding asks
    asked = finding("KA110", Effect.NEEDS_PROBE, probe=Probe.FRESH_VS_WARM)
    crashed = finding("KA141", Effect.ADVISORY, probe=Probe.FRESH_VS_WARM, crashed=True)
    assert select_probes([crashed], "cpu") == cpu
    with_fresh = select_probes([asked], "cpu")
    assert "fresh_vs_warm" in with_fresh and set(with_fresh) - set(cpu) == {"fresh_vs_warm"}
    assert with_fresh == [p for p in ALL_PROBES if p in with_fresh]  # canonical order
    l2 = finding("KA141", Effect.NEEDS_PROBE, probe=Probe.L2_POLICY)
    assert "l2_policy" not in select_probes([l2], "cpu")  # meaningless off the GPU


def test_deck_choice_prefers_the_template_deck_then_files_on_disk(tmp_path: Path) -> None:
    problem = "01_fp8_gemm"
    bare = DeckSnapshot(name="catalogue-only", problems={problem: {}})
    bundled = DeckSnapshot(name="hard", problems={problem: {}}, root=tmp_path / "hard")
    imported = DeckSnapshot(name="kbh-hard-h100", problems={problem: {}}, root=tmp_path / "h100")
    decks = [bare, bundled, imported]
    assert select_deck(decks, problem, "kbh-hard-h100") is imported
    assert select_deck(decks, problem, None) is bundled
    assert select_deck(decks, problem, "nope") is bundled
    assert select_deck([bare], problem) is bare
    assert select_deck(decks, "99_unknown") is None


def _archive(tmp: Path, *, solution: bool) -> Path:
    tree = tmp / "tree"
    tree.mkdir(parents=True)
    if solution:
        (tree / "solution.py").write_text("import torch\n")
    res = synthesized_result("01_fp8_gemm", solution)
    write_json(tree / "result.json", res)
    add_template_files(tree, "01_fp8_gemm")
    return tar_tree(tree, tmp / "a.tar.gz")


def test_a_regrade_that_cannot_run_says_why_and_the_verdict_is_the_static_one(tmp_path: Path, decks: Any) -> None:
    no_files = [dataclasses.replace(d, root=None) for d in decks]  # the deck known, its files not on disk
    req = RegradeRequest(device="cpu")
    j = judge_file(_archive(tmp_path, solution=True), no_files, regrade=req)
    assert j.grade is None and j.regrade_skipped == "no registered deck folder holds 01_fp8_gemm"
    assert j.verdict.context["regrade_skipped"] == j.regrade_skipped and j.verdict.context["probes_selected"] == []
    static = judge_file(_archive(tmp_path / "b", solution=True), no_files)
    assert (static.verdict.verdict, static.verdict.reasons) == (j.verdict.verdict, j.verdict.reasons)
    assert "regrade_skipped" not in static.verdict.context

    tmp = tmp_path / "c"
    tmp.mkdir()
    archive = safe_unpack(_archive(tmp, solution=False), tmp / "staged")
    run = parse_run(archive, decks)
    nothing = judge(archive, run, decks, regrade=req, other_run_ids={run.run_id, "other"})
    assert nothing.grade is None and nothing.regrade_skipped == "the archive holds no solution.py"
    assert nothing.run_id == run.run_id


def test_a_service_regrade_stages_under_its_scratch_folder(tmp_path: Path, decks: Any) -> None:
    """The worker passes <data_dir>/scratch and a per-job prefix: the staged solution and the regrade's
    own scratch live there while it runs (where `kaudit gc` finds a killed job's), and are gone after."""
    from graders.results import GradeResult

    scratch = tmp_path / "data" / "scratch"
    seen: dict[str, Any] = {}

    def fake_regrade(sol_dir: Path, problem: str, root: Path, **kw: Any) -> GradeResult:
        seen["sol_dir"], seen["scratch_dir"] = Path(sol_dir), kw.get("scratch_dir")
        seen["listing"] = sorted(p.name for p in scratch.iterdir())
        seen["staged"] = (Path(sol_dir) / "solution.py").is_file()
        return GradeResult(correct=None, check_lines=[], benchmark_lines=[], peak_fraction=None, shapes=[],
                           failure_reason=None, infra_failure=True, framework=None, provenance=None, probes=[],
                           detail="fake: nothing graded")

    req = RegradeRequest(device="cpu", probes=[], regrade_fn=fake_regrade, scratch_dir=scratch,
                         scratch_prefix="kaudit-job42-")
    judge_file(_archive(tmp_path, solution=True), decks, regrade=req)
    assert len(seen["listing"]) == 1 and seen["listing"][0].startswith("kaudit-job42-")
    assert scratch in seen["sol_dir"].parents and seen["staged"]
    assert seen["scratch_dir"] is not None and scratch in Path(seen["scratch_dir"]).parents
    assert list(scratch.iterdir()) == []
