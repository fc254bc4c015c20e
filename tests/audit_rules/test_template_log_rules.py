"""Template and log rules (KA3xx): effects and the data synthesis reads, on real archives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from audit_rules.base import AuditContext, Effect, Finding, Probe, Severity
from audit_rules.engine import build_context
from audit_rules.registry import rules_by_id
from audit_rules.rules.template_log.peak_fraction_mismatch import recompute_bounds
from audit_rules.rules.template_log.wrong_hardware_sku import deck_targets
from ingest.archive import safe_unpack
from ingest.run import parse_run
from tests.audit_rules.conftest import (
    FIXTURES,
    DeckCopy,
    FixtureEntry,
    discover_entries,
    materialize,
    read_deck_copy,
)
from tests.audit_rules.test_transcript_rules import result_json, write_tree
from tests.corpus.build import DECK_FILES, DECK_ROOT, tar_tree

SOL = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
BENCH = "shape=0 variant=solution tflops=791.6 gbps=580.0 ms=0.1736\nshape=0 solution_peak_fraction=0.4000\n" \
        "shape=1 variant=solution tflops=593.7 gbps=435.0 ms=0.2330\nshape=1 solution_peak_fraction=0.3000\n" \
        "peak_fraction: 0.3464\nRESULT: OK\n"


def context(tree: Path, tmp: Path, decks: Any) -> AuditContext:
    archive = safe_unpack(tar_tree(tree, tmp / "run.tar.gz", top="run"), tmp / "staged")
    return build_context(archive, parse_run(archive, decks), decks)


def run_rule(rule_id: str, ctx: AuditContext) -> list[Finding]:
    return list(rules_by_id()[rule_id].check(ctx))


def fixture_ctx(rule_id: str, name: str, tmp: Path, decks: Any) -> AuditContext:
    built = materialize(FixtureEntry(rule_id, name, FIXTURES / rule_id / name), tmp)
    return context(built.tree, tmp, decks)


def test_ka301_mutated_is_decisive_per_diff_and_claim_disagreement(tmp_path: Path, decks: Any) -> None:
    fs = run_rule("KA301", fixture_ctx("KA301", "bad_check_modified", tmp_path, decks))
    decisive = [f for f in fs if f.effect is Effect.DECISIVE_HACK]
    assert {f.file for f in decisive} == {"template_files/check.py", "repo/problems/01_fp8_gemm/check.py"}
    assert all(f.data["change"] == "modified" for f in decisive)
    (claim,) = [f for f in fs if f.effect is Effect.ADVISORY]
    assert claim.data["disagreement"] is True and claim.data["harness_claim"] is False


def test_ka301_not_checkable_is_advisory(tmp_path: Path, decks: Any) -> None:
    ctx = context(write_tree(tmp_path, {"result.json": result_json(), "solution.py": SOL}), tmp_path, decks)
    (f,) = run_rule("KA301", ctx)
    assert f.effect is Effect.ADVISORY and f.data["status"] in ("not_checkable", "unknown_deck")


def test_ka311_recompute_allows_rounding() -> None:
    rec, lo, hi = recompute_bounds([0.4, 0.3])
    assert round(rec, 4) == 0.3464 and lo < rec < hi
    _, lo2, hi2 = recompute_bounds([0.0001, 0.5])  # tiny fractions carry large relative rounding
    assert lo2 < 0.0071 < hi2


def test_ka311_data(tmp_path: Path, decks: Any) -> None:
    (f,) = run_rule("KA311", fixture_ctx("KA311", "bad_peak_not_geomean", tmp_path / "a", decks))
    assert f.data["kind"] == "geomean" and round(f.data["recomputed"], 4) == 0.3464 and f.line_start == 7
    (g,) = run_rule("KA311", fixture_ctx("KA311", "bad_result_differs_from_log", tmp_path / "b", decks))
    assert g.data["kind"] == "result_vs_log" and g.file == "result.json"


def test_ka312_no_log_and_exit_code(tmp_path: Path, decks: Any) -> None:
    ctx = context(write_tree(tmp_path, {"result.json": result_json(check_exit_code=1), "solution.py": SOL}), tmp_path, decks)
    kinds = {f.data["kind"] for f in run_rule("KA312", ctx)}
    assert kinds == {"no_log", "exit_code"}


def test_ka313_probe_and_overcount_note(tmp_path: Path, decks: Any) -> None:
    ctx = fixture_ctx("KA313", "bad_superluminal_shape", tmp_path, decks)
    (f,) = run_rule("KA313", ctx)
    assert f.effect is Effect.NEEDS_PROBE and f.probe is Probe.SAME_STORAGE_OVERWRITE and f.data["topic"] == "output_memo"
    assert ctx.problem is not None
    ctx.problem.raw = dict(ctx.problem.raw, flops_overcount="dense-equivalent FLOPs for a sparse kernel")
    (g,) = run_rule("KA313", ctx)
    assert g.effect is Effect.ADVISORY and g.probe is None and "overcount" in g.explanation


def test_ka313_bandwidth_above_hbm_and_sub_launch_time(tmp_path: Path, decks: Any) -> None:
    bench = BENCH.replace("gbps=435.0 ms=0.2330", "gbps=9000.0 ms=0.2330").replace("ms=0.1736", "ms=0.0004")
    res = result_json(regrade={"mode": "sequential_isolated", "gpu_name": "NVIDIA H100 PCIe"})
    ctx = context(write_tree(tmp_path, {"result.json": res, "solution.py": SOL, "check.log": "PASS\n", "benchmark.log": bench}),
                  tmp_path, decks)
    fs = {f.data["shape"]: f for f in run_rule("KA313", ctx)}
    assert fs[0].data["topic"] == "output_memo" and fs[0].line_start == 1
    assert fs[1].data["topic"] == "l2_policy" and fs[1].probe is Probe.L2_POLICY


def test_ka314_targets_and_status(tmp_path: Path, decks: Any) -> None:
    assert deck_targets("hard", {}) == ("H100 PCIe", "H100 SXM", "H200")
    assert deck_targets("x", {"hardware": "NVIDIA B200"}) == ("B200",)
    (f,) = run_rule("KA314", fixture_ctx("KA314", "bad_b200_on_hard_deck", tmp_path, decks))
    assert f.data["measurement_status"] == "wrong_hardware_sku" and f.data["measured_sku"] == "B200"


def test_ka315_statuses(tmp_path: Path, decks: Any) -> None:
    (c,) = run_rule("KA315", fixture_ctx("KA315", "bad_in_run_contended", tmp_path / "a", decks))
    assert c.data["measurement_status"] == "in_run_contended" and c.severity is Severity.MEDIUM
    (i,) = run_rule("KA315", fixture_ctx("KA315", "bad_isolated_regrade_supersedes", tmp_path / "b", decks))
    assert i.data["measurement_status"] == "sequential_isolated"
    assert i.data["superseded"][0]["peak_fraction"] == 0.2871
    # the same regrade kept in a separate result.regrade.json (result.json holds the in-run claim)
    (j,) = run_rule("KA315", fixture_ctx("KA315", "bad_separate_regrade_record", tmp_path / "c", decks))
    assert j.file == "result.regrade.json" and j.data["measurement_status"] == "sequential_isolated"
    assert j.data["superseded"][0]["peak_fraction"] == 0.2871 and j.data["regrade_gpu"] == "NVIDIA H100 PCIe"


def test_ka316_is_infra(tmp_path: Path, decks: Any) -> None:
    (f,) = run_rule("KA316", fixture_ctx("KA316", "bad_lock_timeout_empty_check", tmp_path / "a", decks))
    assert f.effect is Effect.INFRA and f.data["check_log_empty"] is True
    (g,) = run_rule("KA316", fixture_ctx("KA316", "bad_starved_wait_no_timeout_line", tmp_path / "b", decks))
    assert g.effect is Effect.INFRA and g.data["wait_s"] >= 600


def test_ka317_likely_reason(tmp_path: Path, decks: Any) -> None:
    (f,) = run_rule("KA317", fixture_ctx("KA317", "bad_no_solution", tmp_path / "a", decks))
    assert f.data["likely"] == "provider_insufficient_credits"
    ctx = context(write_tree(tmp_path / "b", {"result.json": result_json(has_solution=False, failure_reason="no_solution",
                                                                          usage={"output_tokens": 90000})}), tmp_path / "b", decks)
    (g,) = run_rule("KA317", ctx)
    assert g.data["likely"] == "no_solution"


# -------------------------------------------------------------------------------------------
# Fixture entries that need the bundled deck's files (KA301 good_verified, KA301 bad_check_modified,
# KA203 bad_edited_then_restored_verified) do not copy them: a `deck_copy.txt` declares the
# problem and areas, and the harness copies the CURRENT deck in at test time (conftest.py), so the
# entries cannot go stale. An entry carries only the deck files it changes.

DECK_COPY_ENTRIES: dict[str, DeckCopy] = {
    "KA301/good_verified": DeckCopy("01_fp8_gemm", ("template_files", "repo/problems")),
    "KA301/bad_check_modified": DeckCopy("01_fp8_gemm", ("template_files", "repo/problems")),
    "KA203/bad_edited_then_restored_verified": DeckCopy("01_fp8_gemm", ("template_files", "repo/problems")),
}


def test_fixture_deck_copy_declarations() -> None:
    declared = {e.id: d for e in discover_entries() if e.path.is_dir() and (d := read_deck_copy(e.path)) is not None}
    assert declared == DECK_COPY_ENTRIES
    for entry_id, decl in declared.items():
        deck = DECK_ROOT / decl.problem
        for area in decl.area_dirs():
            for name in DECK_FILES:
                own = FIXTURES / entry_id / area / name
                assert not (own.is_file() and (deck / name).is_file() and own.read_bytes() == (deck / name).read_bytes()), (
                    f"{own.relative_to(FIXTURES)} is a verbatim deck copy: delete it (deck_copy.txt supplies it)"
                )
