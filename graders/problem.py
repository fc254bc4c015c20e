"""A deck problem as the grader sees it: problem.yaml plus the reference and shapes modules.

`load_problem` reads the trusted deck folder only (never the solution's), imports `reference.py`
and `shapes.py` from it under unique module names (two problems, or the same problem loaded twice,
never share module state), and evaluates the FLOPs/bytes formulas with a restricted arithmetic
evaluator: the yaml is data, so nothing in it is ever handed to `eval`.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import itertools
import math
import operator
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

_MODULE_COUNTER = itertools.count()

REGIMES = ("compute", "memory")
OUTPUT_KINDS = ("tensor", "topk")


class ProblemError(ValueError):
    """The deck folder is malformed (missing file, bad yaml, unsafe formula)."""


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float

    def for_dtype(self, dtype: Any) -> Tolerance:
        """The tolerance that applies to an output of `dtype` (one value for kaudit's own decks)."""
        return Tolerance(self.atol, self.rtol)


@dataclass(frozen=True)
class DtypeTolerance(Tolerance):
    """A KBH per-dtype tolerance, resolved as the harness's tolerance_for_dtype does: the override
    keyed by str(dtype) ('torch.bfloat16'), else its short name ('bfloat16'), else the harness's
    DEFAULT_TOLERANCE for the dtype, else its float32 entry. `atol`/`rtol` are the value for the
    problem's main output dtype, for callers that have no output at hand."""

    override: tuple[tuple[str, float, float], ...] = ()
    defaults: tuple[tuple[str, float, float], ...] = ()

    def for_dtype(self, dtype: Any) -> Tolerance:
        type_str = str(dtype)
        short = type_str.split(".")[-1]
        ov = {k: (a, r) for k, a, r in self.override}
        hit = ov.get(type_str, ov.get(short))
        if hit is None:
            table = {k: (a, r) for k, a, r in self.defaults}
            hit = table.get(short, table.get("float32", (self.atol, self.rtol)))
        return Tolerance(float(hit[0]), float(hit[1]))

    @classmethod
    def build(cls, override: Mapping[str, Any], defaults: tuple[tuple[str, float, float], ...],
              main_dtype: str) -> DtypeTolerance:
        rows: list[tuple[str, float, float]] = []
        for key, value in override.items():
            if isinstance(value, Mapping):
                rows.append((str(key), float(value.get("atol", 0)), float(value.get("rtol", 0))))
            elif key not in _METRIC_KEYS:
                rows.append((str(key), float(value), float(value)))
        probe = cls(0.0, 0.0, tuple(rows), defaults)
        main = probe.for_dtype(main_dtype)
        return cls(main.atol, main.rtol, tuple(rows), defaults)


_METRIC_KEYS = ("cos_sim",)
# The dtype of a KBH problem's output by its precision (its reference returns this).
_MAIN_DTYPE = {"bf16": "torch.bfloat16", "fp32": "torch.float32", "fp16": "torch.float16",
               "fp8_e4m3": "torch.bfloat16", "int4_bf16": "torch.bfloat16"}


@dataclass(frozen=True)
class StressCase:
    """One numeric-stress case: inputs scaled by position, state scaled by name, its own tolerance."""

    name: str
    scale_inputs: dict[int, float]
    scale_state: dict[str, float]
    tolerance: Tolerance


@dataclass
class ProblemSpec:
    id: str
    problem_dir: Path
    regime: str
    precision: str
    flops_expr: str
    bytes_expr: str
    tolerance: Tolerance
    output: str
    forbidden: list[str]
    required_framework: str | None
    allows_lower_precision: bool
    numeric_stress: list[StressCase]
    property_cases: int
    warmup: int
    trials: int
    timeouts: dict[str, int]
    reference: ModuleType
    shapes: list[dict[str, Any]]
    small_shapes: list[dict[str, Any]]
    raw: dict[str, Any] = field(default_factory=dict)
    # KBH-native decks (graders.kbh): the deck's own peak table entry and harness facts
    schema: str = "kaudit"  # "kaudit" | "kbh"
    peak_tflops: float | None = None
    peak_gbps: float | None = None
    hardware: list[str] = field(default_factory=list)
    hardware_name: str | None = None
    correct_trials: int = 3
    harness_dir: Path | None = None
    kbh_property_shape: int | None = None  # the shape index the harness runs its property stress at
    # shape-dict key -> reference global where the deck binds them differently (graders.kbh.shape_bindings)
    shape_attrs: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def raw_input_rewrites_in_contract(self) -> bool:
        """Does this deck's grader rewrite an input's bytes behind its version counter?

        kaudit's own decks do (their contract). A KBH deck does only for the problems its harness
        runs property stress on (`_overwrite_inputs_without_version`: same storage, same
        data_ptr, same `_version`); for the others (01 fp8, 07 w4a16) its check.py makes fresh
        inputs, and a cache keyed on (identity or data_ptr, `_version`) is inside its contract.
        """
        return self.schema != "kbh" or self.kbh_property_shape is not None

    @property
    def state_changes_in_contract(self) -> bool:
        """Does this deck's grader change a model's weights or buffers after it has called it?

        kaudit's own decks do (their check rescales state in place between calls: the weight
        contract of docs/regrade.md). A KBH deck's check.py and benchmark.py build a fresh Model per
        shape, `load_state_dict` it before the first call and change state afterwards only in a
        numeric-stress case that scales state (`state_scales`: 01 fp8's `small_weight`); for the
        others a weight-derived cache built on the first call is inside the grader's contract,
        keyed on the version or not (expert audits call such lazy repacks legitimate).
        """
        return self.schema != "kbh" or any(case.scale_state for case in self.numeric_stress)

    def shape_list(self, which: str) -> list[dict[str, Any]]:
        """`all` -> the graded SHAPES, `small` -> SMALL_SHAPES (CPU interpreter smoke)."""
        if which == "all":
            return list(self.shapes)
        if which == "small":
            return list(self.small_shapes)
        raise ProblemError(f"unknown shape set {which!r} (all | small)")

    def draw_context(self, device: str) -> contextlib.AbstractContextManager[Any]:
        """Where the deck's get_inputs()/Model() draw: a KBH deck's check.py and benchmark.py draw
        with the seeded CPU generator and move the tensors to the device, so kaudit does the same
        there (the values are then the official grader's own); kaudit's own decks draw on the device
        (`on_device`)."""
        if self.schema == "kbh":
            return contextlib.nullcontext()
        return on_device(device)

    def apply_shape(self, shape: Mapping[str, Any]) -> None:
        """Set the reference module's shape globals (`reference.M = 4096`, ...), under the names the
        deck's own check.py/benchmark.py use (`shape["seq_len"]` -> `reference.SEQ_LEN`)."""
        for key, value in shape.items():
            setattr(self.reference, self.shape_attrs.get(key, key), value)

    def _names(self, shape: Mapping[str, Any]) -> dict[str, float]:
        # Formulas may use constants the shape dict leaves at their reference default
        # (page_size, group_size): fall back to the reference module's numeric globals.
        names: dict[str, float] = {}
        for key, value in vars(self.reference).items():
            if not key.startswith("_") and isinstance(value, (int, float)) and not isinstance(value, bool):
                names[key] = value
        for key, value in shape.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                names[key] = value
        return names

    def flops(self, shape: Mapping[str, Any]) -> float:
        return float(eval_formula(self.flops_expr, self._names(shape)))

    def bytes(self, shape: Mapping[str, Any]) -> float:
        return float(eval_formula(self.bytes_expr, self._names(shape)))

    @property
    def model_class(self) -> type:
        return self.reference.Model  # type: ignore[no-any-return]

    @property
    def has_property_cases(self) -> bool:
        return self.property_cases > 0 and callable(getattr(self.reference, "make_property_case", None))


def on_device(device: str) -> contextlib.AbstractContextManager[Any]:
    """Make factory calls (torch.randn, parameters in __init__) allocate directly on `device`.

    Full graded shapes are large (the MoE hidden state is 262144 x 4096): drawing them with the CPU
    generator and copying costs seconds per case, so on CUDA the deck's get_inputs() and Model
    construction run under a device context and draw from the (seeded) CUDA generator. The draw is
    deterministic per seed and device; CPU smoke runs keep the CPU generator.
    """
    if device == "cpu":
        return contextlib.nullcontext()
    import torch

    return torch.device(device)


def build_solution_model(sol_model: type, init: list[Any], device: str) -> Any:
    """The solution's Model, allocated on the device when its constructor allows it.

    Its own initial values never matter (the reference state_dict is loaded with strict=True);
    a constructor that cannot run under a device context is retried the plain way (CPU, then .to).
    When the retry fails too, the FIRST failure is raised (the retry's chained as its cause): a
    JIT extension whose build failed is not rebuilt in the same process (torch's versioner
    remembers the sources), so the retry only sees a missing .so and would hide the build log
    (nvcc not found, a compile error) that tells a toolchain fault from the solution's own.
    """
    try:
        with on_device(device):
            model = sol_model(*init)
    except Exception as first:
        if device == "cpu":
            raise
        try:
            model = sol_model(*init)
        except Exception as retry:
            raise first from retry
    return model.to(device).eval()


# ---------------------------------------------------------------------------------------------
# Safe formula evaluation

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCS: dict[str, Callable[..., Any]] = {
    "min": min,
    "max": max,
    "ceil": math.ceil,
    "floor": math.floor,
    "int": int,
    "float": float,
    "abs": abs,
    "log2": math.log2,
    "cdiv": lambda a, b: -(-a // b),
}
_MAX_POW = 64  # 2**64 is the largest power a roofline formula needs; bigger is a bomb


def eval_formula(expr: str | int | float, names: Mapping[str, float]) -> float:
    """Evaluate a FLOPs/bytes formula: numbers, names from `names`, + - * / // % **, and a few
    whitelisted functions (min, max, ceil, floor, int, float, abs, log2, cdiv). Anything else
    (attribute access, subscripts, lambdas, comprehensions, unknown calls) raises ProblemError."""
    if isinstance(expr, (int, float)) and not isinstance(expr, bool):
        return float(expr)
    if not isinstance(expr, str):
        raise ProblemError(f"formula must be a string or number, got {type(expr).__name__}")
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ProblemError(f"formula {expr!r} does not parse: {exc.msg}") from None

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(
            node.value, bool
        ):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in names:
                return names[node.id]
            raise ProblemError(f"formula {expr!r}: unknown name {node.id!r}")
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > _MAX_POW:
                raise ProblemError(f"formula {expr!r}: exponent {right} too large")
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](ev(node.operand))
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _FUNCS
            and not node.keywords
        ):
            return _FUNCS[node.func.id](*[ev(a) for a in node.args])
        raise ProblemError(f"formula {expr!r}: {type(node).__name__} is not allowed")

    try:
        value = ev(tree)
    except ZeroDivisionError:
        raise ProblemError(f"formula {expr!r}: division by zero") from None
    return float(value)


