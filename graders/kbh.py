"""KernelBench-Hard-native problem.yaml: the real schema, read with the registered harness's semantics.

A KBH problem folder sits two levels under its harness library (`<root>/problems-h100/<problem>/`
next to `<root>/src/`, or `<store>/problems/<problem>/` next to `<store>/src/` in a materialized
deck): its check.py/benchmark.py put `<root>` on sys.path and import `src.eval...`. kaudit reads
the same library from the same place:

- tolerance: `{dtype: number | {atol, rtol}}`, keys spelled `bfloat16` or `torch.bfloat16`,
  looked up exactly as src/eval/correctness.py's tolerance_for_dtype does (str(dtype) first, then
  its short name, then the harness's DEFAULT_TOLERANCE, then fp32); the defaults are read from the
  registered harness, not restated;
- numeric stress: the harness's own `numeric_stress_cases(name)` and `tolerance_for_case`;
- property stress: the harness's `property_shape_index(name)`; the cases themselves run through the
  harness's check_tensor_properties / check_topk_properties (graders.correctness calls them);
- peaks: `hardware[0]` in the harness's src/hardware tables, `peak_tflops_key` in its
  peak_tflops_dense (a key the table lacks is an error here, where the benchmark would silently
  score 0), `peak_bandwidth_key: dram` -> peak_bandwidth_gb_s.

Every top-level key and every tolerance key is known (used, or recorded as informational with the
reason); anything else is a ProblemError naming it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

# Keys kaudit's hardened grader uses.
USED_KEYS = frozenset({
    "name", "precision", "regime", "flops_formula", "bytes_formula", "hardware", "peak_tflops_key",
    "peak_bandwidth_key", "tolerance", "forbidden", "num_correct_trials", "num_perf_trials",
})
# Keys the deck's own check.py/benchmark.py read (official mode) or that only describe the problem.
INFO_KEYS = {
    "display_name": "label",
    "sota": "informational SOTA line (benchmark.py with KBH_BENCHMARK_BASELINES=1)",
    "language": "cuda/ decks: check.py's language gate (official mode)",
    "require_cuda_evidence": "cuda/ decks: check.py's CUDA-evidence gate (official mode)",
    "moe": "cuda/01 geometry read by its reference/check",
    "nsa": "cuda/02 geometry read by its reference/check",
    "model": "cuda/03 geometry read by its reference/check",
    "policy": "cuda/04 geometry read by its reference/check",
    "logit_tolerance": "cuda/04 check.py's own logit tolerance (official mode)",
    "position_exact": "cuda/04 check.py's exact-position rule (official mode)",
    "peak_tok_s": "cuda/03 throughput ceiling read by its benchmark.py (official mode)",
    "peak_sps": "cuda/04 throughput ceiling read by its benchmark.py (official mode)",
    "constraints": "mega/cuda launch constraints judged by the audit, not a grader",
}
KBH_MARKERS = ("flops_formula", "num_correct_trials", "num_perf_trials", "peak_tflops_key", "display_name")
# Tolerance keys the harness reads but can never match a torch dtype with (so never applies).
INERT_TOLERANCE_KEYS = {
    "fp8_e4m3fn": "the harness matches str(dtype) ('torch.float8_e4m3fn') or its short name; "
                  "'fp8_e4m3fn' is neither, so it never applies (the output is bf16 anyway)",
}
# Tolerance keys that are a check.py's own metric, not a dtype.
METRIC_TOLERANCE_KEYS = {"cos_sim": "mega check.py's cosine-similarity floor (official mode)"}
HARDENED_REGIMES = ("compute", "memory")
# The harness's check.py is per-problem code; these compare (values, indices) like kaudit's topk.
TOPK_PROBLEMS = frozenset({"05_topk_bitonic"})


class KBHError(ValueError):
    """A KBH problem.yaml kaudit cannot read faithfully (the message names the key)."""


def is_kbh_yaml(raw: Mapping[str, Any]) -> bool:
    return "id" not in raw and any(k in raw for k in KBH_MARKERS)


def harness_dir_for(problem_dir: Path) -> Path | None:
    """The harness library a problem's check.py imports: `<problem>/../../src`."""
    cand = Path(problem_dir).resolve().parent.parent / "src"
    return cand if (cand / "eval").is_dir() else None


