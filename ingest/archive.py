"""Safe unpacking of an untrusted run archive (tar, tar.gz, zip) into a staging directory.

Nothing from the archive decides where bytes land until every member has been seen and
checked: each member is streamed into a numbered file inside a private incoming folder of
`staging_dir` (hashing sha256 + md5 and counting the bytes actually decompressed), and only
when the whole archive passed every check are the files moved to their archive paths (with the
single top-level run folder stripped), each destination re-checked to lie inside `staging_dir`.
On any rejection everything staged is deleted and `ArchiveRejected` is raised.

What is refused, and why (the spec's "Bad input"):
- links, devices and FIFOs: a symlink staged into a workspace can point the grader at any host
  file; only regular files and folders are accepted;
- absolute paths, `..`, backslashes, NUL and control characters, over-long names: path tricks
  that escape the staging folder on some consumer (Windows tools, C APIs that stop at NUL);
- duplicate names, also after normalisation (`./a` vs `a`, Unicode NFC) and a file vs a folder
  of the same name: which copy wins would depend on the reader;
- bombs: member count, bytes actually read per file and in total, compression ratio (whole
  archive and per zip member, measured on what was decompressed, never on declared sizes) and
  zip entries whose data ranges overlap (the overlapping-files zip bomb);
- more than one run, a missing / non-UTF-8 / non-object result.json, and one a database or a
  reader cannot hold (NaN, huge numbers, lone surrogates, NUL, deep nesting: ingest.strict_json);
- a run_id that is no URL segment or folder name (ingest.runid.run_id_problem);
- zip members that inflate past their declared size (ingest.bounded: every decompressor is bounded).
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import io
import os
import secrets
import shutil
import stat
import struct
import tarfile
import unicodedata
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO, cast

from ingest.bounded import BoundedGzipReader, ZipMemberReader
from ingest.model import ArchiveRejected, Limits, RejectReason, StagedFile, UnpackedArchive
from ingest.runid import run_id_problem
from ingest.strict_json import JsonRefused, loads_strict

CHUNK = 1 << 20  # bounded copy buffer
MAX_NAME_BYTES = 1024  # whole archive path, UTF-8
MAX_COMPONENT_BYTES = 255
MAX_META_HEADER_BYTES = 1 << 20  # a pax / GNU long-name header larger than this is refused
MAX_RESULT_JSON_BYTES = 16 << 20
# Files whose presence beside a deeper result.json marks that folder as a second run.
RUN_MARKERS = frozenset(
    {"solution.py", "transcript.jsonl", "codex_session.jsonl", "check.log", "benchmark.log", "gpu_lock.log"}
)
RUN_MARKER_DIRS = frozenset({"template_files", "trusted_src"})

_R = RejectReason


def _reject(reason: RejectReason, message: str, member: str | None = None) -> ArchiveRejected:
    return ArchiveRejected(reason, message, member)


# ---------------------------------------------------------------------------------------------
# Paths


def normalize_member_name(raw: str, *, is_dir: bool = False) -> str:
    """Validate one archive member name and return its normalised POSIX form.

    `./a//b/` becomes `a/b`. Returns "" for the archive root itself (`.` or `./` folders).
    Raises ArchiveRejected for every unsafe or odd name.
    """
    shown = raw.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")[:200]
    if "\x00" in raw:
        raise _reject(_R.NUL_IN_PATH, "member name holds a NUL byte", shown)
    if "\\" in raw:
        raise _reject(_R.BACKSLASH_IN_PATH, "member name holds a backslash", shown)
    if raw.startswith("/") or (len(raw) >= 2 and raw[1] == ":" and raw[0].isalpha()):
        raise _reject(_R.ABSOLUTE_PATH, "member name is an absolute path", shown)
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise _reject(_R.BAD_PATH, "member name holds a control character", shown)
    try:
        encoded = raw.encode("utf-8")
    except UnicodeEncodeError:
        raise _reject(_R.INVALID_UTF8, "member name is not valid UTF-8", shown) from None
    if len(encoded) > MAX_NAME_BYTES:
        raise _reject(_R.BAD_PATH, f"member name longer than {MAX_NAME_BYTES} bytes", shown)
    parts: list[str] = []
    for comp in raw.split("/"):
        if comp in ("", "."):
            continue
        if comp == "..":
            raise _reject(_R.PATH_TRAVERSAL, "member name contains '..'", shown)
        if len(comp.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise _reject(_R.BAD_PATH, "a path component is longer than 255 bytes", shown)
        if comp.strip() == "" or comp != comp.rstrip(" "):
            raise _reject(_R.BAD_PATH, "a path component is blank or ends in a space", shown)
        parts.append(comp)
    if not parts and not is_dir:
        raise _reject(_R.BAD_PATH, "file member has an empty name", shown)
    return "/".join(parts)


def _is_mac_metadata(path: str) -> bool:
    """`__MACOSX/...`: resource-fork shadows macOS's Archive Utility adds to every zip it makes.

    They are never part of a run; counting them as a second top-level folder would refuse
    every archive zipped on a Mac as "multiple runs". Skipped (counted, not read or staged).
    """
    return path == "__MACOSX" or path.startswith("__MACOSX/")


def _dup_key(path: str) -> str:
    """Names that one reader could take for the same file collide: NFC and case-folded.

    `Solution.py` beside `solution.py` is one file on macOS and Windows file systems (and to
    anyone reading the report), two on Linux; which copy a consumer picks would be up to it.
    """
    return unicodedata.normalize("NFC", path).casefold()


# ---------------------------------------------------------------------------------------------
# Streaming copy with hashes and counters


@dataclass
class _Counters:
    limits: Limits
    archive_size: int
    members: int = 0
    total_read: int = 0

    def add_member(self, name: str) -> None:
        self.members += 1
        if self.members > self.limits.max_members:
            raise _reject(_R.TOO_MANY_MEMBERS, f"more than {self.limits.max_members} members", name)

    def add_bytes(self, n: int, name: str) -> None:
        self.total_read += n
        if self.total_read > self.limits.max_total_bytes:
            raise _reject(
                _R.TOTAL_TOO_LARGE, f"more than {self.limits.max_total_bytes} bytes unpacked in all", name
            )
        if (
            self.total_read > self.limits.ratio_min_bytes
            and self.total_read > self.limits.max_ratio * max(self.archive_size, 1)
        ):
            raise _reject(
                _R.COMPRESSION_RATIO,
                f"unpacked bytes exceed {self.limits.max_ratio:g}x the archive size ({self.archive_size} bytes)",
                name,
            )


@dataclass
class _Pending:
    """A member staged under the incoming folder, not yet moved to its archive path."""

    path: str
    tmp: Path
    size: int
    sha256: str
    md5: str
    is_text: bool


def _copy_member(
    src: IO[bytes],
    dest: Path,
    name: str,
    counters: _Counters,
    *,
    compressed_size: int | None = None,
) -> tuple[int, str, str, bool]:
    """Copy one member with a bounded buffer; returns (size, sha256, md5, is_text)."""
    limits = counters.limits
    sha = hashlib.sha256()
    md5 = hashlib.md5(usedforsecurity=False)
    decoder = codecs.getincrementaldecoder("utf-8")()
    is_text = True
    size = 0
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "wb") as out:
        while True:
            chunk = src.read(CHUNK)
            if not chunk:
                break
            size += len(chunk)
            if size > limits.max_file_bytes:
                raise _reject(_R.FILE_TOO_LARGE, f"member larger than {limits.max_file_bytes} bytes", name)
            counters.add_bytes(len(chunk), name)
            if (
                compressed_size is not None
                and size > limits.ratio_min_bytes
                and size > limits.max_ratio * max(compressed_size, 1)
            ):
                raise _reject(
                    _R.COMPRESSION_RATIO,
                    f"member decompresses to more than {limits.max_ratio:g}x its compressed size",
                    name,
                )
            sha.update(chunk)
            md5.update(chunk)
            if is_text:
                if b"\x00" in chunk:
                    is_text = False
                else:
                    try:
                        decoder.decode(chunk)
                    except UnicodeDecodeError:
                        is_text = False
            out.write(chunk)
    if is_text:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            is_text = False
    return size, sha.hexdigest(), md5.hexdigest(), is_text


# ---------------------------------------------------------------------------------------------
# Format sniffing


def _sniff(head: bytes) -> str | None:
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[:2] == b"\x1f\x8b":
        return "tar.gz"
    if len(head) >= 262 and head[257:262] == b"ustar":
        return "tar"
    if len(head) >= 512 and _looks_like_v7_tar(head[:512]):
        return "tar"
    return None


def _looks_like_v7_tar(block: bytes) -> bool:
    """Pre-POSIX tar has no magic; accept it when the header checksum is right."""
    try:
        stored = int(block[148:156].replace(b"\x00", b" ").strip() or b"-1", 8)
    except ValueError:
        return False
    computed = sum(block[:148]) + 8 * 32 + sum(block[156:])
    return stored == computed and block[0] != 0


def _gz_inner_is_tar(f: BinaryIO) -> bool:
    pos = f.tell()
    try:
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = b""
        while len(out) < 512:
            data = f.read(64 << 10)
            if not data:
                break
            out += d.decompress(data, 512 - len(out))
            while d.unconsumed_tail and len(out) < 512:
                out += d.decompress(d.unconsumed_tail, 512 - len(out))
            if d.eof:
                break
    except zlib.error:
        return False
    finally:
        f.seek(pos)
    if len(out) < 512:
        return len(out) == 0 or out.strip(b"\x00") == b""
    return out[257:262] == b"ustar" or _looks_like_v7_tar(out[:512])


# ---------------------------------------------------------------------------------------------
# tar


_META_TYPES = (
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
)


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses pax / GNU long-name headers larger than MAX_META_HEADER_BYTES.

    tarfile reads those headers into memory whole; without this a 1 GB pax header would be
    an allocation the limits never see.
    """

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:  # type: ignore[override]
        if self.type in _META_TYPES and self.size > MAX_META_HEADER_BYTES:
            raise _reject(_R.CORRUPT_ARCHIVE, f"pax/long-name header of {self.size} bytes (limit {MAX_META_HEADER_BYTES})")
        return super()._proc_member(tarfile_)  # type: ignore[misc, no-any-return]


