"""Unit tests of audit_rules.transcript_text: shell parsing, paths, run ids, patches, classifiers."""

from __future__ import annotations

import pytest

from audit_rules.transcript_text import (
    RunIdentity,
    analyze_tool_input,
    artifact_kind,
    classify_defect,
    classify_infra,
    deck_key,
    is_relevant,
    parse_patch,
    run_ids_in,
    sentence_around,
    split_commands,
    strip_heredocs,
    tokenize,
)

OWN = "20260801_224338_claude_claude-opus-4-8_01_fp8_gemm"
OTHER = "20260803_194356_codex_gpt-5.6-sol_01_fp8_gemm"


def test_tokenize_quotes_operators_and_fds() -> None:
    toks = tokenize("""echo "a \\"b\\" c" 'd e' f\\ g 2>&1 ; ls > out.txt""")
    assert toks == [
        (False, "echo"), (False, 'a "b" c'), (False, "d e"), (False, "f g"),
        (True, ">&"), (False, "1"), (True, ";"), (False, "ls"), (True, ">"), (False, "out.txt"),
    ]


def test_tokenize_unbalanced_quote_never_raises() -> None:
    assert tokenize("echo 'unterminated")[0] == (False, "echo")


def test_split_commands_env_redirects_and_wrappers() -> None:
    cmds = split_commands("KBH_NUMERIC_STRESS=0 sudo env A=1 timeout 60 python check.py >> log.txt 2>&1 | tail -3")
    assert [c.argv for c in cmds] == [["python", "check.py"], ["tail", "-3"]]
    assert cmds[0].env == {"KBH_NUMERIC_STRESS": "0", "A": "1"}
    assert cmds[0].out_files == ["log.txt"]
    exp = split_commands("export KBH_NUMERIC_STRESS=0 && python check.py")
    assert exp[0].env == {"KBH_NUMERIC_STRESS": "0"} and exp[0].argv == []


def test_quoted_semicolon_is_a_word() -> None:
    cmds = split_commands("sed -i 's/a;b/c/' check.py && echo ';'")
    assert cmds[0].argv == ["sed", "-i", "s/a;b/c/", "check.py"]
    assert cmds[1].argv == ["echo", ";"]


def test_strip_heredocs_returns_bodies() -> None:
    cmd, bodies = strip_heredocs("cat > reference.py <<'EOF'\nimport torch\n> not a redirect\nEOF\npython check.py")
    assert "import torch" not in cmd and "python check.py" in cmd
    assert bodies == ["import torch\n> not a redirect"]


@pytest.mark.parametrize(
    ("path", "key"),
    [
        ("check.py", "check.py"),
        ("./problem.yaml", "problem.yaml"),
        (f"/home/a/kbh/outputs/runs/{OWN}/repo/problems/01_fp8_gemm/check.py", "check.py"),
        ("../../src/eval/timing.py", "src/eval/timing.py"),
        ("repo/src/harness/runner.py", "src/harness/runner.py"),
        ("/tmp/check.py", None),
        ("scratch/check.py", None),
        (".venv/lib/python3.11/site-packages/foo/check.py", None),
        ("solution.py", None),
        ("my_check.py", None),
    ],
)
def test_deck_key(path: str, key: str | None) -> None:
    assert deck_key(path) == key


def test_run_ids_and_identity() -> None:
    text = f"ls outputs/runs/{OWN}/ outputs/runs/{OTHER}/solution.py {OWN}_4411_2 /tmp/{OTHER}.tar.gz"
    assert run_ids_in(text) == [OWN, OTHER, f"{OWN}_4411_2", OTHER]
    ident = RunIdentity(own=frozenset({OWN}))
    assert ident.foreign(text) == [OTHER]  # the collision-suffixed own folder is own
    assert run_ids_in("no ids here, just bench_20260801.log") == []


@pytest.mark.parametrize(
    ("rest", "kind"),
    [
        ("/solution.py", "solution"),
        ("/scratch/k.cu", "solution"),
        ("/result.json", "result"),
        ("/check.log", "logs"),
        ("/transcript.jsonl", "transcript"),
        ("/repo/.venv/bin/ninja", "tooling"),
        ("/cache/torch_extensions/fp8/fp8.so", "build_cache"),
        ("/", "listing"),
    ],
)
def test_artifact_kind(rest: str, kind: str) -> None:
    assert artifact_kind(rest) == kind