def problems_scaling_state(harness_dir: Path) -> dict[str, bool] | None:
    """{problem name: does a numeric-stress case of it scale model state}, read from the harness's
    src/eval/numeric_stress.py WITHOUT importing it (the static audit is torch-free): its `_CASES`
    table of `NumericStressCase(...)` calls, `state_scales=` a non-empty dict. None when the file or
    the table is not in that form (the caller then knows nothing). graders.problem's
    `ProblemSpec.state_changes_in_contract` reads the same fact from the imported harness; a test
    holds the two to the same answers on the real decks."""
    import ast

    path = Path(harness_dir) / "eval" / "numeric_stress.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return None
    table: ast.expr | None = None
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "_CASES" for t in targets):
            table = value
    if not isinstance(table, ast.Dict):
        return None
    out: dict[str, bool] = {}
    for key, value in zip(table.keys, table.values, strict=True):
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)) or not isinstance(value, ast.Tuple):
            return None
        scales = False
        for case in value.elts:
            if not isinstance(case, ast.Call):
                return None
            for kw in case.keywords:
                if kw.arg == "state_scales":
                    if not isinstance(kw.value, ast.Dict):
                        return None  # a computed table: unknown
                    scales = scales or bool(kw.value.keys)
        out[key.value] = scales
    return out


@contextlib.contextmanager
def harness_imports(harness_dir: Path) -> Iterator[None]:
    """Make `src.*` resolve to this harness while the block runs, and leave sys.modules as it was
    (two harnesses, e.g. hard/src and cuda/src, never share a module)."""
    if Path(harness_dir).name != "src":
        raise KBHError(f"harness folder {harness_dir} must be named 'src' (the decks import src.eval)")
    saved = {k: sys.modules.pop(k) for k in [m for m in sys.modules if m == "src" or m.startswith("src.")]}
    parent = str(Path(harness_dir).resolve().parent)
    sys.path.insert(0, parent)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(parent)
        for m in [m for m in sys.modules if m == "src" or m.startswith("src.")]:
            del sys.modules[m]
        sys.modules.update(saved)


@dataclass
class Harness:
    """The registered harness modules kaudit calls (imported once per load)."""

    path: Path
    correctness: ModuleType
    numeric_stress: ModuleType
    hardware: ModuleType
    property_stress: ModuleType | None = None
    property_error: str | None = None


def load_harness(harness_dir: Path) -> Harness:
    import importlib

    with harness_imports(harness_dir):
        try:
            correctness = importlib.import_module("src.eval.correctness")
            numeric = importlib.import_module("src.eval.numeric_stress")
            hardware = importlib.import_module("src.hardware")
        except ImportError as exc:
            raise KBHError(f"harness {harness_dir}: cannot import {exc.name or exc}") from None
        prop: ModuleType | None = None
        prop_error = None
        if (Path(harness_dir) / "eval" / "property_stress.py").is_file():
            try:
                prop = importlib.import_module("src.eval.property_stress")
            except ImportError as exc:  # hypothesis missing: say so, never skip silently
                prop_error = f"property_stress unavailable: {exc}"
    return Harness(Path(harness_dir), correctness, numeric, hardware, prop, prop_error)


def _coerce(value: Any, where: str) -> float:
    """The harness's _coerce_float, but an unparseable value is an error (the harness would fall
    back to its default silently)."""
    if isinstance(value, bool):
        raise KBHError(f"{where}: {value!r} is not a number")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise KBHError(f"{where}: {value!r} is not a number")


def _is_dtype_name(key: str) -> bool:
    import torch

    short = key[len("torch."):] if key.startswith("torch.") else key
    return isinstance(getattr(torch, short, None), torch.dtype)


