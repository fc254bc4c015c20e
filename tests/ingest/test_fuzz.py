"""Property tests: whatever the member names or transcript bytes, ingest never escapes or crashes."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.archive import safe_unpack
from ingest.model import ArchiveRejected, Limits
from ingest.transcripts import read_events
from tests.archive_factory import GOOD_RESULT, write_members

_PARTS = st.sampled_from(["run", "a", "..", ".", "", "b\\c", "x\x00y", "caf\u00e9", "cafe\u0301", "/", "C:",
                          "result.json", "solution.py", " ", "\n", "__MACOSX", "d" * 300])
_NAMES = st.lists(_PARTS, min_size=1, max_size=4).map("/".join)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(_NAMES, min_size=0, max_size=6), fmt=st.sampled_from(["tar", "zip"]))
def test_random_member_names_never_escape(names: list[str], fmt: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="kaudit-fuzz-"))
    try:
        work = tmp / "work"
        work.mkdir()
        staging = work / "staging"
        members = [("run/result.json", GOOD_RESULT, {})] + [(n, b"data", {}) for n in names]
        try:
            archive = write_members(tmp, members, fmt)
        except (ValueError, UnicodeError, AssertionError):
            return  # the stdlib writer refused the name; nothing to test
        try:
            un = safe_unpack(archive, staging, Limits(max_members=50))
        except ArchiveRejected:
            assert not staging.exists() or not any(staging.iterdir())
        else:
            root = staging.resolve()
            for sf in un.files.values():
                real = Path(os.path.realpath(sf.staged_path))
                assert str(real).startswith(str(root) + os.sep)
                assert ".." not in sf.path.split("/") and "\\" not in sf.path and "\x00" not in sf.path
        # nothing was written next to the staging folder
        assert sorted(p.name for p in work.iterdir()) in ([], ["staging"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_JSONISH = st.one_of(
    st.binary(max_size=60),
    st.dictionaries(st.sampled_from(["type", "message", "payload", "part", "content", "role", "subtype",
                                     "sessionID", "choices", "delta", "item", "tool_calls", "error"]),
                    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                                 lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c,
                                                                                    max_size=3),
                                 max_leaves=6),
                    max_size=5).map(lambda d: json.dumps(d).encode()),
)


@settings(max_examples=50, deadline=None)
@given(lines=st.lists(_JSONISH, max_size=8), head=st.sampled_from([
    b"", b'{"type":"system","subtype":"init"}\n', b'{"type":"session_meta","timestamp":"t","payload":{}}\n',
    b'{"type":"step_start","timestamp":1,"sessionID":"s","part":{}}\n', b'{"choices":[]}\n',
    b'{"role":"assistant","content":"x"}\n', b'{"type":"init","model":"m"}\n']))
def test_random_transcript_lines_never_fatal(lines: list[bytes], head: bytes) -> None:
    fd, name = tempfile.mkstemp(suffix=".jsonl")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head + b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
        events, stats = read_events(Path(name), "t")
        assert stats.events == len(events)
        assert stats.lines >= stats.json_lines + stats.unparsable_lines
        assert [e.index for e in events] == list(range(len(events)))
    finally:
        os.unlink(name)
