"""Writes into the deck's own module objects from the solution (shared by KA111).

The grader imports the deck's modules (``shapes``, ``reference``, ``check``, ``benchmark``) in the
same process as the solution, and reads their objects after the solution has run: check.py and
benchmark.py iterate ``shapes.SHAPES``, benchmark.py evaluates the FLOP/byte formulas on those
dicts. A solution that imports such a module and changes what it holds (pops a shape, pads a
shape's M, rebinds a table) changes what is graded.

What is followed, flow-insensitively over the whole submission (a name may hold what any of its
bindings holds): an import of a deck module (``import shapes as m``, ``from shapes import SHAPES as
s``) holds the module or its object; an attribute, a subscript or ``.get`` of a deck object is a
deck object; a shallow copy (``list(...)``, ``tuple``, ``sorted``, ``.copy()``, ``copy.copy``) or
``.values()`` / ``.items()`` is a new container whose ELEMENTS are deck objects, as is a container
a deck object was stored into (``table[k] = entry``, ``.append``, a literal) and a function that
returns one; iterating or indexing such a container yields deck objects. A write is a store into a
deck object (``d["M"] = ...``, ``d.x = ...``, ``del d[k]``, augmented), a mutating method on it
(``pop``, ``remove``, ``insert``, ``update``, ...), or a rebinding of a deck module's attribute
(``m.SHAPES = [...]``). ``copy.deepcopy`` makes a private copy: nothing is followed through it.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from audit_rules.rules.static import _support as S
from audit_rules.source_model import FunctionInfo, PyModule, Submission, walk_body

DECK_MODULES = frozenset({"shapes", "reference", "check", "benchmark", "sota"})
_MOD, _OBJ, _ELEMS = "module", "object", "elements"
_SHALLOW = frozenset({"list", "tuple", "sorted", "reversed", "set", "frozenset", "copy"})
_VIEWS = frozenset({"values", "items", "copy"})
_GETS = frozenset({"get", "setdefault", "pop"})
_MUTATORS = frozenset({"pop", "remove", "insert", "append", "extend", "clear", "update", "setdefault", "sort",
                       "reverse", "popitem", "__setitem__", "__delitem__", "discard", "add"})


@dataclass(frozen=True)
class DeckWrite:
    module: PyModule
    func: FunctionInfo | None
    node: ast.AST
    what: str  # the written expression, as source


def deck_writes(sub: Submission) -> list[DeckWrite]:
    key = "_deck_state.writes"
    hit = sub._memo.get(key)
    if isinstance(hit, list):
        return hit
    out = _Taint(sub).writes()
    sub._memo[key] = out
    return out


class _Taint:
    def __init__(self, sub: Submission) -> None:
        self.sub = sub
        self.names: dict[tuple[str, str | None, str], set[str]] = {}  # (module path, function, name) -> kinds
        self.returns: dict[str, set[str]] = {}  # function qualname -> kinds its returns hold
        self.units: list[tuple[PyModule, FunctionInfo | None, list[ast.AST]]] = []
        # per function: the names it binds itself (its locals), its parameters included
        self.locals: dict[int, set[str]] = {}
        seen: set[int] = set()
        for module in sub.modules.values():
            if id(module) in seen:
                continue
            seen.add(id(module))
            self.units.append((module, None, list(walk_body(module.tree))))
            for func in dict.fromkeys(module.functions.values()):
                body = list(walk_body(func.node))
                self.units.append((module, func, body))
                stored = {n.id for n in body if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                self.locals[id(func)] = (stored - S.declared_globals(func)) | set(func.params)

    # ---------------------------------------------------------------- reading an expression
    def _key(self, module: PyModule, func: FunctionInfo | None, name: str) -> tuple[str, str | None, str]:
        if func is not None and name in self.locals[id(func)]:
            return (module.path, func.name, name)
        return (module.path, None, name)

    def kinds(self, module: PyModule, func: FunctionInfo | None, e: ast.expr | None) -> set[str]:
        if e is None:
            return set()
        if isinstance(e, ast.Name):
            return set(self.names.get(self._key(module, func, e.id), set()))
        if isinstance(e, ast.Attribute):
            base = self.kinds(module, func, e.value)
            return {_OBJ} if base & {_MOD, _OBJ} else set()
        if isinstance(e, ast.Subscript):
            return {_OBJ} if self.kinds(module, func, e.value) & {_OBJ, _ELEMS} else set()
        if isinstance(e, ast.Starred):
            return self.kinds(module, func, e.value)
        if isinstance(e, ast.IfExp):
            return self.kinds(module, func, e.body) | self.kinds(module, func, e.orelse)
        if isinstance(e, ast.BoolOp):
            return set().union(*(self.kinds(module, func, v) for v in e.values))
        if isinstance(e, ast.List | ast.Tuple | ast.Set):
            return {_ELEMS} if any(self.kinds(module, func, v) & {_OBJ} for v in e.elts) else set()
        if isinstance(e, ast.Dict):
            return {_ELEMS} if any(self.kinds(module, func, v) & {_OBJ} for v in e.values if v is not None) else set()
        if isinstance(e, ast.Call):
            name = S.call_name(e)
            if isinstance(e.func, ast.Attribute):
                recv = self.kinds(module, func, e.func.value)
                if recv & {_OBJ, _ELEMS}:
                    if name in _GETS:
                        return {_OBJ}
                    if name in _VIEWS:
                        return {_ELEMS}
                if name == "deepcopy":
                    return set()
            if name in _SHALLOW and e.args and self.kinds(module, func, e.args[0]) & {_OBJ, _ELEMS}:
                return {_ELEMS}
            if name == "import_module" and e.args and isinstance(e.args[0], ast.Constant) \
                    and e.args[0].value in DECK_MODULES:
                return {_MOD}
            out: set[str] = set()
            for t in self.sub.resolve_functions(e.func, module.scope(func)):
                out |= self.returns.get(t.name, set())
            return out
        return set()

    # ---------------------------------------------------------------- binding names
    def _bind(self, module: PyModule, func: FunctionInfo | None, target: ast.expr, kinds: set[str]) -> bool:
        if not kinds:
            return False
        if isinstance(target, ast.Name):
            key = self._key(module, func, target.id)
            old = self.names.setdefault(key, set())
            if kinds <= old:
                return False
            old |= kinds
            return True
        if isinstance(target, ast.Tuple | ast.List):
            return any([self._bind(module, func, t, kinds) for t in target.elts])
        return False

    def _solve(self) -> None:
        for _ in range(8):
            changed = False
            for module, func, nodes in self.units:
                for n in nodes:
                    changed |= self._step(module, func, n)
            if not changed:
                break

    def _step(self, module: PyModule, func: FunctionInfo | None, n: ast.AST) -> bool:
        changed = False
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name in DECK_MODULES:
                    changed |= self._bind(module, func, ast.Name(id=a.asname or a.name), {_MOD})
        elif isinstance(n, ast.ImportFrom):
            if (n.module or "") in DECK_MODULES and not n.level:
                for a in n.names:
                    changed |= self._bind(module, func, ast.Name(id=a.asname or a.name), {_OBJ})
        elif isinstance(n, ast.Assign):
            k = self.kinds(module, func, n.value)
            for t in n.targets:
                changed |= self._bind(module, func, t, k)
                if isinstance(t, ast.Subscript) and self.kinds(module, func, n.value) & {_OBJ}:
                    changed |= self._bind(module, func, t.value, {_ELEMS})  # `table[k] = entry`
        elif isinstance(n, ast.AnnAssign) and n.value is not None:
            changed |= self._bind(module, func, n.target, self.kinds(module, func, n.value))
        elif isinstance(n, ast.For | ast.AsyncFor | ast.comprehension):
            it = self.kinds(module, func, n.iter)
            if it & {_OBJ, _ELEMS}:
                changed |= self._bind(module, func, n.target, {_OBJ})
        elif isinstance(n, ast.NamedExpr):
            changed |= self._bind(module, func, n.target, self.kinds(module, func, n.value))
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and S.call_name(n) in ("append", "insert", "add", "setdefault"):
            if any(self.kinds(module, func, a) & {_OBJ} for a in n.args):
                changed |= self._bind(module, func, n.func.value, {_ELEMS})
        elif isinstance(n, ast.Return) and func is not None and n.value is not None:
            k = self.kinds(module, func, n.value)
            old = self.returns.setdefault(func.name, set())
            if not k <= old:
                old |= k
                changed = True
        return changed

    # ---------------------------------------------------------------- the writes
    def writes(self) -> list[DeckWrite]:
        self._solve()
        found: dict[int, DeckWrite] = {}  # once per node (a unit may be reached through two names)
        for module, func, nodes in self.units:
            for n in nodes:
                targets: list[ast.expr] = []
                if isinstance(n, ast.Assign):
                    targets = list(n.targets)
                elif isinstance(n, ast.AugAssign | ast.AnnAssign):
                    targets = [n.target]
                elif isinstance(n, ast.Delete):
                    targets = list(n.targets)
                for t in targets:
                    if isinstance(t, ast.Subscript) and _OBJ in self.kinds(module, func, t.value):
                        found.setdefault(id(n), DeckWrite(module, func, n, module.segment(t)))
                    elif isinstance(t, ast.Attribute) and self.kinds(module, func, t.value) & {_MOD, _OBJ}:
                        found.setdefault(id(n), DeckWrite(module, func, n, module.segment(t)))
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and S.call_name(n) in _MUTATORS \
                        and _OBJ in self.kinds(module, func, n.func.value):
                    found.setdefault(id(n), DeckWrite(module, func, n, module.segment(n.func)))
        return list(found.values())
