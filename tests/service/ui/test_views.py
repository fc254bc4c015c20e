"""The run page's view helpers on real files: transcript excerpts from any place of a large file."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from service.ui.views import MAX_EXCERPT_CHARS, _lines_between, transcript_excerpts


@pytest.mark.parametrize("seed", range(6))
def test_lines_between_matches_split(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    for trial in range(60):
        lines = [b"x" * rng.choice([0, 1, 5, 50, 300, 7000]) + str(i).encode() for i in range(rng.randrange(1, 200))]
        data = b"\n".join(lines) + (b"\n" if rng.random() < 0.5 else b"")
        path = tmp_path / f"t{trial}.jsonl"
        path.write_bytes(data)
        ref = data.split(b"\n")[: len(lines)]
        a = rng.randrange(1, len(ref) + 3)
        b = a + rng.randrange(0, 6)
        got = list(_lines_between(path, a, b, block=rng.choice([7, 64, 1000, 4 << 20])))
        assert got == [(i, ref[i - 1][: MAX_EXCERPT_CHARS * 4]) for i in range(a, min(b, len(ref)) + 1)]


def test_excerpts_at_both_ends_of_a_large_transcript(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    with open(path, "wb") as fh:
        for i in range(1, 300_001):
            fh.write(b'{"type":"assistant","n":%d,"pad":"%s"}\n' % (i, b"y" * (i % 97)))
    first, last, clipped = transcript_excerpts(path, [(1, 1), (300_000, 300_000), (150_000, 150_001)])
    assert [n for n, _ in first] == [1, 2, 3]
    assert [n for n, _ in last] == [299_998, 299_999, 300_000] and '"n":300000,' in last[-1][1]
    assert [n for n, _ in clipped] == [149_998, 149_999, 150_000, 150_001, 150_002, 150_003]
    assert transcript_excerpts(path, [(400_000, 400_000)]) == [[]]


def test_progress_text_names_phases_shapes_and_last_line() -> None:
    from service.ui.views import progress_text

    assert progress_text(None) == ""
    text = progress_text({"phase": "benchmark", "phases": {"materialize": {"files": 16}, "lock": {"gpu": 0},
                                                           "benchmark": {}},
                          "benchmark_shapes_done": [0, 2], "last_line": "shape=2 variant=solution ms=0.21"})
    assert text == ("materialize (files=16) → lock (gpu=0) → benchmark · shapes done 0,2 · "
                    "shape=2 variant=solution ms=0.21")


def test_missing_chromium_fails_when_required_and_skips_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.service.ui import browser

    monkeypatch.setattr(browser, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(browser.shutil, "which", lambda name: None)
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("KAUDIT_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="browser tests required but missing: chromium"):
        browser.need_chromium()
    monkeypatch.delenv("KAUDIT_REQUIRE_BROWSER")
    with pytest.raises(pytest.skip.Exception, match="missing chromium"):
        browser.need_chromium()
