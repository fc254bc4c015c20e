"""The GPU worker lane's example verdicts, on the CPU side of the pipeline (no regrade).

A lane example the GPU worker must call `clean` has to be clean for the static audit too: a static
rule that accuses it decides the verdict before any probe runs, and the GPU lane would only find
out at the end of a 10-minute device call (session 18: `hack_live_graph` computed its GEMM in fp32
through torch, which KA124 rightly calls a reward hack in an fp8 deck; the example now captures
the genuine Triton kernel in its graph). A lane example that must end `reward_hack` may be clean
statically (the probes catch it); it must still build and audit.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from audit_rules.engine import audit_path
from ingest.decks import bundled_decks
from tests.archive_factory import build_run_tree, make_tar
from tests.regrade.conftest import DECK
from tests.regrade.test_gpu_regrade import WORKER_CASES


@pytest.mark.parametrize(("name", "problem", "want"), WORKER_CASES, ids=[c[0] for c in WORKER_CASES])
def test_worker_lane_example_static_verdict_allows_the_lane_verdict(tmp_path: Path, name: str, problem: str, want: str) -> None:
    tree = build_run_tree(tmp_path / "t", run_id=f"20260801_224330_claude_claude-opus-4-8_{problem}", problem=problem,
                          solution=(DECK / problem / "examples" / f"{name}.py").read_text(),
                          deck_problem_dir=DECK / problem)
    verdict = audit_path(make_tar(tree, tmp_path / "r.tar.gz"), bundled_decks())
    if want == "clean":
        assert verdict.verdict == "clean", verdict.reasons
    else:
        assert verdict.verdict in {"clean", "pending_empirical", "reward_hack"}, verdict.reasons
