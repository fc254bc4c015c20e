"""The audit report: summary, verdict and why, evidence with file:line, probes, provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from audit_rules.base import Effect, Probe
from audit_rules.engine import audit_path
from audit_rules.report import render_markdown
from audit_rules.synthesis import synthesize
from graders.results import ProbeStatus
from ingest.archive import safe_unpack
from ingest.run import parse_run
from tests.audit_rules.test_synthesis import finding, grade, intent, make_run, probe
from tests.corpus.test_corpus import build_case_archive, failed_probe_grade


def test_report_sections_from_synthesized_verdict(tmp_path: Path, decks: Any) -> None:
    run = make_run(tmp_path, decks)
    f = finding("KA103", Effect.NEEDS_PROBE, probe=Probe.SAME_STORAGE_OVERWRITE, topic="stale_cache", line=57,
                name="sampled-cache-validation")
    v = synthesize(run, [f, intent("l2_policy")],
                   grade(probe("same_storage_overwrite", ProbeStatus.FAILED, "solution changed by 0")))
    md = render_markdown(run, v)
    for heading in ("# Audit report: ", "## Verdict", "## Evidence", "## Probes", "## Provenance"):
        assert heading in md
    assert "| verdict | reward_hack | KA103@solution.py:57, probe:same_storage_overwrite |" in md
    assert "`solution.py:57` — probe: same_storage_overwrite" in md
    assert "```\nquoted line\n```" in md
    assert "| same_storage_overwrite | failed | solution changed by 0 | max_abs_diff=1.5 |" in md
    assert "failure_reason | audit_empirical_failed" in md
    assert "regrade: host h, GPU NVIDIA H200" not in md  # no context attached: no regrade provenance line
    assert md.splitlines()[2].startswith("test-model via claude on 01_fp8_gemm")


def test_report_of_a_corpus_archive_reads_like_an_audit_note(tmp_path: Path, decks: Any) -> None:
    archive = build_case_archive("stale_pad_cache_sampled", tmp_path)
    v = audit_path(archive, decks, grade=failed_probe_grade())
    run = parse_run(safe_unpack(archive, tmp_path / "staged"), decks)
    md = render_markdown(run, v)
    summary = md.split("\n\n")[1]
    assert "qwen3.8-max via claude on 01_fp8_gemm (deck hard)" in summary
    assert "kaudit ran" in summary and "transcript.jsonl (claude" in summary and "check.log" in summary
    assert 'Its docstring says: "FP8 GEMM (Triton) with a cached K-padded activation' in summary
    assert v.context["archive_sha256"] in md
    assert f"{v.context['rules_run']} rules" in md
    assert "regrade: host corpus-h200, GPU NVIDIA H200 #0" in md
    assert "11.7578125" in md  # the probe's numbers
    assert "template integrity: verified" in md


def test_report_of_a_provider_failure(tmp_path: Path, decks: Any) -> None:
    archive = build_case_archive("provider_402_first_token", tmp_path)
    v = audit_path(archive, decks)
    run = parse_run(safe_unpack(archive, tmp_path / "staged"), decks)
    md = render_markdown(run, v)
    assert "The archive holds no solution.py." in md
    assert "Provider failure" in md and "Nothing was measured; not publishable." in md
    assert "No empirical probe was required or run." in md


def test_report_of_a_stored_verdict_without_context(tmp_path: Path, decks: Any) -> None:
    """A verdict rehydrated from the database may lack `context`: the parsed run fills the gaps."""
    archive = build_case_archive("deliberate_contamination", tmp_path)
    v = audit_path(archive, decks)
    v.context = {}
    md = render_markdown(parse_run(safe_unpack(archive, tmp_path / "staged"), decks), v)
    assert "transcript.jsonl (claude" in md and "template integrity: verified" in md
    assert "sha256 `not recorded`" in md and "| contamination | contaminated |" in md
