"""Decompressors whose output is bounded before it is produced, never measured after the fact.

`zipfile` hands a bzip2 or LZMA member's whole compressed read (4 KiB and up) to the decompressor
with no output limit, and trusts the central directory's declared size only at the end: a 2.3 KB
zip whose bzip2 member declares 12 bytes inflates to gigabytes in one call before any of our
counters sees a byte. `tarfile`'s gzip stream is bounded only by its 10 KiB input blocks. So ingest
decompresses itself, with every decompressor (deflate, bzip2, LZMA, gzip) asked for at most
`max_length` bytes per call:

- `ZipMemberReader` reads one zip member's compressed range (already checked to lie inside the
  archive and overlap nothing) and refuses the moment the output passes the member's declared
  size, or ends short of it, or its CRC-32 differs;
- `BoundedGzipReader` is the uncompressed view of a gzip stream (concatenated members allowed, as
  gzip(1) writes them) that refuses once the output passes a cap and when the CRC or length
  trailer is wrong (zlib checks both in gzip mode).

Memory held at any moment is one input chunk plus at most `CHUNK` of output.
"""

from __future__ import annotations

import bz2
import io
import lzma
import struct
import zlib
from typing import BinaryIO, Protocol

from ingest.model import ArchiveRejected, RejectReason

CHUNK = 1 << 20  # most bytes any decompressor is asked for per call
IN_CHUNK = 64 << 10  # compressed bytes read per call

ZIP_STORED = 0
ZIP_DEFLATED = 8
ZIP_BZIP2 = 12
ZIP_LZMA = 14


class _Decompressor(Protocol):
    def feed(self, data: bytes, max_length: int) -> bytes: ...

    @property
    def needs_input(self) -> bool: ...

    @property
    def eof(self) -> bool: ...