def _tar_kind_reject(info: tarfile.TarInfo, shown: str) -> None:
    if info.issym():
        raise _reject(_R.SYMLINK, f"symbolic link (-> {info.linkname[:100]!r})", shown)
    if info.islnk():
        raise _reject(_R.HARDLINK, f"hard link (-> {info.linkname[:100]!r})", shown)
    if info.ischr() or info.isblk() or info.isfifo():
        raise _reject(_R.SPECIAL_FILE, "device file or FIFO", shown)
    if info.issparse():
        raise _reject(_R.SPECIAL_FILE, "GNU sparse file", shown)
    if not (info.isreg() or info.isdir()):
        raise _reject(_R.SPECIAL_FILE, f"unsupported tar member type {info.type!r}", shown)


def _tar_stream_cap(limits: Limits) -> int:
    """Most uncompressed tar-stream bytes read: every member's data plus its header and padding."""
    return limits.max_total_bytes + limits.max_members * 1536 + 4 * MAX_META_HEADER_BYTES


def _iter_tar(
    f: BinaryIO, counters: _Counters, incoming: Path, seen: _Seen, *, gz: bool
) -> Iterator[_Pending]:
    stream: BinaryIO = f
    if gz:
        # Our own gzip reader: every inflate call is bounded, the whole stream capped.
        stream = cast(BinaryIO, io.BufferedReader(BoundedGzipReader(f, _tar_stream_cap(counters.limits)), CHUNK))
    try:
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo) as tf:  # type: ignore[call-overload]
            n = 0
            for info in tf:
                shown = info.name[:200]
                counters.add_member(shown)
                _tar_kind_reject(info, shown)
                if info.isdir():
                    dpath = normalize_member_name(info.name, is_dir=True)
                    if not _is_mac_metadata(dpath):
                        seen.add_dir(dpath, shown)
                    continue
                path = normalize_member_name(info.name)
                if info.size > counters.limits.max_file_bytes:
                    raise _reject(_R.FILE_TOO_LARGE, f"member declares {info.size} bytes", shown)
                if _is_mac_metadata(path):
                    # never staged; tarfile still decompresses its data to skip it, so it counts
                    counters.add_bytes(info.size, shown)
                    continue
                seen.add_file(path, shown)
                src = tf.extractfile(info)
                if src is None:  # pragma: no cover - isreg() members always have a file object
                    raise _reject(_R.CORRUPT_ARCHIVE, "member has no data", shown)
                n += 1
                tmp = incoming / f"{n:08d}"
                size, sha, md5, is_text = _copy_member(src, tmp, shown, counters)
                if size != info.size:
                    raise _reject(_R.CORRUPT_ARCHIVE, "member shorter than its header says", shown)
                yield _Pending(path, tmp, size, sha, md5, is_text)
    except ArchiveRejected:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError, ValueError, UnicodeError) as exc:
        if is_storage_fault(exc):
            raise
        raise _reject(_R.CORRUPT_ARCHIVE, f"unreadable tar stream: {exc}") from None