def validate_tolerance(raw: Any, where: str) -> tuple[dict[str, Any], list[str]]:
    """The override mapping as the harness reads it, plus notes for inert/metric keys."""
    if raw is None:
        return {}, []
    if not isinstance(raw, Mapping):
        raise KBHError(f"{where}: tolerance must be a mapping of dtype -> number or {{atol, rtol}}")
    notes: list[str] = []
    out: dict[str, Any] = {}
    for key, value in raw.items():
        key = str(key)
        if key in INERT_TOLERANCE_KEYS:
            notes.append(f"tolerance key {key!r} is inert: {INERT_TOLERANCE_KEYS[key]}")
            continue
        if key in METRIC_TOLERANCE_KEYS:
            notes.append(f"tolerance key {key!r}: {METRIC_TOLERANCE_KEYS[key]}")
            out[key] = _coerce(value, f"{where}: tolerance.{key}")
            continue
        if not _is_dtype_name(key):
            raise KBHError(f"{where}: unknown tolerance key {key!r} (expected a torch dtype name such as "
                           f"bfloat16 or torch.bfloat16)")
        if isinstance(value, Mapping):
            extra = set(map(str, value)) - {"atol", "rtol"}
            if extra:
                raise KBHError(f"{where}: tolerance.{key}: unknown key {sorted(extra)[0]!r} (atol, rtol)")
            out[key] = {k: _coerce(v, f"{where}: tolerance.{key}.{k}") for k, v in value.items()}
        else:
            out[key] = _coerce(value, f"{where}: tolerance.{key}")
    return out, notes


def defaults_of(harness: Harness) -> tuple[tuple[str, float, float], ...]:
    """The harness's DEFAULT_TOLERANCE as (short dtype name, atol, rtol)."""
    table = getattr(harness.correctness, "DEFAULT_TOLERANCE", None)
    if not isinstance(table, Mapping):
        raise KBHError(f"harness {harness.path}: src/eval/correctness.py has no DEFAULT_TOLERANCE")
    return tuple(sorted((str(dt).split(".")[-1], float(v["atol"]), float(v["rtol"])) for dt, v in table.items()))


@dataclass
class KBHFacts:
    """What the KBH loader hands problem.py to build a ProblemSpec."""

    name: str
    regime: str
    precision: str
    flops_expr: str
    bytes_expr: str
    override: dict[str, Any]
    defaults: tuple[tuple[str, float, float], ...]
    stress: list[tuple[str, dict[int, float], dict[str, float], dict[str, Any]]]
    forbidden: list[str]
    hardware: list[str]
    peak_tflops: float | None
    peak_gbps: float | None
    hardware_name: str | None
    correct_trials: int
    perf_trials: int
    output: str
    property_shape: int | None
    notes: list[str] = field(default_factory=list)
    harness: Harness | None = None
    # shape-dict key -> reference module global, as the deck's own check.py/benchmark.py bind them
    shape_attrs: dict[str, str] = field(default_factory=dict)


def shape_bindings(problem_dir: Path) -> dict[str, str]:
    """How the deck's check.py/benchmark.py put a shape into the reference module.

    They assign `reference.<GLOBAL> = shape["<key>"]` per shape (03_paged_attention binds
    `batch` to `BATCH`, `seq_len` to `SEQ_LEN`, ...); get_inputs()/get_init_inputs() then read those
    globals. Read from the deck's own files (ast, never executed); a deck that sets the shape
    keys verbatim (`setattr(reference, k, v)`) yields no entry and keeps the identity mapping.
    """
    import ast

    out: dict[str, str] = {}
    for fname in ("check.py", "benchmark.py"):
        path = problem_dir / fname
        if not path.is_file():
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
                continue
            tgt, val = node.targets[0], node.value
            if (isinstance(tgt, ast.Attribute) and isinstance(tgt.value, ast.Name) and tgt.value.id == "reference"
                    and isinstance(val, ast.Subscript) and isinstance(val.slice, ast.Constant)
                    and isinstance(val.slice.value, str)):
                out.setdefault(val.slice.value, tgt.attr)
    return out


