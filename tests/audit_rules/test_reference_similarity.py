"""KA124's reference-transcription evidence does not depend on the solution's own names.

bench/metamorphic.py (every name a solution binds renamed, corpus re-audited) found one real hack,
a transcription of the deck's reference, that the renamed copy hid: the similarity compared
statements by their text, names included. Statements are now compared with the module's own
names canonical (alpha-equivalence); imported names and the grader's interface stay.
"""

from __future__ import annotations

import ast
from pathlib import Path

from audit_rules.rules.static._support import _normalized_lines
from bench.metamorphic import rename

REFERENCE = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.n = n
        self.weight = nn.Parameter(torch.empty(n, n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = torch.einsum("bd,nd->bn", x.float(), self.weight.float())
        probs = torch.softmax(scores, dim=-1)
        out = probs @ self.weight.float()
        return out.to(x.dtype)


def get_inputs():
    return [torch.randn(8, 64)]
'''

RENAMED = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """A custom attention."""

    def __init__(self, size: int):
        super().__init__()
        self.n = size
        self.weight = nn.Parameter(torch.empty(size, size))

    def forward(self, inp: torch.Tensor) -> torch.Tensor:
        s = torch.einsum("bd,nd->bn", inp.float(), self.weight.float())
        p = torch.softmax(s, dim=-1)
        r = p @ self.weight.float()
        return r.to(inp.dtype)
'''

OTHER = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.linear(x, self.weight)
        y = torch.relu(y)
        return y.cumsum(0)
'''


def _similarity(a: str, b: str) -> float:
    import difflib

    return difflib.SequenceMatcher(None, _normalized_lines(ast.parse(a)), _normalized_lines(ast.parse(b)),
                                   autojunk=False).ratio()


def test_a_renamed_transcription_is_still_a_transcription() -> None:
    assert _similarity(RENAMED, REFERENCE) >= 0.85
    assert _similarity(rename(REFERENCE), REFERENCE) == 1.0


def test_different_code_with_the_same_interface_stays_apart() -> None:
    assert _similarity(OTHER, REFERENCE) < 0.6


def test_canonical_names_keep_imports_attributes_and_the_interface() -> None:
    lines = _normalized_lines(ast.parse(RENAMED))
    assert "class Model(torch.nn.Module):" in lines and "def forward(self, a0: torch.Tensor) -> torch.Tensor:" in lines
    assert "a1 = torch.einsum('bd,nd->bn', a0.float(), self.weight.float())" in lines, lines


def test_the_metamorphic_renamer_keeps_methods_and_torch_keywords(tmp_path: Path) -> None:
    src = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _k(x_ptr, n, BLOCK: tl.constexpr):
    pass


class Model(torch.nn.Module):
    def _helper(self, dim):
        return torch.zeros(4, dtype=torch.float32).sum(dim=dim)  # keep: dim= of torch

    def forward(self, x):
        dtype = x.dtype
        _k[(1,)](x, x.numel(), BLOCK=128)
        return self._helper(0).to(dtype)
'''
    out = rename(src)
    assert "def _helper(self, " in out and "self._helper(0)" in out  # methods keep their names
    assert ".sum(dim=" in out and "dtype=torch.float32" in out  # torch keywords untouched
    assert "BLOCK=128" not in out and "# keep: dim= of torch" in out  # the kernel's own keyword renamed, comments kept
    ast.parse(out)


def test_a_transcription_with_its_functions_reordered_is_still_one() -> None:
    from bench.metamorphic import reorder

    ref = REFERENCE + "\n\ndef get_init_inputs():\n    return [64]\n\n\ndef _helper(t):\n    return t * 2\n"
    assert _similarity(reorder(ref), ref) == 1.0


def test_a_transcription_under_other_import_aliases_is_still_one() -> None:
    # the same reference with its imports bound under other names: `T.einsum` is `torch.einsum`
    aliased = RENAMED.replace("import torch\nimport torch.nn as nn\n", "import torch as T\nfrom torch import nn as N\n")
    aliased = aliased.replace("torch.", "T.").replace("nn.", "N.")
    assert "T.einsum" in aliased and "N.Parameter" in aliased
    assert _similarity(aliased, REFERENCE) == _similarity(RENAMED, REFERENCE)
    # what an alias stands for is kept: a different function under a familiar alias is not the same
    lines = _normalized_lines(ast.parse("from torch import relu as softmax\ny = softmax(x)\n"))
    assert "g = torch.relu(x)" in lines and "import torch.relu" in lines, lines
