"""Turn the GPU lane's recorded regrades into verdicts (run here, on the CPU, after the lane).

The H200 image has no service wheels by default, so the lane records each regrade's GradeResult
facts (correctness, probe statuses and numbers, provenance) in gpu-regrade.jsonl. This script
feeds each record, unchanged, to the same audit library the worker uses: it builds a real run
archive holding the example as solution.py (deck template files included, no transcript), runs
the static audit and then synthesis with the recorded GradeResult, and prints the verdict fields.

    .venv/bin/python scripts/gpu_lane_verdicts.py docs/gpu-lane/2026-12-02-regrade.jsonl

Nothing here re-measures anything: the numbers are the H200's, the verdict logic is kaudit's.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from audit_rules.engine import audit_unpacked  # noqa: E402
from graders.results import GradeResult, ProbeResult, ProbeStatus, Provenance  # noqa: E402
from ingest.archive import safe_unpack  # noqa: E402
from ingest.decks import bundled_decks  # noqa: E402
from ingest.run import parse_run  # noqa: E402
from tests.corpus.build import add_template_files, synthesized_result, tar_tree, write_json  # noqa: E402

PROBLEMS = {"01": "01_fp8_gemm", "05": "05_topk_bitonic", "07": "07_w4a16_gemm"}


def _grade(rec: dict[str, Any]) -> GradeResult:
    prov = dict(rec.get("provenance") or {})
    provenance = Provenance(**prov) if prov else None
    probes = [
        ProbeResult(probe=name, status=ProbeStatus(p["status"]), summary=p.get("summary", ""),
                    device="cuda", smoke=False)
        for name, p in (rec.get("probes") or {}).items()
    ]
    correct = rec.get("correct")
    return GradeResult(
        correct=correct, check_lines=["PASS"] if correct else [], benchmark_lines=[],
        peak_fraction=rec.get("peak_fraction"), shapes=[], failure_reason=rec.get("failure_reason"),
        infra_failure=bool(rec.get("infra_failure")), framework=None, provenance=provenance, probes=probes,
        detail=rec.get("detail"),
    )


def verdict_for(rec: dict[str, Any], work: Path) -> dict[str, Any]:
    prefix, name = rec["example"].split(" ", 1)
    problem = PROBLEMS[prefix]
    work = work / f"{len(list(work.iterdir()))}_{name}"
    tree = work / "tree"
    tree.mkdir(parents=True)
    (tree / "solution.py").write_text((REPO / "kernels/hard" / problem / "examples" / f"{name}.py").read_text())
    res = synthesized_result(problem, True, run_id=f"20261202_000000_claude_gpu-lane_{problem}")
    res.update(correct=True, failure_reason="pass")  # the in-run claim; the regrade decides
    write_json(tree / "result.json", res)
    (tree / "check.log").write_text("PASS\n")
    add_template_files(tree, problem)
    decks = bundled_decks()
    archive = safe_unpack(tar_tree(tree, work / "run.tar.gz"), work / "staged")
    v = audit_unpacked(archive, parse_run(archive, decks), decks, grade=_grade(rec))
    return {
        "example": rec["example"], "verdict": v.verdict.value, "reward_hack": v.reward_hack,
        "correct": v.correct, "failure_reason": v.failure_reason,
        "measurement_status": v.measurement_status.value, "publish_grade": v.publish_grade,
        "decided_by": v.justification.get("verdict", [])[:3],
        "findings": [f"{f.key}:{f.effect.value}" for f in v.findings],
    }


def main(argv: list[str]) -> int:
    rows = [json.loads(line) for p in argv for line in Path(p).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "job_state" not in r and not r["example"].startswith("overhead")]
    with tempfile.TemporaryDirectory(prefix="kaudit-lane-") as tmp:
        for rec in rows:
            out = verdict_for(rec, Path(tmp))
            print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