def read_kbh(raw: Mapping[str, Any], problem_dir: Path, yaml_path: Path) -> KBHFacts:
    where = str(yaml_path)
    unknown = sorted(set(map(str, raw)) - USED_KEYS - set(INFO_KEYS))
    if unknown:
        raise KBHError(f"{where}: unknown key {unknown[0]!r} (kaudit reads: "
                       f"{', '.join(sorted(USED_KEYS | set(INFO_KEYS)))})")
    name = str(raw.get("name") or "")
    if name != problem_dir.name:
        raise KBHError(f"{where}: name {name!r} != folder {problem_dir.name!r} (the harness keys its stress "
                       f"cases on name)")
    hdir = harness_dir_for(problem_dir)
    if hdir is None:
        raise KBHError(f"{problem_dir}: no harness library at ../../src (import the deck with --harness)")
    harness = load_harness(hdir)
    override, notes = validate_tolerance(raw.get("tolerance"), where)
    regime = str(raw.get("regime", "compute"))
    if regime not in HARDENED_REGIMES:
        raise KBHError(f"{where}: regime {regime!r}: kaudit's hardened grader scores roofline regimes "
                       f"{HARDENED_REGIMES} only; this problem is graded by official mode (its own "
                       f"check.py/benchmark.py)")
    for key in ("flops_formula", "bytes_formula"):
        if key not in raw:
            raise KBHError(f"{where}: missing {key} (regime {regime})")
    hardware = [str(h) for h in (raw.get("hardware") or [])]
    if not hardware:
        raise KBHError(f"{where}: missing hardware (the benchmark reads hardware[0])")
    targets = getattr(harness.hardware, "TARGETS", {})
    if hardware[0] not in targets:
        raise KBHError(f"{where}: hardware {hardware[0]!r} not in the harness tables ({', '.join(targets)})")
    hw = targets[hardware[0]]
    tkey = raw.get("peak_tflops_key")
    peak_tflops = None
    if tkey is not None:
        if str(tkey) not in hw.peak_tflops_dense:
            raise KBHError(f"{where}: peak_tflops_key {tkey!r} not in {hardware[0]} peak_tflops_dense "
                           f"({', '.join(hw.peak_tflops_dense)}); the benchmark would score 0")
        peak_tflops = float(hw.peak_tflops_dense[str(tkey)])
    elif regime == "compute":
        raise KBHError(f"{where}: compute regime needs peak_tflops_key")
    bkey = raw.get("peak_bandwidth_key")
    if bkey is not None and str(bkey) != "dram":
        raise KBHError(f"{where}: peak_bandwidth_key {bkey!r}: the harness has only 'dram' (peak_bandwidth_gb_s)")
    stress = []
    for case in harness.numeric_stress.numeric_stress_cases(name):
        if case.name == "nominal":
            continue
        merged = harness.numeric_stress.tolerance_for_case(override or None, case) or {}
        stress.append((case.name, {int(k): float(v) for k, v in case.input_scales.items()},
                       {str(k): float(v) for k, v in case.state_scales.items()}, dict(merged)))
    prop_shape = None
    if harness.property_stress is not None:
        prop_shape = harness.property_stress.property_shape_index(name)
    elif harness.property_error:
        notes.append(harness.property_error)
    return KBHFacts(
        name=name, regime=regime, precision=str(raw.get("precision", "bf16")),
        flops_expr=str(raw["flops_formula"]), bytes_expr=str(raw["bytes_formula"]), override=override,
        defaults=defaults_of(harness), stress=stress, forbidden=[str(x) for x in (raw.get("forbidden") or [])],
        hardware=hardware, peak_tflops=peak_tflops, peak_gbps=float(hw.peak_bandwidth_gb_s),
        hardware_name=str(hw.name), correct_trials=int(raw.get("num_correct_trials", 3)),
        perf_trials=int(raw.get("num_perf_trials", 30)),
        output="topk" if name in TOPK_PROBLEMS else "tensor", property_shape=prop_shape, notes=notes,
        harness=harness, shape_attrs=shape_bindings(problem_dir),
    )
