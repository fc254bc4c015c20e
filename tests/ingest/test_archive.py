"""safe_unpack on real tar / tar.gz / zip archives: every rejection, and the happy paths."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from ingest.archive import normalize_member_name, safe_unpack
from ingest.model import ArchiveRejected, Limits, RejectReason
from tests.archive_factory import (
    BAD_ARCHIVES,
    DEFAULT_RUN_ID,
    GOOD_RESULT,
    bad_archive_cases,
    build_run_tree,
    make_deck,
    make_tar,
    make_zip,
    write_members,
)


def _empty(path: Path) -> bool:
    return not path.exists() or not any(path.iterdir())


@pytest.mark.parametrize(("name", "fmt"), bad_archive_cases())
def test_bad_archive_rejected_and_nothing_staged(tmp_path: Path, name: str, fmt: str) -> None:
    builder, _fmts, reason, limits = BAD_ARCHIVES[name]
    archive = builder(tmp_path, fmt)
    staging = tmp_path / "staging"
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(archive, staging, Limits(**limits))
    assert exc.value.reason == RejectReason(reason), exc.value.message
    assert exc.value.message
    assert _empty(staging), list(staging.rglob("*"))
    # nothing landed outside the staging folder either
    assert not (tmp_path / "escape.txt").exists()
    assert not (tmp_path.parent / "escape.txt").exists()
    assert not Path("/tmp/kaudit-pwned").exists()


@pytest.mark.parametrize(("name", "fmt"), [("symlink", "tar.gz"), ("bomb", "zip"), ("invalid_json", "zip")])
def test_rejection_from_a_file_object(tmp_path: Path, name: str, fmt: str) -> None:
    builder, _fmts, reason, limits = BAD_ARCHIVES[name]
    data = builder(tmp_path, fmt).read_bytes()
    staging = tmp_path / "staging"
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(io.BytesIO(data), staging, Limits(**limits))
    assert exc.value.reason == RejectReason(reason)
    assert _empty(staging)


class _NonSeekable(io.RawIOBase):
    def __init__(self, data: bytes) -> None:
        self._buf = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        chunk = self._buf.read(len(b))
        b[: len(chunk)] = chunk
        return len(chunk)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    deck = make_deck(tmp_path / "deck")
    return build_run_tree(tmp_path / "src", deck_problem_dir=deck / "01_fp8_gemm")


def _expected(tree: Path) -> dict[str, bytes]:
    return {p.relative_to(tree).as_posix(): p.read_bytes() for p in tree.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    ("fmt", "top"), [("tar.gz", True), ("tar", True), ("zip", True), ("tar.gz", False), ("zip", False)]
)
def test_happy_path_stages_every_file_with_hashes(tmp_path: Path, tree: Path, fmt: str, top: bool) -> None:
    if fmt == "zip":
        archive = make_zip(tree, tmp_path / "run.zip", top_folder=top)
    else:
        archive = make_tar(tree, tmp_path / f"run.{fmt}", gz=fmt == "tar.gz", top_folder=top)
    staging = tmp_path / "staging"
    un = safe_unpack(archive, staging)
    expected = _expected(tree)
    assert set(un.files) == set(expected)
    assert un.archive_format == fmt
    assert un.root_prefix == (DEFAULT_RUN_ID if top else "")
    assert un.archive_size == archive.stat().st_size
    assert un.archive_sha256 == hashlib.sha256(archive.read_bytes()).hexdigest()
    for path, data in expected.items():
        sf = un.files[path]
        assert sf.size == len(data)
        assert sf.sha256 == hashlib.sha256(data).hexdigest()
        assert sf.md5 == hashlib.md5(data).hexdigest()
        assert sf.staged_path == staging.resolve() / path
        assert sf.staged_path.read_bytes() == data
    assert un.files["solution.py"].is_text
    assert not un.files["repo/problems/01_fp8_gemm/__pycache__/reference.cpython-311.pyc"].is_text
    assert json.loads(un.read_text("result.json"))["run_id"] == DEFAULT_RUN_ID
    # nothing but the run's files (no incoming/spool leftovers)
    on_disk = {p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file()}
    assert on_disk == set(expected)


def test_non_seekable_stream(tmp_path: Path, tree: Path) -> None:
    data = make_zip(tree, tmp_path / "run.zip").read_bytes()
    un = safe_unpack(_NonSeekable(data), tmp_path / "staging")  # type: ignore[arg-type]
    assert "result.json" in un.files
    assert not list((tmp_path / "staging").glob(".kaudit-*"))


def test_text_detection(tmp_path: Path) -> None:
    members = [
        ("run/result.json", GOOD_RESULT, {}),
        ("run/utf8.txt", "héllo ✓\n".encode(), {}),
        ("run/latin1.txt", "h\xe9llo".encode("latin-1"), {}),
        ("run/nul.txt", b"abc\x00def", {}),
        ("run/empty.txt", b"", {}),
    ]
    un = safe_unpack(write_members(tmp_path, members, "tar"), tmp_path / "s")
    assert un.files["utf8.txt"].is_text
    assert not un.files["latin1.txt"].is_text
    assert not un.files["nul.txt"].is_text
    assert un.files["empty.txt"].is_text


def test_multibyte_char_split_across_chunks_is_text(tmp_path: Path) -> None:
    from ingest import archive as mod

    data = b"a" * (mod.CHUNK - 1) + "✓".encode() + b"tail"
    members = [("run/result.json", GOOD_RESULT, {}), ("run/big.txt", data, {})]
    un = safe_unpack(write_members(tmp_path, members, "tar"), tmp_path / "s")
    assert un.files["big.txt"].is_text


def test_small_repetitive_archive_is_not_a_bomb(tmp_path: Path) -> None:
    """A tiny archive with a high ratio but few bytes is below ratio_min_bytes."""
    members = [("run/result.json", GOOD_RESULT, {}), ("run/log.txt", b"same line\n" * 50_000, {})]
    un = safe_unpack(write_members(tmp_path, members, "tar.gz"), tmp_path / "s")
    assert un.files["log.txt"].size == 500_000


def test_ratio_limit_is_configurable(tmp_path: Path) -> None:
    members = [("run/result.json", GOOD_RESULT, {}), ("run/log.txt", b"same line\n" * 50_000, {})]
    archive = write_members(tmp_path, members, "tar.gz")
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(archive, tmp_path / "s", Limits(max_ratio=10, ratio_min_bytes=1000))
    assert exc.value.reason is RejectReason.COMPRESSION_RATIO


def test_result_json_deeper_but_not_a_run_is_accepted(tmp_path: Path) -> None:
    """A result.json in the agent's cache that marks no run folder is just a file."""
    members = [
        ("run/result.json", GOOD_RESULT, {}),
        ("run/cache/pip/result.json", b'{"ok": true}', {}),
    ]
    un = safe_unpack(write_members(tmp_path, members, "zip"), tmp_path / "s")
    assert "cache/pip/result.json" in un.files