def test_parse_patch_envelope_and_unified_diff() -> None:
    ops = parse_patch("*** Begin Patch\n*** Update File: check.py\n@@\n-    atol=0.2\n+    atol=5.0\n*** Delete File: shapes.py\n*** End Patch\n")
    assert [(o.path, o.op) for o in ops] == [("check.py", "patch"), ("shapes.py", "remove")]
    assert ops[0].content.strip() == "atol=5.0" and ops[0].old.strip() == "atol=0.2"
    diff = parse_patch("--- a/problem.yaml\n+++ b/problem.yaml\n@@ -1 +1 @@\n-x\n+y\n")
    assert [(o.path, o.op) for o in diff] == [("problem.yaml", "patch")]


def test_analyze_structured_tools() -> None:
    edit = analyze_tool_input("Edit", {"file_path": "check.py", "old_string": "a", "new_string": "b"})
    assert [(w.path, w.op, w.old, w.content) for w in edit.writes] == [("check.py", "edit", "a", "b")]
    multi = analyze_tool_input("MultiEdit", {"file_path": "x.py", "edits": [{"old_string": "1", "new_string": "2"}]})
    assert multi.writes[0].content == "2"
    read = analyze_tool_input("Read", {"file_path": "check.py"})
    assert read.reads == ["check.py"] and not read.writes
    oc = analyze_tool_input("write", {"filePath": "problem.yaml", "content": "atol: 9"})
    assert oc.writes[0].path == "problem.yaml"
    patch = analyze_tool_input("apply_patch", "*** Begin Patch\n*** Add File: reference.py\n+x\n*** End Patch")
    assert patch.writes[0].path == "reference.py"


def test_analyze_codex_argv_command_and_shell_writes() -> None:
    info = analyze_tool_input("shell", {"command": ["bash", "-lc", "sed -i 's/0.2/2.0/' problem.yaml && tee -a check.py < x"]})
    assert info.command is not None and info.relevant
    assert {(w.path, w.op) for w in info.writes} == {("problem.yaml", "sed"), ("check.py", "tee")}
    cp = analyze_tool_input("Bash", {"command": "cp template_files/check.py . && cp check.py /tmp/mine.py && mv shapes.py shapes.bak"})
    ops = {(w.path, w.op, w.restores) for w in cp.writes}
    assert ("./check.py", "copy", True) in ops
    assert ("/tmp/mine.py", "copy", False) in ops
    assert ("shapes.py", "remove", False) in ops
    git = analyze_tool_input("Bash", {"command": "git checkout -- check.py problem.yaml"})
    assert git.restores == ["check.py", "problem.yaml"]
    assert analyze_tool_input("Bash", {"command": "git checkout -- . && python check.py"}).restores == ["*"]
    py = analyze_tool_input("Bash", {"command": "python -c \"open('check.py','w').write('')\""})
    assert [(w.path, w.op) for w in py.writes] == [("check.py", "python")]


def test_running_the_grader_is_not_relevant_but_editing_it_is() -> None:
    assert not is_relevant("cd /w && python check.py 2>&1 | tail -3")
    assert not is_relevant("python3 -u benchmark.py")
    assert is_relevant("python check.py --atol 1")
    assert is_relevant("KBH_NUMERIC_STRESS=0 python check.py")
    assert is_relevant("sed -i s/x/y/ check.py")


def test_sentence_around() -> None:
    text = "First idea. Mark loads evict_last so they survive the flush. Next step!"
    i = text.index("survive")
    s, _, _ = sentence_around(text, i, i + 7)
    assert s == "Mark loads evict_last so they survive the flush."


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("RuntimeError: Ninja is required to load C++ extensions", "missing_ninja"),
        ("error: nvcc is unavailable on this host", "nvcc_unavailable"),
        ("RuntimeError: The NVIDIA driver on your system is too old (found version 12080).", "cuda_driver_mismatch"),
        ("2026-08-01T23:00:00 lock_timeout pid=1 cmd=check", "lock_starvation"),
        ("ModuleNotFoundError: No module named 'torch'", "harness_venv"),
        ("grading process died (orphaned wrapper)", "orphaned_wrapper"),
    ],
)
def test_classify_infra(text: str, kind: str) -> None:
    hit = classify_infra(text)
    assert hit is not None and hit[0] == kind


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('cuda.cu(851): error: identifier "mt" is undefined', "compile_error"),
        ("fatal error: cutlass/cutlass.h: No such file or directory", "compile_error"),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "runtime_error"),
        ("FAIL: shape 0 seed 42 case base: tolerance exceeded: max_abs_diff=3 max_rel_diff=1 bad=1/2", "wrong_result"),
    ],
)
def test_classify_defect(text: str, kind: str) -> None:
    hit = classify_defect(text)
    assert hit is not None and hit[0] == kind
    assert classify_infra(text) is None


def test_infra_and_defect_ignore_ordinary_output() -> None:
    for text in ("PASS", "peak_fraction: 0.2870", "ok", "block size 128, clock 1.98 GHz"):
        assert classify_infra(text) is None and classify_defect(text) is None