# ---------------------------------------------------------------------------------------------
# zip

_LOCAL_HEADER = struct.Struct("<4sHHHHHIIIHH")
_SUPPORTED_ZIP_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}


def _zip_check_ranges(
    f: BinaryIO, infos: list[zipfile.ZipInfo], archive_size: int, cd_start: int
) -> list[int]:
    """Each entry's [local header, end of data) must lie in the file and overlap no other.

    The classic non-recursive zip bomb points many central-directory entries at one
    (or overlapping) compressed stream; declared sizes cannot be trusted, ranges can be checked.
    Returns where each entry's compressed data starts.
    """
    ranges: list[tuple[int, int, str]] = []
    data_offsets: list[int] = []
    for zi in infos:
        start = zi.header_offset
        if start < 0 or start + _LOCAL_HEADER.size > archive_size:
            raise _reject(_R.CORRUPT_ARCHIVE, "local header outside the archive", zi.orig_filename[:200])
        f.seek(start)
        raw = f.read(_LOCAL_HEADER.size)
        fields = _LOCAL_HEADER.unpack(raw)
        if fields[0] != b"PK\x03\x04":
            raise _reject(_R.CORRUPT_ARCHIVE, "bad local header signature", zi.orig_filename[:200])
        name_len, extra_len = fields[9], fields[10]
        data_offsets.append(start + _LOCAL_HEADER.size + name_len + extra_len)
        end = data_offsets[-1] + zi.compress_size
        if end > archive_size:
            raise _reject(_R.CORRUPT_ARCHIVE, "entry data runs past the end of the archive", zi.orig_filename[:200])
        ranges.append((start, end, zi.orig_filename[:200]))
    ranges.sort()
    for (s0, e0, n0), (s1, _e1, n1) in zip(ranges, ranges[1:], strict=False):
        if s1 < e0:
            raise _reject(
                _R.OVERLAPPING_ENTRIES,
                f"zip entries overlap: {n0!r} [{s0},{e0}) and {n1!r} starts at {s1}",
                n1,
            )
    if ranges and ranges[-1][1] > cd_start > 0:
        raise _reject(_R.OVERLAPPING_ENTRIES, "entry data overlaps the central directory", ranges[-1][2])
    return data_offsets