def test_deeper_result_json_with_run_id_is_a_second_run(tmp_path: Path) -> None:
    members = [
        ("run/result.json", GOOD_RESULT, {}),
        ("run/repo/outputs/runs/x/result.json", GOOD_RESULT, {}),
    ]
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(write_members(tmp_path, members, "tar"), tmp_path / "s")
    assert exc.value.reason is RejectReason.MULTIPLE_RUNS


def test_result_json_only_deeper_is_missing(tmp_path: Path) -> None:
    members = [("run/solution.py", b"x", {}), ("run/sub/result.json", GOOD_RESULT, {}), ("top.txt", b"x", {})]
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(write_members(tmp_path, members, "tar"), tmp_path / "s")
    assert exc.value.reason is RejectReason.MISSING_RESULT_JSON
    assert "sub/result.json" in exc.value.message


def test_files_at_root_with_folders(tmp_path: Path) -> None:
    members = [("result.json", GOOD_RESULT, {}), ("scratch/a.cu", b"__global__ void k(){}\n", {}),
               ("repo/src/x.py", b"x=1\n", {})]
    un = safe_unpack(write_members(tmp_path, members, "zip"), tmp_path / "s")
    assert un.root_prefix == ""
    assert set(un.files) == {"result.json", "scratch/a.cu", "repo/src/x.py"}


