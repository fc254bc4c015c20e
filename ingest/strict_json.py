"""JSON read with limits: what a lenient parser accepts and a database or a reader cannot hold.

Python's `json.loads` takes `NaN`, `Infinity` and `1e400` (a float that is infinite), integers of
any size, lone UTF-16 surrogates (`"\\ud800"`, a str that cannot be encoded to UTF-8), NUL in
strings (PostgreSQL refuses `\\u0000` in jsonb and NUL in text), duplicate keys (the last one wins,
silently) and nesting as deep as its recursion allows. Each of those, stored from an archive's
result.json, broke a later INSERT or every later GET of the run. `loads_strict` refuses them all
with a one-line reason before anything is written.

Limits are generous for real KBH result.json files (the 99 audited runs: depth 2, longest string
80 characters) and small enough that a hostile file costs little.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 32
MAX_STRING_CHARS = 256 << 10
MAX_NUMBER_CHARS = 100
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

# A JSON string literal (the unrolled-loop form: linear, no nested repetition).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class JsonRefused(ValueError):
    """The text is not JSON kaudit stores; the message says why in one line."""


def _depth(text: str) -> int:
    """Deepest bracket nesting, counted outside string literals, without recursing."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if not brackets:
        return 0
    return max(accumulate(1 if c in "[{" else -1 for c in brackets))


def _constant(name: str) -> Any:
    raise JsonRefused(f"{name} is not a JSON number (NaN and Infinity are refused)")


def _float(s: str) -> float:
    if len(s) > MAX_NUMBER_CHARS:
        raise JsonRefused(f"a number of {len(s)} characters (limit {MAX_NUMBER_CHARS})")
    value = float(s)
    if not math.isfinite(value):
        raise JsonRefused(f"number {s[:40]} overflows a double")
    return value


def _int(s: str) -> int:
    if len(s) > MAX_NUMBER_CHARS:
        raise JsonRefused(f"an integer of {len(s)} digits (limit {MAX_NUMBER_CHARS})")
    value = int(s)
    if not INT64_MIN <= value <= INT64_MAX:
        raise JsonRefused(f"integer {s[:40]} does not fit in 64 bits")
    return value


def _check_string(s: str, where: str) -> None:
    if len(s) > MAX_STRING_CHARS:
        raise JsonRefused(f"{where} of {len(s)} characters (limit {MAX_STRING_CHARS})")
    if "\x00" in s:
        raise JsonRefused(f"{where} holds a NUL character (\\u0000)")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise JsonRefused(f"{where} holds a lone UTF-16 surrogate (not valid Unicode)") from None


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        _check_string(key, "a key")
        if key in out:
            raise JsonRefused(f"key {key[:60]!r} appears twice in one object")
        if isinstance(value, str):
            _check_string(value, f"the string at {key[:60]!r}")
        out[key] = value
    return out


def _check_arrays(value: Any) -> None:
    """Strings inside arrays (object members were checked as the objects were built)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, list):
            for item in v:
                if isinstance(item, str):
                    _check_string(item, "a string in an array")
                elif isinstance(item, list | dict):
                    stack.append(item)
        elif isinstance(v, dict):
            stack.extend(x for x in v.values() if isinstance(x, list | dict))


def loads_strict(text: str, *, max_depth: int = MAX_DEPTH) -> Any:
    """Parse `text` as JSON within the limits above; raises JsonRefused (a ValueError)."""
    depth = _depth(text)
    if depth > max_depth:
        raise JsonRefused(f"nested {depth} levels deep (limit {max_depth})")
    try:
        value = json.loads(
            text, parse_constant=_constant, parse_float=_float, parse_int=_int, object_pairs_hook=_pairs
        )
    except JsonRefused:
        raise
    except RecursionError:
        raise JsonRefused("nested too deep") from None
    except ValueError as exc:
        raise JsonRefused(f"not valid JSON: {exc}") from None
    if isinstance(value, str):
        _check_string(value, "the document")
    _check_arrays(value)
    return value
