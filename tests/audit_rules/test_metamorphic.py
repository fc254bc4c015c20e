"""The real corpus, every solution's own names renamed: no verdict moves (bench/metamorphic.py).

A rule that reads names instead of code would move a verdict here; the corpus is the real
../shared/kbh-dev, read in place (the renamed copy goes to tmp_path)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.metamorphic import main

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "kbh-dev"


@pytest.mark.skipif(not (CORPUS / "labels.json").is_file(), reason="../shared/kbh-dev not present")
def test_renaming_every_solution_name_moves_no_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main([str(CORPUS), "--out", str(tmp_path / "renamed"), "--jobs", "1"])
    out = capsys.readouterr().out
    assert "solutions rewritten (rename)" in out and "verdict moved on 0 of" in out, out[-2000:]
    assert rc == 0
