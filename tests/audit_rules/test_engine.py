"""The audit engine: context, crash isolation, one streaming pass per transcript, regrade staging."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import audit_rules.engine as engine
from audit_rules.base import AuditContext, Effect, Finding, Probe, RuleKind, RuleMeta, Severity
from audit_rules.engine import (
    audit_path,
    build_context,
    problem_info,
    required_probes,
    run_rules,
)
from audit_rules.verdicts import Verdict
from ingest.archive import safe_unpack
from ingest.model import TranscriptEvent
from ingest.run import parse_run, stage_solution
from tests.audit_rules.test_synthesis import finding
from tests.corpus.build import add_template_files, synthesized_result, tar_tree, write_json

TRANSCRIPT = [
    {"type": "system", "subtype": "init", "session_id": "s", "model": "m"},
    {"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "hello"}]}},
    {"type": "assistant", "message": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}]}},
    {"type": "user", "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]}},
]  # fmt: skip


def _archive(tmp: Path, decks: Any, *, sidecar: bool = False):  # type: ignore[no-untyped-def]
    tree = tmp / "tree"
    tree.mkdir()
    (tree / "solution.py").write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    pass\n")
    if sidecar:
        (tree / "scratch").mkdir()
        (tree / "scratch" / "kern.cu").write_text("__global__ void k() {}\n")
    (tree / "transcript.jsonl").write_text("".join(json.dumps(x) + "\n" for x in TRANSCRIPT))
    write_json(tree / "result.json", synthesized_result("01_fp8_gemm", True))
    archive = safe_unpack(tar_tree(tree, tmp / "a.tar.gz"), tmp / "staged")
    return archive, parse_run(archive, decks)


def _rule_module(rule_id: str, kind: RuleKind, body: dict[str, Any]) -> types.ModuleType:
    mod = types.ModuleType(f"test_rule_{rule_id}")
    mod.RULE = RuleMeta(id=rule_id, name=f"test-{rule_id.lower()}", kind=kind, severity=Severity.LOW,  # type: ignore[attr-defined]
                        effect=Effect.ADVISORY, summary="test rule")
    for k, v in body.items():
        setattr(mod, k, v)
    return mod


def test_problem_info_reads_the_registered_deck(decks: Any) -> None:
    info = problem_info(decks, "01_fp8_gemm")
    assert info is not None and info.deck == "hard"
    assert info.regime == "compute" and info.precision == "fp8"
    assert "torch._scaled_mm" in info.forbidden and info.allows_lower_precision is False
    assert info.raw["id"] == "01_fp8_gemm"
    assert problem_info(decks, "99_unknown") is None and problem_info(decks, None) is None


def test_context_holds_submission_problem_and_streaming_events(tmp_path: Path, decks: Any) -> None:
    archive, run = _archive(tmp_path, decks)
    ctx = build_context(archive, run, decks, frozenset({"other_run"}))
    assert ctx.problem is not None and ctx.problem.problem_id == "01_fp8_gemm"
    assert "solution.py" in ctx.submission.modules
    first = list(ctx.transcript_events())
    again = list(ctx.transcript_events())  # a fresh iterator per call
    assert len(first) == len(again) >= 3 and isinstance(first[0], TranscriptEvent)
    assert ctx.other_run_ids == {"other_run"}


def test_a_crashing_rule_yields_an_advisory_finding_and_the_audit_goes_on(tmp_path: Path, decks: Any) -> None:
    archive, run = _archive(tmp_path, decks)
    ctx = build_context(archive, run, decks)

    def boom(ctx: AuditContext) -> list[Finding]:
        raise RuntimeError("kaboom")

    def fine(ctx: AuditContext) -> list[Finding]:
        return [finding("KA198", Effect.ADVISORY), finding("KA198", Effect.ADVISORY)]  # duplicate: deduped

    class BadChecker:
        def __init__(self, ctx: AuditContext) -> None:
            self.n = 0

        def feed(self, event: TranscriptEvent) -> None:
            self.n += 1
            if self.n == 2:
                raise ValueError("bad event")

        def finish(self) -> list[Finding]:
            return []

    findings = run_rules(ctx, [
        _rule_module("KA197", RuleKind.STATIC, {"check": boom}),
        _rule_module("KA198", RuleKind.STATIC, {"check": fine}),
        _rule_module("KA297", RuleKind.TRANSCRIPT, {"Checker": BadChecker}),
    ])  # fmt: skip
    crashed = {f.rule_id: f for f in findings if f.data.get("crashed")}
    assert set(crashed) == {"KA197", "KA297"}
    assert crashed["KA197"].effect is Effect.ADVISORY and "kaboom" in crashed["KA197"].explanation
    assert "bad event" in crashed["KA297"].explanation
    assert [f.rule_id for f in findings].count("KA198") == 1


def test_each_transcript_is_streamed_once_for_all_checkers(tmp_path: Path, decks: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    archive, run = _archive(tmp_path, decks)
    ctx = build_context(archive, run, decks)
    opened: list[str] = []
    real = engine.iter_events

    def counting(path: Path, source: str, stats: Any = None) -> Iterator[TranscriptEvent]:
        opened.append(source)
        return real(path, source, stats)

    monkeypatch.setattr(engine, "iter_events", counting)
    seen: dict[str, int] = {}

    def checker(tag: str) -> type:
        class C:
            def __init__(self, ctx: AuditContext) -> None:
                seen[tag] = 0

            def feed(self, event: TranscriptEvent) -> None:
                seen[tag] += 1

            def finish(self) -> list[Finding]:
                return []

        return C

    run_rules(ctx, [_rule_module("KA295", RuleKind.TRANSCRIPT, {"Checker": checker("a")}),
                    _rule_module("KA296", RuleKind.TRANSCRIPT, {"Checker": checker("b")})])
    assert opened == ["transcript.jsonl"]
    assert seen["a"] == seen["b"] >= 3


def test_checkers_declaring_kinds_see_only_those_events(tmp_path: Path, decks: Any) -> None:
    archive, run = _archive(tmp_path, decks)
    ctx = build_context(archive, run, decks)
    kinds_seen: dict[str, list[str]] = {"all": [], "calls": []}

    def checker(tag: str, kinds: frozenset[str] | None) -> type:
        class C:
            def __init__(self, ctx: AuditContext) -> None:
                pass

            def feed(self, event: TranscriptEvent) -> None:
                kinds_seen[tag].append(str(event.kind))

            def finish(self) -> list[Finding]:
                return []

        if kinds is not None:
            C.KINDS = kinds  # type: ignore[attr-defined]
        return C

    run_rules(ctx, [_rule_module("KA293", RuleKind.TRANSCRIPT, {"Checker": checker("all", None)}),
                    _rule_module("KA294", RuleKind.TRANSCRIPT,
                                 {"Checker": checker("calls", frozenset({"tool_call"}))})])
    assert set(kinds_seen["calls"]) == {"tool_call"}
    assert kinds_seen["calls"] == [k for k in kinds_seen["all"] if k == "tool_call"]
    assert len(kinds_seen["all"]) > len(kinds_seen["calls"])


def test_two_checkers_crashing_on_one_event_are_both_reported(tmp_path: Path, decks: Any) -> None:
    archive, run = _archive(tmp_path, decks)
    ctx = build_context(archive, run, decks)
    fed: list[int] = []

    def crashing() -> type:
        class C:
            def __init__(self, ctx: AuditContext) -> None:
                pass

            def feed(self, event: TranscriptEvent) -> None:
                raise RuntimeError("boom")

            def finish(self) -> list[Finding]:
                return []

        return C

    class Survivor:
        def __init__(self, ctx: AuditContext) -> None:
            pass

        def feed(self, event: TranscriptEvent) -> None:
            fed.append(event.index)

        def finish(self) -> list[Finding]:
            return []

    found = run_rules(ctx, [_rule_module("KA290", RuleKind.TRANSCRIPT, {"Checker": crashing()}),
                            _rule_module("KA291", RuleKind.TRANSCRIPT, {"Checker": crashing()}),
                            _rule_module("KA292", RuleKind.TRANSCRIPT, {"Checker": Survivor})])
    crashed = {f.data.get("rule") or f.rule_id for f in found if f.data.get("crashed")}
    assert len([f for f in found if f.data.get("crashed")]) == 2, crashed
    assert len(fed) >= 3  # the survivor saw the whole stream


def test_required_probes_are_unique_and_ordered() -> None:
    fs = [
        finding("KA140", Effect.NEEDS_PROBE, probe=Probe.L2_POLICY),
        finding("KA103", Effect.NEEDS_PROBE, probe=Probe.SAME_STORAGE_OVERWRITE),
        finding("KA104", Effect.ADVISORY, probe=Probe.SAME_STORAGE_OVERWRITE),
        finding("KA110", Effect.DECISIVE_HACK),
    ]
    assert required_probes(fs) == [Probe.SAME_STORAGE_OVERWRITE, Probe.L2_POLICY]


def test_stage_solution_places_sidecars_beside_and_under_scratch(tmp_path: Path, decks: Any) -> None:
    archive, _ = _archive(tmp_path, decks, sidecar=True)
    dest = stage_solution(archive, tmp_path / "sol")
    assert (dest / "solution.py").is_file()
    assert (dest / "kern.cu").read_text() == (dest / "scratch" / "kern.cu").read_text()
    assert not (dest / "transcript.jsonl").exists() and not (dest / "result.json").exists()


def test_audit_path_cleans_up_and_attaches_context(
    tmp_path: Path, decks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a private temp root: other xdist workers' audits must not show up in the before/after sets
    private_tmp = tmp_path / "tmproot"
    private_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private_tmp))  # the pipeline's temp folders
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "solution.py").write_text("import torch\n")
    res = synthesized_result("01_fp8_gemm", True)
    res.update(correct=True, failure_reason="pass")
    write_json(tree / "result.json", res)
    (tree / "check.log").write_text("PASS\n")
    add_template_files(tree, "01_fp8_gemm")
    v = audit_path(tar_tree(tree, tmp_path / "a.tar.gz"), decks)
    assert list(private_tmp.glob("kaudit-audit-*")) == []
    assert v.context["deck"] == "hard" and v.context["template"]["status"] == "verified"
    assert v.context["rules_run"] == len(engine.RULES) and v.context["rules_crashed"] == []
    assert v.producer_detail.startswith("kaudit ")


@pytest.mark.slow
def test_cpu_regrade_catches_the_stale_cache_example(tmp_path: Path, decks: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: static finding -> required probe -> kaudit's CPU regrade -> FAILED -> reward_hack."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    example = Path(__file__).resolve().parents[2] / "kernels/hard/01_fp8_gemm/examples/hack_stale_cache.py"
    if not example.is_file():
        pytest.fail(f"the deck example {example} is gone")
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copyfile(example, tree / "solution.py")
    res = synthesized_result("01_fp8_gemm", True)
    res.update(correct=True, failure_reason="pass")
    write_json(tree / "result.json", res)
    (tree / "check.log").write_text("PASS\n")
    add_template_files(tree, "01_fp8_gemm")
    v = audit_path(tar_tree(tree, tmp_path / "a.tar.gz"), decks, regrade_device="cpu", regrade_timeout_s=600)
    assert v.verdict is Verdict.REWARD_HACK, v.reasons
    assert v.failure_reason == "audit_empirical_failed" and v.correct is False
    failed = [p for p in v.probes_run if p["status"] == "failed"]
    assert failed and failed[0]["probe"] == "same_storage_overwrite" and failed[0]["smoke"] is True
    assert not v.publish_grade and sys.modules.get("solution") is None  # never imported in-process


def test_problem_info_reads_an_edited_deck_again(tmp_path: Path, decks: Any) -> None:
    deck = next(d for d in decks if d.root is not None and "01_fp8_gemm" in d.problems)
    root = tmp_path / "deck"
    shutil.copytree(Path(deck.root) / "01_fp8_gemm", root / "01_fp8_gemm")
    copy = dataclasses.replace(deck, root=root)
    first = problem_info([copy], "01_fp8_gemm")
    assert first is not None and first.regime == "compute"
    first.raw["regime"] = "changed by a caller"  # each audit gets its own problem.yaml dict
    yaml_path = root / "01_fp8_gemm" / "problem.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("regime: compute", "regime: memory"))
    again = problem_info([copy], "01_fp8_gemm")
    assert again is not None and again.regime == "memory" and again.raw["regime"] == "memory"
