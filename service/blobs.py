"""Content-addressed blob store in a local directory: `<root>/ab/cd/<sha256>`.

Writes are atomic (a temp file in the store's root, fsync, then rename onto the final name), so a
reader never sees half a blob; the same content always lands on the same key, so putting it twice
is harmless. Blobs are only ever added for a committed database row (see runs.service).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path

_KEY = re.compile(r"^[0-9a-f]{64}$")


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._tmp = root / ".tmp"

    @staticmethod
    def key_for(sha256: str) -> str:
        if not _KEY.match(sha256):
            raise ValueError(f"not a sha256 hex digest: {sha256!r}")
        return f"{sha256[:2]}/{sha256[2:4]}/{sha256}"

    def path(self, key: str) -> Path:
        parts = key.split("/")
        if len(parts) != 3 or not _KEY.match(parts[2]) or parts[0] != parts[2][:2] or parts[1] != parts[2][2:4]:
            raise ValueError(f"not a blob key: {key!r}")
        return self.root / key

    def exists(self, key: str) -> bool:
        return self.path(key).is_file()

    def put_file(self, source: Path, sha256: str, *, move: bool = False) -> tuple[str, bool]:
        """Store `source` (whose sha256 the caller computed) and return (key, newly_created).

        With `move`, the source is renamed into place when it lies on the same filesystem
        (staging lives under the data dir for this reason), else copied.
        """
        key = self.key_for(sha256)
        final = self.path(key)
        if final.is_file():
            try:
                os.utime(final)  # reused: fresh again, so service.gc leaves it to the coming commit
                return key, False
            except FileNotFoundError:
                pass  # service.gc took it just now: store this copy
        final.parent.mkdir(parents=True, exist_ok=True)
        self._tmp.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=self._tmp, prefix="put-")
        os.close(fd)
        tmp = Path(tmp_name)
        try:
            if move:
                os.replace(source, tmp)
            else:
                shutil.copyfile(source, tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return key, True

    def put_bytes(self, data: bytes) -> tuple[str, bool]:
        sha = hashlib.sha256(data).hexdigest()
        key = self.key_for(sha)
        if self.path(key).is_file():
            try:
                os.utime(self.path(key))
                return key, False
            except FileNotFoundError:
                pass
        self._tmp.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=self._tmp, prefix="bytes-")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return self.put_file(Path(tmp_name), sha, move=True)

    def delete(self, key: str) -> None:
        self.path(key).unlink(missing_ok=True)

    def all_keys(self) -> set[str]:
        """Every stored key (tests and maintenance: the bad-input suite checks nothing was added)."""
        if not self.root.is_dir():
            return set()
        return {
            str(p.relative_to(self.root)).replace(os.sep, "/")
            for p in self.root.glob("??/??/*")
            if p.is_file() and _KEY.match(p.name)
        }
