"""The static analysis's module-level memos stay bounded across many audits (a long-lived API or
worker audits archive after archive), and an evicted entry is recomputed to the same answer."""

from __future__ import annotations

from typing import Any

import pytest

from audit_rules.memo import IdentityMemo
from audit_rules.rules.static import RULES
from audit_rules.rules.static import _caches as C
from audit_rules.rules.static import _support as S
from audit_rules.source_model import _BODY_CACHE, BODY_CACHE_SIZE
from tests.audit_rules.test_static_rules import _ctx

FUNCS = 24  # helpers per source: (MODULE_CACHE_SIZE + 50) sources x 31 bodies > BODY_CACHE_SIZE


def _source(i: int) -> str:
    helpers = "".join(f"\n\ndef _h{i}_{j}(t):\n    return t * {j + 1}\n" for j in range(FUNCS))
    return f'''"""FP8 GEMM, variant {i}."""
import types

import torch
import torch.nn as nn

_OUT{i} = {{}}
_W{i} = {{}}
_NS{i} = types.SimpleNamespace(key=None, out=None)
{helpers}

class Model(nn.Module):
    def __init__(self, M, N, K):
        super().__init__()
        self.register_buffer("weight", torch.zeros(N, K, dtype=torch.float8_e4m3fn))
        self.register_buffer("weight_scale", torch.ones(N))

    def forward(self, x):
        key = x.data_ptr()
        if key in _OUT{i}:
            return _OUT{i}[key]
        out = _h{i}_0((x.float() @ self.wt()) * self.weight_scale).to(torch.bfloat16)
        _OUT{i}[key] = out
        return out

    def wt(self):
        key = self.weight.data_ptr()
        if key not in _W{i}:
            _W{i}[key] = self.weight.float().T.contiguous()
        return _W{i}[key]

    def again(self, x):
        if _NS{i}.key == x.data_ptr():
            return _NS{i}.out
        _NS{i}.key, _NS{i}.out = x.data_ptr(), self.forward(x)
        return _NS{i}.out
'''


def _audit(i: int, decks: Any) -> list[tuple[str, int | None, str]]:
    ctx = _ctx({"solution.py": _source(i)}, decks)
    return sorted((f.rule_id, f.line_start, f.effect.value) for m in RULES for f in m.check(ctx))


def test_identity_memo_is_lru_and_checks_identity() -> None:
    memo: IdentityMemo[int] = IdentityMemo(2)
    a, b, c = object(), object(), object()
    memo.put(a, 1)
    memo.put(b, 2)
    assert memo.get(a) == 1  # a is now the most recent
    memo.put(c, 3)
    assert len(memo) == 2 and memo.get(b) is None and memo.get(a) == 1 and memo.get(c) == 3
    memo.put(a, 4, key="k")
    assert memo.get(b, key="k") is None  # the same key, another object: a miss, never a's value
    with pytest.raises(ValueError):
        IdentityMemo(0)


def test_memos_stay_bounded_after_many_distinct_sources(decks: Any) -> None:
    n = S.MODULE_CACHE_SIZE + 50
    assert n * (FUNCS + 1) > BODY_CACHE_SIZE
    first = _audit(0, decks)
    assert any(r == "KA101" for r, _, _ in first), first  # the module-level output memo: the caches are read
    for i in range(1, n):
        _audit(i, decks)
    memos = {"module_globals": S._GLOBALS_CACHE, "mutated": C._MUTATED, "state": C._STATE, "walk_body": _BODY_CACHE}
    for name, memo in memos.items():
        assert 0 < len(memo) <= memo.maxsize, (name, len(memo), memo.maxsize)
    assert len(S._GLOBALS_CACHE) == S.MODULE_CACHE_SIZE and len(_BODY_CACHE) == BODY_CACHE_SIZE  # full, not cleared
    assert _audit(0, decks) == first  # evicted long ago: recomputed, same findings


def test_file_stat_memo_rereads_an_edited_file_and_stays_bounded(tmp_path: Any) -> None:
    from audit_rules.memo import FileStatMemo

    memo: FileStatMemo[str] = FileStatMemo(maxsize=2)
    f = tmp_path / "problem.yaml"
    f.write_text("a: 1\n")
    reads: list[str] = []

    def read() -> str:
        reads.append(f.read_text())
        return reads[-1]

    assert memo.get("p", [f], read) == "a: 1\n"
    assert memo.get("p", [f], read) == "a: 1\n"
    assert len(reads) == 1  # the same file, unchanged: read once
    f.write_text("a: 22\n")  # an edited deck file (its size changes) is read again
    assert memo.get("p", [f], read) == "a: 22\n"
    assert len(reads) == 2
    g = tmp_path / "missing.yaml"
    memo.get("q", [g], lambda: "none")
    assert len(memo) == 2  # bounded: the oldest entry went
    assert memo.get("p", [f], read) == "a: 22\n" and len(reads) == 2  # the recent one stays


def test_problem_info_follows_an_edited_deck(tmp_path: Any) -> None:
    from audit_rules.engine import problem_info
    from ingest.model import DeckSnapshot

    prob = tmp_path / "01_x"
    prob.mkdir()
    (prob / "problem.yaml").write_text("precision: fp8_e4m3\n")
    deck = DeckSnapshot(name="d", problems={"01_x": {}}, root=tmp_path)
    info = problem_info([deck], "01_x")
    assert info is not None and info.precision == "fp8"
    (prob / "problem.yaml").write_text("precision: bfloat16  # edited\n")  # another size: mtime alone may tie
    info = problem_info([deck], "01_x")
    assert info is not None and info.precision == "bf16"
