"""One definition of a submission's files: the graders' door (collect_sources, a folder on disk)
and the audit's door (build_submission, the same files in memory) agree, through
graders.sources.source_closure."""

from __future__ import annotations

import tarfile
import textwrap
from pathlib import Path

from audit_rules.source_model import build_submission
from graders.sources import collect_sources, source_closure

SOLUTION = '''
import os
import sys

import torch
from torch.utils.cpp_extension import load

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "scratch"))

import helper
from kern import launch

_ext = load(name="ext", sources=[os.path.join(HERE, "csrc", "ext.cu")])


class Model(torch.nn.Module):
    def forward(self, x):
        return launch(helper.prep(x), _ext)
'''

TREE = {
    "solution.py": SOLUTION,
    "helper.py": "def prep(x):\n    return x.contiguous()\n",  # sidecar module
    "scratch/kern.py": "def launch(x, ext):\n    return ext.run(x)\n",  # sys.path-inserted folder
    "scratch/notes.py": "import torch\ntorch.topk = None\n",  # beside a loaded file, never imported
    "csrc/ext.cu": '#include "common.cuh"\n__global__ void k(float* x) { x[0] = N; }\n',  # handed to load()
    "csrc/common.cuh": "#define N 4\n",  # included by ext.cu
    "other.py": "import torch\nprint(torch.topk)\n",  # unloaded sibling
    "old.cu": "__global__ void old() {}\n",  # unloaded sibling
}
EXPECTED = {"solution.py", "helper.py", "scratch/kern.py", "csrc/ext.cu", "csrc/common.cuh"}


def _write_tar(tmp: Path) -> Path:
    """The submission as a real tar, unpacked: what a run archive's solution folder looks like."""
    src = tmp / "src"
    for rel, text in TREE.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(textwrap.dedent(text))
    tar = tmp / "sub.tar"
    with tarfile.open(tar, "w") as tf:
        tf.add(src, arcname="sub")
    out = tmp / "out"
    with tarfile.open(tar) as tf:
        tf.extractall(out, filter="data")
    return out / "sub"


def test_both_doors_give_the_same_files(tmp_path: Path) -> None:
    root = _write_tar(tmp_path)
    graders_files = set(collect_sources(root / "solution.py"))
    on_disk = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}
    sub = build_submission(on_disk)
    audit_files = set(sub.modules) | {n.origin for n in sub.native if n.via == "file" and n.loaded}
    assert graders_files == EXPECTED
    assert audit_files == EXPECTED
    assert sub.closure is not None and set(sub.closure.files) == EXPECTED
    # the sidecar imports resolve to those files (how a rule follows `launch` into scratch/kern.py)
    assert sub.modules["solution.py"].sidecar_alias["launch"] == ("scratch/kern.py", "launch")
    assert sub.modules["solution.py"].sidecar_alias["helper"] == ("helper.py", None)
    assert {n.origin for n in sub.native if n.via == "file" and not n.loaded} == {"old.cu"}


def test_startup_hooks_relative_levels_and_import_calls() -> None:
    files = {
        "solution.py": "import importlib\nfrom pkg.sub import mod\nm = importlib.import_module('dyn')\nname = 'other'\n",
        "pkg/__init__.py": "",
        "pkg/sub/__init__.py": "",
        "pkg/sub/mod.py": "from .. import up\nfrom ..up import f\n",
        "pkg/up.py": "def f():\n    pass\n",
        "dyn.py": "",
        "other.py": "",  # a string that names a module but never reaches an import
        "sitecustomize.py": "",  # on the path at start-up: Python runs it before the harness
        "deep/sitecustomize.py": "",  # not on the path
    }
    c = source_closure(files, "solution.py")
    assert set(c.files) == {
        "solution.py", "sitecustomize.py", "pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/mod.py", "pkg/up.py", "dyn.py"
    }
    assert c.resolve("pkg/sub/mod.py", "up", 2) == "pkg/up.py"
    assert c.resolve("pkg/sub/mod.py", "up", 1) is None
    assert c.imports["solution.py"]["dyn"] == "dyn.py"


def test_disk_door_skips_symlinks_and_stays_inside(tmp_path: Path) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("import torch\n")
    root = tmp_path / "sol"
    root.mkdir()
    (root / "solution.py").write_text("import leak\nimport real\nopen('../outside.py')\n")
    (root / "real.py").write_text("")
    (root / "leak.py").symlink_to(outside)
    assert set(collect_sources(root / "solution.py")) == {"solution.py", "real.py"}