def test_dot_slash_prefix_is_normalized(tmp_path: Path) -> None:
    members = [("./result.json", GOOD_RESULT, {}), ("./", None, {"type": tarfile.DIRTYPE}),
               ("./scratch/", None, {"type": tarfile.DIRTYPE}), ("./scratch/k.cu", b"x", {})]
    un = safe_unpack(write_members(tmp_path, members, "tar"), tmp_path / "s")
    assert set(un.files) == {"result.json", "scratch/k.cu"}


def test_unicode_normalization_duplicate(tmp_path: Path) -> None:
    nfc = "run/caf\u00e9.py"
    nfd = "run/cafe\u0301.py"
    members = [("run/result.json", GOOD_RESULT, {}), (nfc, b"a", {}), (nfd, b"b", {})]
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(write_members(tmp_path, members, "zip"), tmp_path / "s")
    assert exc.value.reason is RejectReason.DUPLICATE_NAME


def test_staging_dir_must_be_empty(tmp_path: Path, tree: Path) -> None:
    staging = tmp_path / "s"
    staging.mkdir()
    (staging / "keep").write_text("x")
    with pytest.raises(ValueError):
        safe_unpack(make_tar(tree, tmp_path / "a.tgz"), staging)
    assert (staging / "keep").exists()


def test_zip_actual_bytes_counted_not_declared(tmp_path: Path) -> None:
    """A zip whose central directory under-declares the size is refused, never trusted."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("run/result.json", GOOD_RESULT)
        zf.writestr("run/data.bin", bytes(range(256)) * 100)
    raw = bytearray(buf.getvalue())
    # lower the declared uncompressed size of data.bin in its central-directory entry
    import struct

    cd = raw.rfind(b"PK\x01\x02")
    struct.pack_into("<I", raw, cd + 24, 100)
    path = tmp_path / "lie.zip"
    path.write_bytes(bytes(raw))
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(path, tmp_path / "s")
    assert exc.value.reason is RejectReason.CORRUPT_ARCHIVE
    assert _empty(tmp_path / "s")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("a/b", "a/b"), ("./a//b/", "a/b"), ("a/./b", "a/b"), (".", ""), ("./", "")],
)
def test_normalize_member_name_ok(raw: str, expected: str) -> None:
    assert normalize_member_name(raw, is_dir=True) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("/etc/passwd", RejectReason.ABSOLUTE_PATH),
        ("C:/x", RejectReason.ABSOLUTE_PATH),
        ("a/../b", RejectReason.PATH_TRAVERSAL),
        ("..", RejectReason.PATH_TRAVERSAL),
        ("a\\b", RejectReason.BACKSLASH_IN_PATH),
        ("a\x00b", RejectReason.NUL_IN_PATH),
        ("a\nb", RejectReason.BAD_PATH),
        ("", RejectReason.BAD_PATH),
        ("x" * 300, RejectReason.BAD_PATH),
        ("a/ /b", RejectReason.BAD_PATH),
        ("bad\udcff", RejectReason.INVALID_UTF8),
    ],
)
def test_normalize_member_name_rejects(raw: str, reason: RejectReason) -> None:
    with pytest.raises(ArchiveRejected) as exc:
        normalize_member_name(raw)
    assert exc.value.reason is reason


def _patch_zip(raw: bytes, name: str, *, cd_off: int, local_off: int, fmt: str, value: int) -> bytes:
    """Patch one field of `name`'s central-directory and local headers."""
    import struct

    out = bytearray(raw)
    enc = name.encode()
    local = out.find(b"PK\x03\x04")
    while local != -1:
        n_len = struct.unpack_from("<H", out, local + 26)[0]
        if bytes(out[local + 30 : local + 30 + n_len]) == enc:
            struct.pack_into(fmt, out, local + local_off, value)
            break
        local = out.find(b"PK\x03\x04", local + 4)
    cd = out.find(b"PK\x01\x02")
    while cd != -1:
        n_len = struct.unpack_from("<H", out, cd + 28)[0]
        if bytes(out[cd + 46 : cd + 46 + n_len]) == enc:
            struct.pack_into(fmt, out, cd + cd_off, value)
            break
        cd = out.find(b"PK\x01\x02", cd + 4)
    return bytes(out)


def _simple_zip() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("run/result.json", GOOD_RESULT)
        zf.writestr("run/secret.bin", b"s" * 100)
    return buf.getvalue()