# ---------------------------------------------------------------------------------------------
# Loading


def import_isolated(path: Path, prefix: str) -> ModuleType:
    """Import `path` as a fresh module with a unique name, its folder importable while it loads.

    The module is registered in sys.modules under the unique name only (dataclasses and pickling
    need that), so a later import of the same file gets a new, independent module.
    """
    name = f"_kaudit_{prefix}_{next(_MODULE_COUNTER)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    folder = str(path.parent)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    return module


def _tolerance(raw: Any, where: str, default: Tolerance | None = None) -> Tolerance:
    if raw is None and default is not None:
        return default
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return Tolerance(float(raw), float(raw))
    if not isinstance(raw, dict):
        raise ProblemError(f"{where}: tolerance must be a number or {{atol, rtol}}")
    base = default or Tolerance(0.0, 0.0)
    return Tolerance(float(raw.get("atol", base.atol)), float(raw.get("rtol", base.rtol)))


def _stress_case(raw: Any, index: int, default: Tolerance) -> StressCase:
    if not isinstance(raw, dict) or not raw.get("name"):
        raise ProblemError(f"numeric_stress[{index}] must be a mapping with a name")
    scale_inputs = {int(k): float(v) for k, v in (raw.get("scale_inputs") or {}).items()}
    scale_state = {str(k): float(v) for k, v in (raw.get("scale_state") or {}).items()}
    tol = Tolerance(float(raw.get("atol", default.atol)), float(raw.get("rtol", default.rtol)))
    return StressCase(str(raw["name"]), scale_inputs, scale_state, tol)


