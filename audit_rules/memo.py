"""Bounded memos for the static analysis's module-level caches.

`IdentityMemo`: keyed on an object's identity.

The API and the worker are long-lived processes that audit archive after archive: a plain dict
keyed on `id(obj)` would keep every archive's parsed modules alive. `IdentityMemo` keeps at most
`maxsize` entries and drops the least recently used. Each entry holds its object, so the id cannot
be reused by another object while the entry lives, and a hit is taken only when it IS the same
object (`entry[0] is obj`): an evicted or foreign entry is recomputed, never reused.

`FileStatMemo`: what was read from some files (a deck's problem.yaml, check.py, its harness), keyed
on a name and each file's (size, mtime_ns), so an edited file is read again and a store of many runs
on few problems reads each deck's files once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import Generic, TypeVar

V = TypeVar("V")


class IdentityMemo(Generic[V]):
    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._entries: OrderedDict[Hashable, tuple[object, V]] = OrderedDict()

    def get(self, obj: object, key: Hashable | None = None) -> V | None:
        """The value stored for `obj` (under `key`, default its id), or None."""
        k = id(obj) if key is None else key
        hit = self._entries.get(k)
        if hit is None or hit[0] is not obj:
            return None
        self._entries.move_to_end(k)
        return hit[1]

    def put(self, obj: object, value: V, key: Hashable | None = None) -> V:
        k = id(obj) if key is None else key
        self._entries[k] = (obj, value)
        self._entries.move_to_end(k)
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
        return value

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def stat_key(path: Path) -> tuple[int, int] | None:
    """(size, mtime_ns) of a regular file; None when it is missing or not a file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns) if path.is_file() else None


class FileStatMemo(Generic[V]):
    def __init__(self, maxsize: int) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._entries: OrderedDict[tuple[str, tuple[tuple[int, int] | None, ...]], V] = OrderedDict()

    def get(self, name: str, paths: Sequence[Path], compute: Callable[[], V]) -> V:
        """The value `compute()` gave for `name` while `paths` had their present stat, computed now
        when none is stored."""
        key = (name, tuple(stat_key(p) for p in paths))
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key]
        value = self._entries[key] = compute()
        while len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._entries)
