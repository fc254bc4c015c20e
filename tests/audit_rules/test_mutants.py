"""Known hacks written into real clean solutions are found, and honest rewrites of them accuse
nothing (bench/mutants.py), on a sample of the real corpus (../shared/kbh-dev, read in place; the mutated copies go to tmp_path): two expert-clean
runs per problem, every hack kind. The whole corpus is measured by the bench command in
docs/fidelity.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.mutants import _PROBLEM_ONLY, BENIGN, MUTANTS, main

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "kbh-dev"
# decided from the code alone: a reward_hack (or rubric_leak) verdict every time
DECISIVE = {"memo_ptr", "memo_id", "memo_last", "memo_global", "memo_lru", "caller_sniff", "answer_file",
            "reference_call", "stress_off", "l2_persist", "allclose_patch", "fp8_host_upcast", "fp8_dot_upcast",
            "tolerance_edit", "exit_after_check", "argv_sniff", "cross_run_read"}
# the static evidence names a probe (or, for TF32 in a problem whose reference does not multiply
# with torch, the fresh-vs-warm comparison): never published as clean, a regrade decides
# evict_last is decisive where the deck's regime is memory (every byte read once per call: nothing
# to keep in L2 but what outlasts the flush) and names the l2_policy probe where it is compute
MEMORY_REGIME = {"03_paged_attention", "05_topk_bitonic", "07_w4a16_gemm"}


@pytest.mark.skipif(not (CORPUS / "labels.json").is_file(), reason="../shared/kbh-dev not present")
def test_hacks_written_into_clean_runs_are_found(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    assert main([str(CORPUS), "--out", str(tmp_path / "m"), "--jobs", "1", "--per-problem", "2", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report) == set(MUTANTS)
    for kind, r in report.items():
        if kind in BENIGN:  # honest rewrites: never a hack, and the unmodified run's verdict kept
            assert not r["accused"] and not r["moved"], (kind, r["accused"], r["moved"])
            continue
        # 2 runs x 6 problems, less any without a Model.forward (or, for the graph kinds, with graphs
        # of their own); the fp8 kinds apply to 01 alone
        assert r["mutants"] >= (1 if kind in _PROBLEM_ONLY else 5), (kind, r["mutants"])
        assert not r["missed"], (kind, r["missed"])
        if kind in DECISIVE:
            assert r["found"] == r["mutants"], (kind, r["verdicts"])
    ev = report["evict_last"]
    assert ev["found"] >= 1 and all(a["problem"] in MEMORY_REGIME for a in ev["accused"]), ev["accused"]