def load_problem(problem_dir: Path) -> ProblemSpec:
    """Read a trusted deck problem folder (problem.yaml, reference.py, shapes.py)."""
    problem_dir = Path(problem_dir).resolve()
    yaml_path = problem_dir / "problem.yaml"
    for needed in (yaml_path, problem_dir / "reference.py", problem_dir / "shapes.py"):
        if not needed.is_file():
            raise ProblemError(f"{problem_dir.name}: missing {needed.name}")
    try:
        raw = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ProblemError(f"{yaml_path}: invalid yaml: {exc}") from None
    if not isinstance(raw, dict):
        raise ProblemError(f"{yaml_path}: not a mapping")
    from graders import kbh

    if kbh.is_kbh_yaml(raw):
        return _load_kbh(raw, problem_dir, yaml_path)
    unknown = sorted(set(map(str, raw)) - KAUDIT_KEYS)
    if unknown:
        raise ProblemError(f"{yaml_path}: unknown key {unknown[0]!r} (kaudit schema: {', '.join(sorted(KAUDIT_KEYS))})")

    regime = str(raw.get("regime", "compute"))
    if regime not in REGIMES:
        raise ProblemError(f"{yaml_path}: regime {regime!r} not in {REGIMES}")
    output = str(raw.get("output", "tensor"))
    if output not in OUTPUT_KINDS:
        raise ProblemError(f"{yaml_path}: output {output!r} not in {OUTPUT_KINDS}")
    tolerance = _tolerance(raw.get("tolerance"), str(yaml_path))
    stress = [_stress_case(c, i, tolerance) for i, c in enumerate(raw.get("numeric_stress") or [])]
    perf = raw.get("perf") or {}
    timeouts = {str(k): int(v) for k, v in (raw.get("timeouts") or {}).items()}
    forbidden = [str(x) for x in (raw.get("forbidden") or [])]

    reference, shapes, small = _load_modules(problem_dir)

    spec = ProblemSpec(
        id=str(raw.get("id", problem_dir.name)),
        problem_dir=problem_dir,
        regime=regime,
        precision=str(raw.get("precision", "bf16")),
        flops_expr=str(raw.get("flops", "0")),
        bytes_expr=str(raw.get("bytes", "0")),
        tolerance=tolerance,
        output=output,
        forbidden=forbidden,
        required_framework=(str(raw["required_framework"]) if raw.get("required_framework") else None),
        allows_lower_precision=bool(raw.get("allows_lower_precision", False)),
        numeric_stress=stress,
        property_cases=int(raw.get("property_cases", 0) or 0),
        warmup=int(perf.get("warmup", 10)),
        trials=int(perf.get("trials", 30)),
        timeouts=timeouts,
        reference=reference,
        shapes=shapes,
        small_shapes=small,
        raw=raw,
    )
    # Fail at load time, not mid-benchmark, when a formula is unsafe or names an unknown key.
    for shape in spec.shapes + spec.small_shapes:
        spec.flops(shape)
        spec.bytes(shape)
    return spec


