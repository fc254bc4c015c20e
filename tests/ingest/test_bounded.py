"""Bounded decompressors (ingest.bounded) and strict JSON (ingest.strict_json) on real bytes.

The bad archives themselves (lying bzip2/LZMA/deflate members, CRC mismatches, hostile
result.json, bad run_ids, case-only duplicates) are in tests/archive_factory.BAD_ARCHIVES and run
through safe_unpack (tests/ingest/test_archive.py) and over HTTP on both databases
(tests/service/test_bad_input.py); these are the pieces' own edges.
"""

from __future__ import annotations

import gzip
import io
import zipfile
import zlib
from pathlib import Path

import pytest

from ingest.archive import safe_unpack
from ingest.bounded import BoundedGzipReader, ZipMemberReader
from ingest.model import ArchiveRejected, RejectReason
from ingest.strict_json import JsonRefused, loads_strict
from tests.archive_factory import GOOD_RESULT, lying_zip_bytes, raw_zip, zip_payload

METHODS = [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]


@pytest.mark.parametrize("method", METHODS)
def test_honest_members_of_every_method_unpack(tmp_path: Path, method: int) -> None:
    data = b"".join(f"line {i} of the log\n".encode() for i in range(5000))
    raw = raw_zip(
        [
            ("run/result.json", zipfile.ZIP_STORED, GOOD_RESULT, zlib.crc32(GOOD_RESULT), len(GOOD_RESULT)),
            ("run/check.log", method, zip_payload(method, data), zlib.crc32(data), len(data)),
        ]
    )
    # zipfile (the reference reader) agrees the archive is valid
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        assert zf.read("run/check.log") == data
    out = safe_unpack(io.BytesIO(raw), tmp_path / "s")
    assert out.read_bytes("check.log") == data


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_zipfile_written_members_unpack(tmp_path: Path, method: int) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as zf:
        zf.writestr("run/result.json", GOOD_RESULT)
        zf.writestr("run/solution.py", b"print('ok')\n" * 1000)
    out = safe_unpack(io.BytesIO(buf.getvalue()), tmp_path / "s")
    assert out.read_bytes("solution.py") == b"print('ok')\n" * 1000


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_lying_member_stops_one_byte_past_its_declared_size(method: int) -> None:
    raw = lying_zip_bytes(method)
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        zi = zf.getinfo("run/big.log")
        offset = zi.header_offset + 30 + len(zi.orig_filename)
    f = io.BytesIO(raw)
    reader = ZipMemberReader(
        f, data_offset=offset, compress_size=zi.compress_size, file_size=zi.file_size, crc=zi.CRC,
        method=method, name="big.log",
    )
    got = bytearray(1 << 20)
    with pytest.raises(ArchiveRejected) as exc:
        while reader.readinto(got):
            pass
    assert "more than its declared size" in exc.value.message
    # it never read the whole compressed range for the compressible ones: the bound is on output
    assert len(raw) < 64 << 10


def test_gzip_reader_caps_output() -> None:
    data = gzip.compress(bytes(4 << 20))
    reader = BoundedGzipReader(io.BytesIO(data), cap=1 << 20)
    with pytest.raises(ArchiveRejected) as exc:
        while reader.read(1 << 16):
            pass
    assert exc.value.reason is RejectReason.TOTAL_TOO_LARGE


def test_gzip_reader_concatenated_members_and_padding() -> None:
    data = gzip.compress(b"abc" * 1000) + gzip.compress(b"def" * 1000) + b"\x00" * 700
    reader = io.BufferedReader(BoundedGzipReader(io.BytesIO(data), cap=1 << 20))
    assert reader.read() == b"abc" * 1000 + b"def" * 1000


@pytest.mark.parametrize(
    ("mangle", "message"),
    [
        (lambda d: d + b"garbage", "trailing bytes"),
        (lambda d: d[:-8] + bytes([d[-8] ^ 1]) + d[-7:], "unreadable gzip"),  # CRC-32 trailer
        (lambda d: d[: len(d) // 2], "truncated"),
    ],
)
def test_gzip_reader_refuses_bad_streams(mangle: object, message: str) -> None:
    data = mangle(gzip.compress(b"payload " * 4000))  # type: ignore[operator]
    reader = BoundedGzipReader(io.BytesIO(data), cap=1 << 20)
    with pytest.raises(ArchiveRejected) as exc:
        while reader.read(1 << 16):
            pass
    assert message in exc.value.message


@pytest.mark.parametrize(
    "text",
    [
        '{"a": NaN}', '{"a": -Infinity}', '{"a": 1e400}', '{"a": -1e400}', '{"a": 9223372036854775808}',
        '{"a": "\\ud800"}', '{"\\udc00": 1}', '["\\u0000"]', '{"a": ["x", ["\\ud800"]]}',
        "[" * 33 + "]" * 33, '{"a": 1, "a": 2}', '"\\u0000"', '{"a": ' + "1" * 101 + "}",
    ],
)
def test_strict_json_refuses(text: str) -> None:
    with pytest.raises(JsonRefused):
        loads_strict(text)


def test_strict_json_accepts_the_edges() -> None:
    text = (
        '{"a": 9223372036854775807, "b": -9223372036854775808, "c": 1.7976931348623157e308, '
        '"d": "\\u00e9\\ud83d\\ude00", "e": "[{not a bracket", "f": ' + "[" * 31 + "]" * 31 + "}"
    )
    value = loads_strict(text)
    assert value["a"] == 2**63 - 1 and value["d"] == "\u00e9\U0001f600" and value["e"] == "[{not a bracket"


def test_real_result_jsons_pass(tmp_path: Path) -> None:
    import tarfile

    archives = sorted(Path("/work/shared/kbh-dev/archives").glob("*.tar.gz"))[:10]
    if not archives:
        pytest.skip("shared kbh-dev corpus not present")
    for path in archives:
        with tarfile.open(path) as tf:
            for m in tf:
                if m.name.count("/") == 1 and m.name.endswith("/result.json"):
                    f = tf.extractfile(m)
                    assert f is not None
                    assert isinstance(loads_strict(f.read().decode("utf-8")), dict)
