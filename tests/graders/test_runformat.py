"""graders.runformat: the run-format facts in one place, read by ingest, graders and audit_rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import audit_rules.source_model
import audit_rules.synthesis
import graders.forbidden
import graders.framework
import graders.sources
import ingest.run
import ingest.transcripts
from audit_rules.rules.static import ka120_forbidden_op
from graders import runformat as rf

ROOT = Path(__file__).resolve().parents[2]


def test_every_reader_uses_the_one_definition() -> None:
    assert ingest.run.split_embedded_sidecars is rf.split_embedded_sidecars
    assert ingest.transcripts.TRANSCRIPT_FILES is rf.TRANSCRIPT_FILES
    assert audit_rules.synthesis.TRANSCRIPT_SOURCES is rf.TRANSCRIPT_FILES
    for module in (audit_rules.source_model, graders.sources, graders.forbidden, graders.framework):
        assert module.NATIVE_SUFFIXES is rf.NATIVE_SUFFIXES, module.__name__
    assert audit_rules.source_model.PY_SUFFIXES is rf.PY_SUFFIXES is graders.sources.PY_SUFFIXES


def test_graders_import_without_the_service_stack() -> None:
    """graders (and the run-format module) import with pydantic, sqlalchemy and fastapi absent."""
    code = (
        "import sys\n"
        "for name in ('pydantic', 'sqlalchemy', 'fastapi', 'typer', 'pydantic_settings'):\n"
        "    sys.modules[name] = None\n"
        "import graders.runformat, graders.forbidden, graders.sources, graders.framework, graders.regrade\n"
        "import graders.correctness, graders.probes.verify\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]


@pytest.mark.parametrize(
    ("raw", "dotted", "form"),
    [
        ("torch.topk", ["torch.topk"], "op"),
        ("F.scaled_dot_product_attention", ["torch.nn.functional.scaled_dot_product_attention"], "op"),
        ("nn.functional.linear", ["torch.nn.functional.linear"], "op"),
        ("aten.sort", ["torch.ops.aten.sort"], "op"),
        ("Tensor.topk", ["torch.Tensor.topk"], "op"),
        ("torch.ops.aten.topk/sort", ["torch.ops.aten.topk", "torch.ops.aten.sort"], "op"),
        ("chunk_kda", ["chunk_kda"], "op"),
        ("import sonic_moe", ["sonic_moe"], "module"),
        ("from sonic_moe", ["sonic_moe"], "module"),
        ("@triton.jit", ["triton.jit"], "decorator"),
    ],
)
def test_forbidden_grammar(raw: str, dotted: list[str], form: str) -> None:
    parsed = rf.parse_forbidden([raw])
    assert [e.dotted for e in parsed.entries] == dotted
    assert {e.form for e in parsed.entries} == {form} and {e.raw for e in parsed.entries} == {raw}


def test_forbidden_grammar_notes_and_leaves() -> None:
    parsed = rf.parse_forbidden(["Tensor methods", "", None, "torch.ops.aten._scaled_mm.default"])
    assert parsed.tensor_forms is True
    (entry,) = parsed.entries
    assert entry.torch_leaf == "_scaled_mm" and not entry.bare
    assert rf.parse_forbidden(["torch.sort"]).tensor_forms is False
    assert rf.parse_forbidden(["Tensor.sort"]).tensor_forms is True


def test_the_grader_scan_and_the_audit_rule_read_the_same_grammar() -> None:
    forbidden = ["torch.ops.aten.topk/sort", "import sonic_moe", "F.linear"]
    names, tensor_forms = ka120_forbidden_op.normalize(forbidden)
    assert names == sorted(e.dotted for e in graders.forbidden.normalize_entries(forbidden))
    assert names == ["sonic_moe", "torch.nn.functional.linear", "torch.ops.aten.sort", "torch.ops.aten.topk"]
    # the slash form reaches the grader's scan (it used to be one unmatched name)
    hits = graders.forbidden.scan({"solution.py": "import torch\ny = torch.ops.aten.sort(x)\nimport sonic_moe\n"},
                                  forbidden)
    assert {(h.op, h.line) for h in hits} == {("torch.ops.aten.topk/sort", 2), ("import sonic_moe", 3)}


def test_sidecar_banner_round_trip() -> None:
    text = ("import torch\n\n# " + "=" * 20 + "\n# ===== sidecar: kern.cu (12 bytes, loaded by solution.py) =====\n# "
            + "=" * 20 + "\n\n__global__ void k() {}\n")
    own, sidecars = rf.split_embedded_sidecars(text)
    assert own == "import torch\n" and sidecars == {"kern.cu": "__global__ void k() {}\n"}
    assert rf.split_embedded_sidecars("x = 1\n") == ("x = 1\n", {})
    assert rf.is_archive_name("RUN.TAR.GZ") and rf.is_archive_name("a.zip") and not rf.is_archive_name("a.txt")


def test_gpu_lock_log_grammar_is_written_and_read_by_the_same_module() -> None:
    import graders.gpu_lock
    import ingest.logs
    from graders import logformat

    assert ingest.logs.parse_gpu_lock_log is logformat.parse_gpu_lock_log is rf.parse_gpu_lock_log
    assert graders.gpu_lock.gpu_lock_line is logformat.gpu_lock_line
    text = (logformat.gpu_lock_line("wait", pid=7, cmd="kaudit-regrade", time="2026-12-03T10:00:00+00:00")
            + logformat.gpu_lock_line("start", pid=7, cmd="kaudit-regrade", time="2026-12-03T10:00:05+00:00")
            + logformat.gpu_lock_line("end", pid=7, cmd="kaudit-regrade", time="2026-12-03T10:01:05+00:00",
                                      extra="status=0 elapsed_s=60"))
    log = logformat.parse_gpu_lock_log(text)
    assert [e.event for e in log.events] == ["wait", "start", "end"] and not log.unparsed
    assert log.acquisitions == 1 and log.wait_seconds == 5.0 and log.active_seconds == 60.0
    assert log.events[2].status == 0 and log.events[0].cmd == "kaudit-regrade"
    with pytest.raises(ValueError):
        logformat.gpu_lock_line("sleep", pid=1, cmd="x", time="t")