def _zip_kind_reject(zi: zipfile.ZipInfo, shown: str) -> bool:
    """Returns True for folders; raises for links and special files."""
    mode = (zi.external_attr >> 16) & 0xFFFF
    if mode and zi.create_system == 3:  # unix attributes are meaningful
        fmt = stat.S_IFMT(mode)
        if fmt == stat.S_IFLNK:
            raise _reject(_R.SYMLINK, "symbolic link", shown)
        if fmt in (stat.S_IFCHR, stat.S_IFBLK, stat.S_IFIFO, stat.S_IFSOCK):
            raise _reject(_R.SPECIAL_FILE, "device file, FIFO or socket", shown)
        if fmt == stat.S_IFDIR:
            return True
        if fmt not in (0, stat.S_IFREG):
            raise _reject(_R.SPECIAL_FILE, f"unsupported file type {oct(fmt)}", shown)
    return zi.orig_filename.endswith("/")


def _iter_zip(f: BinaryIO, counters: _Counters, incoming: Path, seen: _Seen) -> Iterator[_Pending]:
    try:
        zf = zipfile.ZipFile(f)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, struct.error) as exc:
        if is_storage_fault(exc):
            raise
        raise _reject(_R.CORRUPT_ARCHIVE, f"unreadable zip: {exc}") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > counters.limits.max_members:
            raise _reject(_R.TOO_MANY_MEMBERS, f"more than {counters.limits.max_members} members")
        cd_start = getattr(zf, "start_dir", 0)
        try:
            data_offsets = _zip_check_ranges(f, infos, counters.archive_size, cd_start)
        except struct.error:
            raise _reject(_R.CORRUPT_ARCHIVE, "truncated local header") from None
        n = 0
        for zi, data_offset in zip(infos, data_offsets, strict=True):
            raw_name = zi.orig_filename
            shown = raw_name[:200]
            counters.add_member(shown)
            is_dir = _zip_kind_reject(zi, shown)
            if is_dir:
                dpath = normalize_member_name(raw_name, is_dir=True)
                if not _is_mac_metadata(dpath):
                    seen.add_dir(dpath, shown)
                continue
            path = normalize_member_name(raw_name)
            if _is_mac_metadata(path):
                continue  # never read (zip seeks past it), never staged; counted as a member
            seen.add_file(path, shown)
            if zi.flag_bits & 0x1:
                raise _reject(_R.UNSUPPORTED_FORMAT, "encrypted zip member", shown)
            if zi.compress_type not in _SUPPORTED_ZIP_METHODS:
                raise _reject(_R.UNSUPPORTED_FORMAT, f"zip compression method {zi.compress_type}", shown)
            if zi.file_size > counters.limits.max_file_bytes:
                raise _reject(_R.FILE_TOO_LARGE, f"member declares {zi.file_size} bytes", shown)
            if zi.file_size > counters.limits.ratio_min_bytes and zi.file_size > counters.limits.max_ratio * max(
                zi.compress_size, 1
            ):
                raise _reject(
                    _R.COMPRESSION_RATIO,
                    f"member declares a {zi.file_size / max(zi.compress_size, 1):.0f}:1 compression ratio",
                    shown,
                )
            n += 1
            tmp = incoming / f"{n:08d}"
            # Never zf.open(): zipfile inflates bzip2/LZMA with no output bound (see ingest.bounded).
            src = ZipMemberReader(
                f,
                data_offset=data_offset,
                compress_size=zi.compress_size,
                file_size=zi.file_size,
                crc=zi.CRC,
                method=zi.compress_type,
                name=shown,
            )
            try:
                size, sha, md5, is_text = _copy_member(
                    cast(IO[bytes], src), tmp, shown, counters, compressed_size=zi.compress_size
                )
            except ArchiveRejected:
                raise
            except (OSError, ValueError, EOFError) as exc:
                if is_storage_fault(exc):
                    raise
                raise _reject(_R.CORRUPT_ARCHIVE, f"unreadable member: {exc}", shown) from None
            if size != zi.file_size:
                raise _reject(_R.CORRUPT_ARCHIVE, "member size differs from the central directory", shown)
            yield _Pending(path, tmp, size, sha, md5, is_text)


