"""A bounded memo keyed on an object's identity, for the static analysis's module-level caches.

The API and the worker are long-lived processes that audit archive after archive: a plain dict
keyed on `id(obj)` would keep every archive's parsed modules alive. `IdentityMemo` keeps at most
`maxsize` entries and drops the least recently used. Each entry holds its object, so the id cannot
be reused by another object while the entry lives, and a hit is taken only when it IS the same
object (`entry[0] is obj`): an evicted or foreign entry is recomputed, never reused.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
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
