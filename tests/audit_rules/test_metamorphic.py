"""Metamorphic checks of the static audit (bench/metamorphic.py): rewrite solutions without changing
what they do, re-audit, nothing moves.

A rule that reads names or one shape of code instead of what the code does would move a verdict
here. The corpus is the real ../shared/kbh-dev, read in place (the rewritten copy goes to
tmp_path); the rule fixtures are tests/audit_rules/fixtures. The transforms themselves are checked
to preserve behaviour by running a small module before and after each on the CPU."""

from __future__ import annotations

import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from audit_rules.registry import rules_by_id
from bench.metamorphic import TRANSFORMS, main, outline, rename_attrs

from .test_static_rules import _ctx, _sources, _static_entries

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "kbh-dev"
SEMANTIC = ("rename", "attrs", "outline", "aliases", "combined")


@pytest.mark.skipif(not (CORPUS / "labels.json").is_file(), reason="../shared/kbh-dev not present")
@pytest.mark.parametrize("transform", ["combined"])
def test_rewriting_every_solution_moves_no_verdict(transform: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # combined = rename + attrs + outline + aliases at once (each alone also moved none on 2026-12-06:
    # `bench/metamorphic.py --transform T` for each, docs/fidelity.md)
    rc = main([str(CORPUS), "--out", str(tmp_path / transform), "--jobs", "1", "--transform", transform])
    out = capsys.readouterr().out
    assert f"solutions rewritten ({transform})" in out and "verdict moved on 0 of" in out, out[-2000:]
    assert rc == 0


def _effects(rule_id: str, sources: dict[str, str], decks: Any) -> list[str]:
    return sorted({f.effect.value for f in rules_by_id()[rule_id].check(_ctx(sources, decks))})


@pytest.mark.parametrize("transform", SEMANTIC)
def test_every_rule_fixture_keeps_its_effects_when_rewritten(transform: str, decks: Any) -> None:
    moved = []
    for rule_id, entry in _static_entries():
        src = _sources(entry)
        if "solution.py" not in src:
            continue
        rewritten = dict(src)
        # the fixture's `# problem:` line names its deck problem (the archive's metadata does, in a run)
        head = "".join(ln for ln in src["solution.py"].splitlines(keepends=True) if ln.startswith("# problem:"))
        rewritten["solution.py"] = head + TRANSFORMS[transform](src["solution.py"])
        before, after = _effects(rule_id, src, decks), _effects(rule_id, rewritten, decks)
        if before != after:
            moved.append(f"{rule_id}/{entry.name}: {before} -> {after}")
    assert not moved, moved


MODULE = '''
import torch


class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.arange(n, dtype=torch.float32))
        self.register_buffer("scale", torch.full((1,), 2.0))
        self._cache = {}
        self._calls = 0

    def _prep(self, x):
        return x * self.scale

    def forward(self, x, *rest, k=1, **kw):
        self._calls += 1
        key = (x.data_ptr(), tuple(x.shape))
        if not hasattr(self, "_cache") or key not in self._cache:
            self._cache[key] = self._prep(x) * self.weight
        flag = getattr(self, "_calls") > 1
        return self._cache[key] + k + len(rest) + len(kw) + int(flag)
'''


def _load(source: str) -> types.ModuleType:
    mod = types.ModuleType("metamorphic_case")
    exec(compile(source, "<case>", "exec"), mod.__dict__)
    return mod


@pytest.mark.parametrize("transform", SEMANTIC)
def test_the_rewrites_keep_what_the_code_does(transform: str) -> None:
    before, after = _load(MODULE), _load(TRANSFORMS[transform](MODULE))
    m0, m1 = before.Model(4), after.Model(4)
    assert list(m0.state_dict()) == list(m1.state_dict()) == ["weight", "scale"]  # state names are kept
    x = torch.ones(4)
    for args, kw in (((x,), {}), ((x, 1, 2), {"k": 3, "z": 0}), ((x,), {})):
        assert torch.equal(m0(*args, **kw), m1(*args, **kw))


def test_attrs_renames_the_solutions_own_attributes_only() -> None:
    out = rename_attrs(MODULE + "\ntorch.backends.cudnn.benchmark = True\n")
    assert "self._cache" not in out and "self._calls" not in out and 'getattr(self, "_calls")' not in out
    assert "self.weight" in out and '"scale"' in out and "x.data_ptr()" in out and "x.shape" in out
    assert "torch.backends.cudnn.benchmark = True" in out  # a library's attribute, not the solution's


def test_outline_leaves_a_forward_that_needs_its_class_in_place() -> None:
    src = textwrap.dedent('''
        import torch

        class Base(torch.nn.Module):
            def forward(self, x):
                return x

        class Model(Base):
            def forward(self, x):
                return super().forward(x) + 1
        ''')
    out = outline(src)
    assert "_outlined_Base_forward" in out and "_outlined_Model_forward" not in out
    assert torch.equal(_load(out).Model()(torch.ones(2)), torch.full((2,), 2.0))
