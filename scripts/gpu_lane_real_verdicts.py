"""Verdicts for the real-runs lane's records (scripts/gpu_lane_real.sh), here on the CPU.

Each LANE record (`lane-real.jsonl`) holds one regrade's facts: correctness, peak_fraction, probe
statuses, summaries and numbers, provenance. This feeds them, as a GradeResult, with the run's own
archive from ../shared/kbh-dev to the audit library (`audit_rules.engine.audit_path`, the real decks
of ../shared/kbh-upstream registered) and prints the verdict without and with the regrade.
`--as-failed PROBE` rewrites that probe's FLAGGED status to FAILED first: what the verdict would have
been had the probe failed (the verifier before a contract change), on the same numbers.

    .venv/bin/python scripts/gpu_lane_real_verdicts.py docs/gpu-lane/<file>.jsonl [--as-failed weight_mutation]

Nothing is re-measured: the numbers are the device's, the verdict logic is kaudit's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from audit_rules.engine import audit_path  # noqa: E402
from graders.results import GradeResult, ProbeResult, ProbeStatus, Provenance  # noqa: E402
from ingest.decks import bundled_decks, scan_deck_dir  # noqa: E402

SHARED = REPO.parent / "shared"


def grade_of(rec: dict[str, Any], as_failed: set[str]) -> GradeResult:
    fields = {f.name for f in dataclasses.fields(Provenance)}
    prov: dict[str, Any] = dict.fromkeys(fields)
    prov.update({k: v for k, v in (rec.get("provenance") or {}).items() if k in fields})
    prov.update(device="cuda", smoke=False, host=prov.get("host") or "device", grader_version=prov.get("grader_version") or "lane")
    probes = []
    for name, p in (rec.get("probes") or {}).items():
        status = ProbeStatus(p["status"])
        if name in as_failed and status is ProbeStatus.FLAGGED:
            status = ProbeStatus.FAILED
        probes.append(ProbeResult(probe=name, status=status, summary=p.get("summary") or "", device="cuda",
                                  smoke=False, numbers=p.get("numbers") or {}))
    correct = rec.get("correct")
    return GradeResult(correct=correct, check_lines=["PASS"] if correct else [], benchmark_lines=[],
                       peak_fraction=rec.get("peak_fraction"), shapes=[], failure_reason=rec.get("failure_reason"),
                       infra_failure=False, framework=None, provenance=Provenance(**prov), probes=probes, detail=None)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", type=Path)
    ap.add_argument("--as-failed", action="append", default=[], help="probe whose FLAGGED status to read as FAILED")
    args = ap.parse_args(argv)
    upstream = SHARED / "kbh-upstream" / "hard"
    decks = [scan_deck_dir(p, "kbh-hard-" + p.name.removeprefix("problems-")) for p in sorted(upstream.glob("problems-*"))]
    decks += bundled_decks()
    for line in args.records.read_text().splitlines():
        rec = json.loads(line)
        archives = sorted((SHARED / "kbh-dev" / "archives").glob(f"{rec['run_id']}*"))
        if not archives:
            print(f"{rec['run_id']}: archive not in ../shared/kbh-dev")
            continue
        for label, grade in (("static only", None), ("with the recorded regrade", grade_of(rec, set(args.as_failed)))):
            v = audit_path(archives[0], decks, grade=grade)
            print(f"{rec['run_id']} [{label}] verdict={v.verdict.value} publish_grade={v.publish_grade} "
                  f"measurement={v.measurement_status.value}")
            for reason in v.reasons:
                if reason.startswith(("probe ", "KA", "advisory KA102", "static evidence")) or "empirical" in reason:
                    print(f"    {reason[:400]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
