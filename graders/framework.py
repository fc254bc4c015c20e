"""What a solution is written in, with evidence lines, and the deck's framework gate.

Frameworks: `triton`, `cuda_raw` (hand-written CUDA C++ built with load_inline/load/NVRTC),
`ptx` (inline PTX asm or .ptx sources), `cutlass` (CUTLASS/CuTe C++), `cute_dsl` (CUTLASS
Python DSL), `torch-only` (none of these). A solution can use several (a Triton path plus a CUDA
GEMV); `framework` is the most specific one, `all` lists every one found, each with `file:line`
evidence. Comments do not count: Python is read through its AST (docstrings excluded) and C++
with comments stripped.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from graders.forbidden import _is_docstring, _strip_comments
from graders.pyfold import fold_str, string_bindings
from graders.runformat import NATIVE_SUFFIXES

# Most specific first: a CUTLASS kernel is also CUDA C++, a PTX kernel is also cuda_raw.
PRIORITY = ("cute_dsl", "cutlass", "ptx", "cuda_raw", "triton")
TORCH_ONLY = "torch-only"

# Deck `required_framework` values and what satisfies them.
REQUIREMENTS: dict[str, frozenset[str]] = {
    "cuda": frozenset({"cuda_raw", "ptx", "cutlass"}),
    "cuda_raw": frozenset({"cuda_raw", "ptx"}),
    "ptx": frozenset({"ptx"}),
    "cutlass": frozenset({"cutlass", "cute_dsl"}),
    "cute_dsl": frozenset({"cute_dsl"}),
    "triton": frozenset({"triton"}),
}
# Frameworks a CUDA-only deck rejects when present anywhere (the "Triton/DSL paths").
CUDA_ONLY_REJECTS = frozenset({"triton", "cute_dsl"})

_NATIVE_PATTERNS: dict[str, re.Pattern[str]] = {
    "cutlass": re.compile(r"#\s*include\s*[<\"](?:cutlass|cute)/|\bcutlass::|\bcute::"),
    "ptx": re.compile(r"\basm\s*(?:volatile\s*)?\(|\b__asm__\b|\.version\s+\d+\.\d+|\.target\s+sm_"),
    "cuda_raw": re.compile(r"__global__|__device__|<<<|\bcudaLaunch|#\s*include\s*<cuda"),
}
_PY_IMPORT_FRAMEWORKS = {
    "triton": "triton",
    "cutlass.cute": "cute_dsl",
    "cutlass": "cute_dsl",  # the Python `cutlass` package is the CuTe DSL / CUTLASS Python API
    "cuda.bindings.nvrtc": "cuda_raw",
    "cuda.nvrtc": "cuda_raw",
    "cupy": "cuda_raw",
    "pycuda": "cuda_raw",
    "torch.utils.cpp_extension": "cuda_raw",
}
_PY_CALLS = {
    "torch.utils.cpp_extension.load_inline": "cuda_raw",
    "torch.utils.cpp_extension.load": "cuda_raw",
    "torch.cuda.jiterator._create_jit_fn": "cuda_raw",
}


@dataclass
class FrameworkReport:
    framework: str
    evidence: list[str] = field(default_factory=list)  # "file:line: text" for the chosen framework
    all: dict[str, list[str]] = field(default_factory=dict)  # every framework found -> evidence

    def log_line(self) -> str:
        ev = ",".join(e.split(": ", 1)[0] for e in self.evidence[:5]) or "none"
        others = sorted(k for k in self.all if k != self.framework)
        tail = f" also={'+'.join(others)}" if others else ""
        return f"framework: {self.framework} evidence={ev}{tail}"


def _add(found: dict[str, list[str]], fw: str, path: str, line: int, text: str) -> None:
    lst = found.setdefault(fw, [])
    if len(lst) < 20:
        lst.append(f"{path}:{line}: {text.strip()[:120]}")


def _scan_native_text(found: dict[str, list[str]], path: str, text: str, line_base: int, raw: str) -> None:
    code = _strip_comments(text)
    raw_lines = raw.splitlines()
    for i, ln in enumerate(code.splitlines(), 1):
        for fw, rx in _NATIVE_PATTERNS.items():
            if rx.search(ln):
                src = raw_lines[i - 1] if i - 1 < len(raw_lines) else ln
                _add(found, fw, path, line_base + i - 1, src)


def _resolve(node: ast.AST, aliases: Mapping[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _resolve(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def _scan_python(found: dict[str, list[str]], path: str, text: str, tree: ast.Module | None = None) -> None:
    if tree is None:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return
    lines = text.splitlines()
    consts = string_bindings(tree)
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
                _py_import(found, path, node.lineno, a.name, lines)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            _py_import(found, path, node.lineno, node.module, lines)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _resolve(node.func, aliases)
            if name in _PY_CALLS:
                _add(found, _PY_CALLS[name], path, node.lineno, lines[node.lineno - 1])
        if isinstance(node, (ast.Constant, ast.JoinedStr, ast.BinOp)):
            s = fold_str(node, consts)
            if not s or "\n" not in s or len(s) < 16:
                continue
            if isinstance(node, ast.Constant) and _is_docstring(tree, node):
                continue
            _scan_native_text(found, path, s, getattr(node, "lineno", 1), s)


def _py_import(found: dict[str, list[str]], path: str, line: int, module: str, lines: list[str]) -> None:
    for prefix in sorted(_PY_IMPORT_FRAMEWORKS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            _add(found, _PY_IMPORT_FRAMEWORKS[prefix], path, line, lines[line - 1])
            return


def detect(sources: Mapping[str, str], trees: Mapping[str, ast.Module] | None = None) -> FrameworkReport:
    """`trees`: ast.parse of some of `sources` already at hand (the audit's static model), by path."""
    found: dict[str, list[str]] = {}
    for path, text in sources.items():
        if path.endswith(".py"):
            _scan_python(found, path, text, (trees or {}).get(path))
        elif path.endswith(".ptx"):
            _add(found, "ptx", path, 1, f"PTX source ({len(text.splitlines())} lines)")
        elif path.endswith(NATIVE_SUFFIXES):
            _scan_native_text(found, path, text, 1, text)
    for ev in found.values():
        ev.sort(key=_evidence_key)
    for fw in PRIORITY:
        if fw in found:
            return FrameworkReport(framework=fw, evidence=list(found[fw]), all=found)
    return FrameworkReport(framework=TORCH_ONLY, evidence=[], all=found)


def _evidence_key(e: str) -> tuple[int, str, int]:
    path, _, rest = e.partition(":")
    line = rest.split(":", 1)[0]
    return (0 if path == "solution.py" else 1, path, int(line) if line.isdigit() else 0)


def gate(report: FrameworkReport, required: str | None) -> str | None:
    """None when the deck's `required_framework` is satisfied, else the reason (for a FAIL line)."""
    if not required:
        return None
    req = required.strip().lower()
    allowed = REQUIREMENTS.get(req, frozenset({req}))
    present = set(report.all)
    if not present & allowed:
        return f"required framework {req} not used (detected {report.framework})"
    if req in ("cuda", "cuda_raw", "ptx", "cutlass"):
        bad = sorted(present & CUDA_ONLY_REJECTS - allowed)
        if bad:
            where = report.all[bad[0]][0].split(": ", 1)[0]
            return f"required framework {req} but {bad[0]} path present at {where}"
    return None
