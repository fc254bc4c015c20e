"""The grader CLI: exit codes, deck resolution, and `python -m graders.cli` as a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from graders.cli import check_exit_code, check_main, resolve_problem

from .conftest import DECK, HARD, REPO, SOLUTIONS


def test_exit_code_needs_exactly_one_trailing_pass() -> None:
    assert check_exit_code(["framework: x", "PASS"]) == 0
    assert check_exit_code(["PASS", "PASS"]) == 1
    assert check_exit_code(["PASS", "FAIL: x"]) == 1
    assert check_exit_code([]) == 1


def test_resolve_problem(tmp_path: Path) -> None:
    assert resolve_problem("gemm_tiny", deck_root=DECK) == (DECK / "gemm_tiny").resolve()
    assert resolve_problem(str(DECK / "topk_tiny")) == (DECK / "topk_tiny").resolve()
    with pytest.raises(FileNotFoundError):
        resolve_problem("nope", deck_root=DECK)


def test_check_main_writes_log_and_returns_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "check.log"
    code = check_main(SOLUTIONS / "gemm" / "wrong_math.py", "gemm_tiny", device="cpu", log=log, deck_root=DECK)
    assert code == 1
    text = log.read_text()
    assert text.splitlines()[-1].startswith("FAIL: shape 0")
    assert capsys.readouterr().out.splitlines()[-1] == text.splitlines()[-1]


@pytest.mark.parametrize("bad", ["-1", "nan"])
def test_bench_refuses_a_negative_or_nan_window(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    from graders.cli import main

    code = main(["bench", str(SOLUTIONS / "gemm" / "good.py"), "--problem", str(DECK / "gemm_tiny"),
                 "--device", "cpu", "--window-ms", bad])
    assert code == 2
    assert "--window-ms must be a number >= 0" in capsys.readouterr().err


def test_module_cli_subprocess_pass() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "graders.cli", "check", str(SOLUTIONS / "gemm" / "good.py"), "--problem",
         str(DECK / "gemm_tiny"), "--device", "cpu"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == "PASS"


@pytest.mark.skipif(not (HARD / "01_fp8_gemm" / "check.py").is_file(), reason="deck not present")
def test_deck_check_py_entry_point(tmp_path: Path) -> None:
    """The deck's check.py runs from the agent's workspace with ./solution.py (as KBH does)."""
    sol = tmp_path / "solution.py"
    sol.write_text((HARD / "01_fp8_gemm" / "examples" / "broken_no_scale.py").read_text())
    proc = subprocess.run(
        [sys.executable, str(HARD / "01_fp8_gemm" / "check.py"), "--device", "cpu"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": ""}, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("FAIL: shape 0")