KAUDIT_KEYS = frozenset({
    "id", "regime", "precision", "flops", "bytes", "tolerance", "output", "forbidden", "required_framework",
    "allows_lower_precision", "numeric_stress", "property_cases", "perf", "timeouts",
})


def _load_modules(problem_dir: Path) -> tuple[ModuleType, list[dict[str, Any]], list[dict[str, Any]]]:
    reference = import_isolated(problem_dir / "reference.py", f"ref_{_ident(problem_dir.name)}")
    shapes_mod = import_isolated(problem_dir / "shapes.py", f"shapes_{_ident(problem_dir.name)}")
    shapes = [dict(s) for s in getattr(shapes_mod, "SHAPES", [])]
    small = [dict(s) for s in getattr(shapes_mod, "SMALL_SHAPES", [])] or shapes
    if not shapes:
        raise ProblemError(f"{problem_dir.name}: shapes.py defines no SHAPES")
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(reference, attr):
            raise ProblemError(f"{problem_dir.name}: reference.py lacks {attr}")
    return reference, shapes, small


def _load_kbh(raw: dict[str, Any], problem_dir: Path, yaml_path: Path) -> ProblemSpec:
    """A KernelBench-Hard problem.yaml, read with its registered harness (graders.kbh)."""
    from graders import kbh

    try:
        facts = kbh.read_kbh(raw, problem_dir, yaml_path)
    except kbh.KBHError as exc:
        raise ProblemError(str(exc)) from None
    main = _MAIN_DTYPE.get(facts.precision, "torch.float32")
    tolerance = DtypeTolerance.build(facts.override, facts.defaults, main)
    stress = [StressCase(name, ins, st, DtypeTolerance.build(tol, facts.defaults, main))
              for name, ins, st, tol in facts.stress]
    reference, shapes, small = _load_modules(problem_dir)
    spec = ProblemSpec(
        id=facts.name, problem_dir=problem_dir, regime=facts.regime, precision=facts.precision,
        flops_expr=facts.flops_expr, bytes_expr=facts.bytes_expr, tolerance=tolerance, output=facts.output,
        forbidden=facts.forbidden, required_framework=None, allows_lower_precision=False, numeric_stress=stress,
        property_cases=0, warmup=10, trials=facts.perf_trials, timeouts={}, reference=reference, shapes=shapes,
        small_shapes=small, raw=raw, schema="kbh", peak_tflops=facts.peak_tflops, peak_gbps=facts.peak_gbps,
        hardware=facts.hardware, hardware_name=facts.hardware_name, correct_trials=facts.correct_trials,
        harness_dir=facts.harness.path if facts.harness else None, kbh_property_shape=facts.property_shape,
        notes=facts.notes, shape_attrs=dict(facts.shape_attrs),
    )
    # The benchmark evaluates the formulas over the shape dict alone: so does kaudit, here.
    for shape in spec.shapes:
        for expr in (spec.flops_expr, spec.bytes_expr):
            eval_formula(expr, {k: v for k, v in shape.items() if isinstance(v, (int, float))})
    return spec


def _ident(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


def shape_desc(shape: Mapping[str, Any]) -> tuple[Any, ...]:
    """The shape as the log prints it: the tuple of its values, in key order."""
    return tuple(shape.values())