class _Stored:
    """Stored members: the compressed bytes are the bytes."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, data: bytes, max_length: int) -> bytes:
        buf = self._pending + data
        out, self._pending = buf[:max_length], buf[max_length:]
        return out

    @property
    def needs_input(self) -> bool:
        return not self._pending

    @property
    def eof(self) -> bool:
        return False  # ends when the compressed range does


class _Zlib:
    """Raw deflate (zip) or gzip framing (wbits 16+15), bounded through `unconsumed_tail`."""

    def __init__(self, wbits: int) -> None:
        self._d = zlib.decompressobj(wbits)

    def feed(self, data: bytes, max_length: int) -> bytes:
        return self._d.decompress(self._d.unconsumed_tail + data, max_length)

    @property
    def needs_input(self) -> bool:
        return not self._d.unconsumed_tail

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def unused_data(self) -> bytes:
        return self._d.unused_data


class _BufferedLib:
    """bz2 / lzma decompressors: they buffer internally and report `needs_input`."""

    def __init__(self, d: bz2.BZ2Decompressor | lzma.LZMADecompressor) -> None:
        self._d = d

    def feed(self, data: bytes, max_length: int) -> bytes:
        return self._d.decompress(data, max_length)

    @property
    def needs_input(self) -> bool:
        return self._d.needs_input

    @property
    def eof(self) -> bool:
        return self._d.eof


def _reject(message: str, member: str | None) -> ArchiveRejected:
    return ArchiveRejected(RejectReason.CORRUPT_ARCHIVE, message, member)


class ZipMemberReader(io.RawIOBase):
    """The decompressed bytes of one zip member, never more than its declared `file_size`.

    `data_offset` is where the member's compressed bytes start (past the local header);
    `compress_size`, `file_size`, `crc` and `method` come from the central directory.
    """

    def __init__(
        self,
        f: BinaryIO,
        *,
        data_offset: int,
        compress_size: int,
        file_size: int,
        crc: int,
        method: int,
        name: str,
    ) -> None:
        self._f = f
        self._pos = data_offset
        self._left_in = compress_size
        self._left_out = file_size
        self._crc_expected = crc
        self._crc = 0
        self._name = name
        self._done = False
        self._dec = self._decompressor(method)

    def _read_in(self, n: int) -> bytes:
        n = min(n, self._left_in)
        if n <= 0:
            return b""
        self._f.seek(self._pos)
        data = self._f.read(n)
        if len(data) != n:
            raise _reject("member data truncated", self._name)
        self._pos += n
        self._left_in -= n
        return data

    def _decompressor(self, method: int) -> _Decompressor:
        if method == ZIP_STORED:
            return _Stored()
        if method == ZIP_DEFLATED:
            return _Zlib(-zlib.MAX_WBITS)
        if method == ZIP_BZIP2:
            return _BufferedLib(bz2.BZ2Decompressor())
        if method == ZIP_LZMA:
            # APPNOTE 5.8.8: version (2 bytes), properties size (2 bytes), LZMA1 properties.
            head = self._read_in(4)
            if len(head) != 4:
                raise _reject("LZMA member header truncated", self._name)
            (psize,) = struct.unpack("<H", head[2:4])
            props = self._read_in(psize)
            if psize != 5 or len(props) != 5:
                raise _reject("LZMA member properties are not 5 bytes", self._name)
            d = props[0]
            if d >= 9 * 5 * 5:
                raise _reject("bad LZMA properties byte", self._name)
            (dict_size,) = struct.unpack("<I", props[1:5])
            filt = {"id": lzma.FILTER_LZMA1, "lc": d % 9, "lp": (d // 9) % 5, "pb": d // 45, "dict_size": dict_size}
            try:
                return _BufferedLib(lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[filt]))
            except lzma.LZMAError as exc:
                raise _reject(f"bad LZMA properties: {exc}", self._name) from None
        raise ArchiveRejected(RejectReason.UNSUPPORTED_FORMAT, f"zip compression method {method}", self._name)

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._done:
            return 0
        want = min(len(b), CHUNK)
        out = b""
        try:
            while not out:
                if self._dec.eof:
                    break
                data = self._read_in(IN_CHUNK) if self._dec.needs_input else b""
                if not data and self._dec.needs_input:
                    break  # compressed range exhausted
                # Ask for one byte past what the member declares: getting it is the proof of a lie.
                out = self._dec.feed(data, min(want, self._left_out + 1))
        except (zlib.error, OSError, lzma.LZMAError, EOFError, ValueError) as exc:
            raise _reject(f"unreadable member: {exc}", self._name) from None
        if len(out) > self._left_out:
            raise _reject("member decompresses to more than its declared size", self._name)
        if not out:
            self._finish()
            return 0
        self._left_out -= len(out)
        self._crc = zlib.crc32(out, self._crc)
        b[: len(out)] = out
        return len(out)

    def _finish(self) -> None:
        self._done = True
        if self._left_out:
            raise _reject("member decompresses to less than its declared size", self._name)
        if self._crc != self._crc_expected:
            raise _reject("member CRC-32 does not match", self._name)


class BoundedGzipReader(io.RawIOBase):
    """The uncompressed bytes of a gzip stream, refused past `cap` bytes.

    Concatenated gzip members are read in turn and trailing NUL padding is allowed (both as
    `gzip.open` does); any other trailing bytes are a corrupt archive.
    """

    def __init__(self, f: BinaryIO, cap: int) -> None:
        self._f = f
        self._cap = cap
        self._out = 0
        self._dec = _Zlib(16 + zlib.MAX_WBITS)
        self._carry = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def _next_member(self) -> bool:
        rest = self._dec.unused_data + self._carry
        self._carry = b""
        while True:
            rest = rest.lstrip(b"\x00")
            if rest:
                break
            more = self._f.read(IN_CHUNK)
            if not more:
                return False
            rest = more
        if not rest.startswith(b"\x1f\x8b"):
            raise _reject("trailing bytes after the gzip stream", None)
        self._dec = _Zlib(16 + zlib.MAX_WBITS)
        self._carry = rest
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._done:
            return 0
        want = min(len(b), CHUNK)
        out = b""
        try:
            while not out:
                if self._dec.eof and not self._next_member():
                    self._done = True
                    return 0
                if self._carry:
                    data, self._carry = self._carry, b""
                elif self._dec.needs_input:
                    data = self._f.read(IN_CHUNK)
                    if not data:
                        raise _reject("gzip stream truncated", None)
                else:
                    data = b""
                out = self._dec.feed(data, min(want, self._cap - self._out + 1))
        except zlib.error as exc:
            raise _reject(f"unreadable gzip stream: {exc}", None) from None
        self._out += len(out)
        if self._out > self._cap:
            raise ArchiveRejected(
                RejectReason.TOTAL_TOO_LARGE, f"gzip stream decompresses to more than {self._cap} bytes"
            )
        b[: len(out)] = out
        return len(out)
