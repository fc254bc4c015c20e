"""graders.callsite: a caller-sniffing forward sees the deck's script in its stack and argv."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

from graders.callsite import as_script


def _sniff() -> str:
    if any("benchmark" in a for a in sys.argv):
        return "argv:benchmark"
    for frame in inspect.stack():
        if "benchmark" in frame.filename:
            return "stack:benchmark"
    if any(f.filename.endswith("check.py") for f in inspect.stack()):
        return "stack:check"
    return "plain"


def test_calls_look_like_the_deck_scripts(tmp_path: Path) -> None:
    argv = list(sys.argv)
    assert _sniff() == "plain"
    with as_script(tmp_path, "benchmark.py") as call:
        assert sys.argv == [str(tmp_path / "benchmark.py")]
        assert call(_sniff, ()) == "argv:benchmark"
    with as_script(tmp_path, "check.py") as call:
        assert call(_sniff, ()) == "stack:check"
        frames = []
        call(lambda: frames.extend(f.filename for f in inspect.stack()), ())
        assert str(tmp_path / "check.py") in frames
    assert sys.argv == argv  # restored


def test_argv_restored_when_the_call_raises(tmp_path: Path) -> None:
    argv = list(sys.argv)

    def boom() -> None:
        raise RuntimeError("x")

    try:
        with as_script(tmp_path, "benchmark.py") as call:
            call(boom, ())
    except RuntimeError:
        pass
    assert sys.argv == argv


def test_check_and_benchmark_call_as_the_deck_scripts(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """run_check calls (and imports) as check.py, run_benchmark as benchmark.py: a caller-sniffing
    solution passes the check on its exact path and is timed on its other one, as under the real
    harness (the checked_vs_timed probe is what tells the two apart)."""
    from graders.correctness import run_check
    from graders.timing import run_benchmark

    from .conftest import DECK, SOLUTIONS

    sol = SOLUTIONS / "gemm" / "caller_sniff.py"
    log = tmp_path / "calls.log"
    monkeypatch.setenv("CALLER_SNIFF_LOG", str(log))
    check = run_check(sol, DECK / "gemm_tiny", device="cpu", shapes="small", emit=lambda _line: None)
    assert check.passed
    seen = log.read_text().split()
    assert seen[0] == "import:other" and set(seen[1:]) == {"call:check"}, seen
    log.unlink()
    bench = run_benchmark(sol, DECK / "gemm_tiny", device="cpu", shapes="small", emit=lambda _line: None,
                          warmup=1, trials=2)
    assert bench.ok
    seen = log.read_text().split()
    assert seen[0] == "import:benchmark" and set(seen[1:]) == {"call:benchmark"}, seen