# ---------------------------------------------------------------------------------------------
# Name bookkeeping


class _Seen:
    """Every file and folder name seen so far, to refuse duplicates and file/folder clashes."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self.dirs: set[str] = set()  # explicit and implied folders

    def _implied(self, path: str, shown: str) -> None:
        parts = path.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if parent in self.files:
                raise _reject(_R.DUPLICATE_NAME, f"{parent!r} is both a file and a folder", shown)
            self.dirs.add(parent)

    def add_dir(self, path: str, shown: str) -> None:
        if not path:
            return
        key = _dup_key(path)
        if key in self.files:
            raise _reject(_R.DUPLICATE_NAME, f"{path!r} is both a file and a folder", shown)
        self._implied(key, shown)
        self.dirs.add(key)  # a repeated folder entry is harmless

    def add_file(self, path: str, shown: str) -> None:
        key = _dup_key(path)
        if key in self.files:
            raise _reject(_R.DUPLICATE_NAME, f"{path!r} appears more than once", shown)
        if key in self.dirs:
            raise _reject(_R.DUPLICATE_NAME, f"{path!r} is both a file and a folder", shown)
        self._implied(key, shown)
        self.files.add(key)


# ---------------------------------------------------------------------------------------------
# Layout checks


def _choose_root(paths: list[str]) -> str:
    """The single top-level folder holding every file, or "" when files sit at the root."""
    if not paths:
        raise _reject(_R.MISSING_RESULT_JSON, "archive holds no files")
    tops = {p.split("/", 1)[0] for p in paths}
    at_root = any("/" not in p for p in paths)
    if at_root:
        return ""
    if len(tops) == 1:
        return next(iter(tops))
    if any(PurePosixPath(p).name == "result.json" for p in paths):
        raise _reject(
            _R.MULTIPLE_RUNS,
            f"files sit under {len(tops)} top-level folders ({', '.join(sorted(tops)[:5])}); one run per archive",
        )
    raise _reject(_R.MISSING_RESULT_JSON, "no result.json in the archive")


def _looks_like_run_folder(folder: str, files: dict[str, _Pending]) -> bool:
    prefix = f"{folder}/" if folder else ""
    for marker in RUN_MARKERS:
        if f"{prefix}{marker}" in files:
            return True
    return any(p.startswith(f"{prefix}{d}/") for p in files for d in RUN_MARKER_DIRS)


def _json_has_run_id(p: _Pending) -> bool:
    if p.size > MAX_RESULT_JSON_BYTES or not p.is_text:
        return False
    try:
        data = loads_strict(p.tmp.read_text(encoding="utf-8"))
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and "run_id" in data


def _check_result_json(stripped: dict[str, _Pending], run_folder: str) -> None:
    root = stripped.get("result.json")
    if root is None:
        deeper = sorted(p for p in stripped if PurePosixPath(p).name == "result.json")
        where = f" (found at {deeper[0]!r}, not at the run root)" if deeper else ""
        raise _reject(_R.MISSING_RESULT_JSON, f"result.json missing{where}", "result.json")
    if root.size > MAX_RESULT_JSON_BYTES:
        raise _reject(_R.INVALID_RESULT_JSON, "result.json larger than 16 MiB", "result.json")
    raw = root.tmp.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _reject(_R.INVALID_UTF8, f"result.json is not UTF-8 ({exc.reason} at byte {exc.start})", "result.json") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        data = loads_strict(text)
    except JsonRefused as exc:
        raise _reject(_R.INVALID_RESULT_JSON, f"result.json refused: {exc}", "result.json") from None
    if not isinstance(data, dict):
        raise _reject(_R.INVALID_RESULT_JSON, "result.json is not a JSON object", "result.json")
    # The id the run is stored under: result.json's run_id, else the archive's folder name.
    if "run_id" in data and data["run_id"] not in (None, ""):
        problem = run_id_problem(data["run_id"])
    elif run_folder:
        problem = run_id_problem(run_folder)
        problem = problem and f"no run_id in result.json and the folder name is no run id: {problem}"
    else:
        problem = None  # stored under a prefix of the archive's sha256
    if problem:
        raise _reject(_R.INVALID_RUN_ID, problem, "result.json")
    for path, pending in stripped.items():
        if path == "result.json" or PurePosixPath(path).name != "result.json":
            continue
        folder = str(PurePosixPath(path).parent)
        if _looks_like_run_folder(folder, stripped) or _json_has_run_id(pending):
            raise _reject(
                _R.MULTIPLE_RUNS, f"a second run folder {folder!r} holds its own result.json", path
            )


# ---------------------------------------------------------------------------------------------
# Entry point


def _hash_source(f: BinaryIO) -> tuple[str, int]:
    sha = hashlib.sha256()
    size = 0
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            break
        sha.update(chunk)
        size += len(chunk)
    return sha.hexdigest(), size


def _clear_dir(path: Path) -> None:
    for child in list(path.iterdir()):
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def _inside(base: Path, target: Path) -> bool:
    base_s = os.path.normpath(str(base))
    target_s = os.path.normpath(str(target))
    return os.path.commonpath([base_s, target_s]) == base_s and target_s != base_s


# Writing the staged copy failed for lack of space: the server's fault, never the archive's
# (the service answers 507); everything else an OSError can mean while reading is corruption.
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_storage_fault(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS


def safe_unpack(
    source: Path | BinaryIO, staging_dir: Path, limits: Limits | None = None
) -> UnpackedArchive:
    """Unpack an untrusted run archive into `staging_dir` (created if missing, must be empty).

    Returns the staged files keyed by their archive path with the single top-level run folder
    stripped. Raises ArchiveRejected (and leaves `staging_dir` empty) for anything refused.
    """
    limits = limits or Limits()
    staging_dir = Path(staging_dir)
    staging_dir.mkdir(parents=True, exist_ok=True)
    if any(staging_dir.iterdir()):
        raise ValueError(f"staging_dir {staging_dir} is not empty")
    staging_dir = staging_dir.resolve()
    own: BinaryIO | None = None
    try:
        if isinstance(source, (str, Path)):
            own = cast(BinaryIO, open(source, "rb"))
            f: BinaryIO = own
        else:
            f = source
            if not f.seekable():
                spool = staging_dir / f".kaudit-upload-{secrets.token_hex(8)}"
                own = cast(BinaryIO, open(spool, "w+b"))
                cap = 2 * limits.max_total_bytes + (limits.max_members << 10)
                copied = 0
                while chunk := f.read(CHUNK):
                    copied += len(chunk)
                    if copied > cap:
                        raise _reject(_R.TOTAL_TOO_LARGE, f"upload larger than {cap} bytes")
                    own.write(chunk)
                own.seek(0)
                f = own
        return _unpack(f, staging_dir, limits)
    except BaseException:
        if own is not None:
            own.close()
            own = None
        _clear_dir(staging_dir)
        raise
    finally:
        if own is not None:
            own.close()
            for leftover in staging_dir.glob(".kaudit-upload-*"):
                leftover.unlink(missing_ok=True)


def _unpack(f: BinaryIO, staging_dir: Path, limits: Limits) -> UnpackedArchive:
    start = f.tell()
    archive_sha, archive_size = _hash_source(f)
    f.seek(start)
    if archive_size == 0:
        raise _reject(_R.EMPTY_UPLOAD, "the upload is empty")
    head = f.read(1024)
    f.seek(start)
    fmt = _sniff(head)
    if fmt is None:
        raise _reject(_R.UNSUPPORTED_FORMAT, "not a tar, tar.gz or zip archive (magic bytes)")
    if fmt == "tar.gz" and not _gz_inner_is_tar(f):
        raise _reject(_R.UNSUPPORTED_FORMAT, "gzip stream does not hold a tar archive")
    if start:
        # Work on a view that starts at the archive's first byte so zip offsets line up.
        f = cast(BinaryIO, _OffsetReader(f, start))

    incoming = staging_dir / f".kaudit-incoming-{secrets.token_hex(8)}"
    incoming.mkdir(mode=0o700)
    counters = _Counters(limits, archive_size)
    seen = _Seen()
    pending: list[_Pending] = []
    it = (
        _iter_zip(f, counters, incoming, seen)
        if fmt == "zip"
        else _iter_tar(f, counters, incoming, seen, gz=fmt == "tar.gz")
    )
    for p in it:
        pending.append(p)

    root = _choose_root([p.path for p in pending])
    cut = len(root) + 1 if root else 0
    stripped: dict[str, _Pending] = {}
    for p in pending:
        rel = p.path[cut:]
        p.path = rel
        stripped[rel] = p
    _check_result_json(stripped, root)

    files: dict[str, StagedFile] = {}
    for rel, p in stripped.items():
        dest = staging_dir.joinpath(*rel.split("/"))
        if not _inside(staging_dir, dest) or _inside(incoming, dest) or dest == incoming:
            raise _reject(_R.BAD_PATH, "member would land outside the staging folder", rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.parent.is_symlink() or dest.exists():
            raise _reject(_R.DUPLICATE_NAME, "member collides with another on disk", rel)
        os.replace(p.tmp, dest)
        files[rel] = StagedFile(rel, p.size, p.sha256, p.md5, p.is_text, dest)
    for d in sorted(seen.dirs):
        if root:
            if not d.startswith(root + "/"):
                continue  # the root itself, or an empty folder outside the run folder
            rel_d = d[cut:]
        else:
            rel_d = d
        if rel_d:
            target = staging_dir.joinpath(*rel_d.split("/"))
            if _inside(staging_dir, target) and not target.exists():
                target.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(incoming)
    return UnpackedArchive(
        archive_sha256=archive_sha,
        archive_size=archive_size,
        archive_format=fmt,
        root_prefix=root,
        files=dict(sorted(files.items())),
        staging_dir=staging_dir,
    )


class _OffsetReader(io.RawIOBase):
    """A read-only, seekable view of `inner` starting at `offset` (for file objects not at 0)."""

    def __init__(self, inner: BinaryIO, offset: int) -> None:
        self._inner = inner
        self._offset = offset
        inner.seek(offset)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._inner.tell() - self._offset

    def seek(self, pos: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._inner.seek(pos + self._offset)
        else:
            self._inner.seek(pos, whence)
        return self.tell()

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._inner.read(len(b))
        n = len(data)
        b[:n] = data
        return n
