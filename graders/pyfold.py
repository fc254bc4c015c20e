"""Static folding of string expressions in Python ASTs.

`getattr(torch, "_scaled" + "_mm")` hides a name from a grep; folding the string where it is
statically visible (constants, names bound to constants, `+`, f-strings, `"".join([...])`,
`str.format`, `%`, slices, `chr(n)`) recovers it. Anything that needs run time (base64, files,
network) is left to the runtime dispatch recorder.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

_MAX_LEN = 1 << 20
# A width/precision of 10000+ in a %-format or str.format would let a hostile source make the
# scanner allocate gigabytes ("%0999999999d" % 1): such formats are not folded.
_HUGE_WIDTH = re.compile(r"\d{5,}")


def fold_str(node: ast.AST | None, consts: Mapping[str, str], depth: int = 0) -> str | None:
    """The string value of `node` when it is statically known, else None."""
    if node is None or depth > 40:
        return None
    d = depth + 1
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Add):
            left, right = fold_str(node.left, consts, d), fold_str(node.right, consts, d)
            if left is not None and right is not None and len(left) + len(right) < _MAX_LEN:
                return left + right
            return None
        if isinstance(node.op, ast.Mod):
            fmt = fold_str(node.left, consts, d)
            if fmt is None or _HUGE_WIDTH.search(fmt):
                return None
            if isinstance(node.right, ast.Tuple):
                vals = [fold_str(e, consts, d) for e in node.right.elts]
                if any(v is None for v in vals):
                    return None
                args: tuple[str, ...] | str = tuple(v for v in vals if v is not None)
            else:
                one = fold_str(node.right, consts, d)
                if one is None:
                    return None
                args = one
            total = len(fmt) + (sum(map(len, args)) if isinstance(args, tuple) else len(args) * max(1, fmt.count("%")))
            if total >= _MAX_LEN:
                return None
            try:
                return fmt % args
            except (TypeError, ValueError, KeyError):
                return None
        if isinstance(node.op, ast.Mult):
            s = fold_str(node.left, consts, d)
            n = node.right
            if s is not None and isinstance(n, ast.Constant) and isinstance(n.value, int) and 0 <= n.value < 64:
                return s * n.value
        return None
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for v in node.values:
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                parts.append(v.value)
            elif isinstance(v, ast.FormattedValue) and v.format_spec is None:
                s = fold_str(v.value, consts, d)
                if s is None:
                    return None
                parts.append(s)
            else:
                return None
        if sum(map(len, parts)) >= _MAX_LEN:
            return None
        return "".join(parts)
    if isinstance(node, ast.Subscript):
        s = fold_str(node.value, consts, d)
        if s is None:
            return None
        sl = node.slice
        if isinstance(sl, ast.Slice):
            bounds: list[int | None] = []
            for part in (sl.lower, sl.upper, sl.step):
                if part is None:
                    bounds.append(None)
                    continue
                bound = _int_const(part)
                if bound is None:
                    return None
                bounds.append(bound)
            if bounds[2] == 0:
                return None
            return s[slice(bounds[0], bounds[1], bounds[2])]
        i = _int_const(sl)
        if i is not None and -len(s) <= i < len(s):
            return s[i]
        return None
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            recv = fold_str(func.value, consts, d)
            if recv is not None and func.attr == "join" and len(node.args) == 1 and not node.keywords:
                seq = node.args[0]
                if isinstance(seq, (ast.List, ast.Tuple)):
                    items = [fold_str(e, consts, d) for e in seq.elts]
                    parts = [i for i in items if i is not None]
                    if len(parts) == len(items) and sum(map(len, parts)) + len(recv) * len(parts) < _MAX_LEN:
                        return recv.join(parts)
                return None
            if recv is not None and func.attr == "format" and not node.keywords:
                fargs = [fold_str(a, consts, d) for a in node.args]
                if _HUGE_WIDTH.search(recv) or any(a is None or _HUGE_WIDTH.search(a) for a in fargs):
                    return None
                if len(recv) + sum(len(a) for a in fargs if a is not None) * max(1, recv.count("{")) >= _MAX_LEN:
                    return None
                if all(a is not None for a in fargs):
                    try:
                        return recv.format(*fargs)
                    except (IndexError, KeyError, ValueError, AttributeError):
                        return None
                return None
            if recv is not None and not node.args and func.attr in ("strip", "lower", "upper", "lstrip", "rstrip"):
                return str(getattr(recv, func.attr)())
            if recv is not None and func.attr == "replace" and len(node.args) == 2:
                old, new = fold_str(node.args[0], consts, d), fold_str(node.args[1], consts, d)
                if old is not None and new is not None and len(recv) * max(1, len(new)) < _MAX_LEN:
                    return recv.replace(old, new)
            return None
        if isinstance(func, ast.Name):
            if func.id == "str" and len(node.args) == 1:
                return fold_str(node.args[0], consts, d)
            if func.id == "chr" and len(node.args) == 1:
                code = _int_const(node.args[0])
                if code is not None and 0 <= code < 0x110000:
                    return chr(code)
    return None


def _int_const(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _int_const(node.operand)
        return -v if v is not None else None
    return None


def string_bindings(tree: ast.AST) -> dict[str, str]:
    """Names bound (anywhere in the file) to a statically known string, in source order.

    One pass in line order: `x = "a"` binds, `x += "b"` appends, an unfoldable rebinding forgets.
    Scopes are merged (a helper's local name counts everywhere): over-approximating is right for
    a scanner whose job is to find hidden names.
    """
    consts: dict[str, str] = {}
    events: list[tuple[int, int, str, ast.AST, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for tgt in node.targets:
                if isinstance(tgt, ast.Name):
                    events.append((node.lineno, node.col_offset, tgt.id, node.value, False))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            events.append((node.lineno, node.col_offset, node.target.id, node.value, False))
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and isinstance(node.op, ast.Add):
            events.append((node.lineno, node.col_offset, node.target.id, node.value, True))
    events.sort(key=lambda e: (e[0], e[1]))
    for _line, _col, name, value, aug in events:
        s = fold_str(value, consts)
        if aug:
            if name in consts and s is not None and len(consts[name]) + len(s) < _MAX_LEN:
                consts[name] = consts[name] + s
        elif s is not None:
            consts[name] = s
    return consts