def test_zip_encrypted_member_refused(tmp_path: Path) -> None:
    raw = _patch_zip(_simple_zip(), "run/secret.bin", cd_off=8, local_off=6, fmt="<H", value=0x1)
    path = tmp_path / "enc.zip"
    path.write_bytes(raw)
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(path, tmp_path / "s")
    assert exc.value.reason is RejectReason.UNSUPPORTED_FORMAT and "encrypted" in exc.value.message
    assert _empty(tmp_path / "s")


def test_zip_unknown_compression_refused(tmp_path: Path) -> None:
    raw = _patch_zip(_simple_zip(), "run/secret.bin", cd_off=10, local_off=8, fmt="<H", value=99)
    path = tmp_path / "aes.zip"
    path.write_bytes(raw)
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(path, tmp_path / "s")
    assert exc.value.reason is RejectReason.UNSUPPORTED_FORMAT
    assert _empty(tmp_path / "s")


def test_huge_pax_header_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        ti = tarfile.TarInfo("run/result.json")
        ti.size = len(GOOD_RESULT)
        ti.pax_headers = {"comment": "x" * (2 << 20)}
        tf.addfile(ti, io.BytesIO(GOOD_RESULT))
    path = tmp_path / "pax.tar.gz"
    path.write_bytes(buf.getvalue())
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(path, tmp_path / "s")
    assert exc.value.reason is RejectReason.CORRUPT_ARCHIVE and "pax" in exc.value.message
    assert _empty(tmp_path / "s")


def test_gzip_of_non_tar_refused(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "x.tar.gz"
    path.write_bytes(gzip.compress(b"just some text, not a tar archive\n" * 100))
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(path, tmp_path / "s")
    assert exc.value.reason is RejectReason.UNSUPPORTED_FORMAT


def test_truncated_zip_refused(tmp_path: Path) -> None:
    raw = _simple_zip()
    path = tmp_path / "cut.zip"
    path.write_bytes(raw[: len(raw) - 30])
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(path, tmp_path / "s")
    assert exc.value.reason is RejectReason.CORRUPT_ARCHIVE
    assert _empty(tmp_path / "s")


def test_empty_folder_entries_kept_inside(tmp_path: Path) -> None:
    members = [("run/", None, {"type": tarfile.DIRTYPE}), ("run/result.json", GOOD_RESULT, {}),
               ("run/cache/", None, {"type": tarfile.DIRTYPE}), ("run/cache/", None, {"type": tarfile.DIRTYPE})]
    staging = tmp_path / "s"
    un = safe_unpack(write_members(tmp_path, members, "tar"), staging)
    assert set(un.files) == {"result.json"}
    assert (staging / "cache").is_dir()


@pytest.mark.parametrize("fmt", ["zip", "tar"])
def test_macos_resource_forks_skipped(tmp_path: Path, fmt: str) -> None:
    members = [("run/result.json", GOOD_RESULT, {}), ("__MACOSX/", None, {"type": tarfile.DIRTYPE}),
               ("__MACOSX/run/._result.json", b"\x00\x05\x16\x07", {})]
    staging = tmp_path / "s"
    un = safe_unpack(write_members(tmp_path, members, fmt), staging)
    assert set(un.files) == {"result.json"} and un.root_prefix == "run"
    assert not (staging / "__MACOSX").exists()


def test_file_object_not_at_offset_zero(tmp_path: Path, tree: Path) -> None:
    data = make_zip(tree, tmp_path / "run.zip").read_bytes()
    buf = io.BytesIO(b"JUNK" * 10 + data)
    buf.seek(40)
    un = safe_unpack(buf, tmp_path / "staging")
    assert un.archive_size == len(data)
    assert un.archive_sha256 == hashlib.sha256(data).hexdigest()
    assert "result.json" in un.files


def test_tar_member_name_not_utf8(tmp_path: Path) -> None:
    """A ustar name field holding Latin-1 bytes: tarfile decodes it with surrogates."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data in (("run/result.json", GOOD_RESULT), ("run/caf\udce9.txt", b"x")):
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    path = tmp_path / "latin1.tar"
    path.write_bytes(buf.getvalue())
    with pytest.raises(ArchiveRejected) as exc:
        safe_unpack(path, tmp_path / "s")
    assert exc.value.reason is RejectReason.INVALID_UTF8
    assert _empty(tmp_path / "s")
