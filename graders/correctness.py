"""kaudit's correctness check: the solution against the trusted deck, stress always on.

Order matters and is part of the contract:
1. The problem spec (tolerances, stress cases, forbidden list) is read from the trusted deck
   BEFORE the solution is imported, and nothing is ever read from environment variables the
   solution could set: numeric stress cannot be switched off.
2. `PROPERTY_SEED: n` is printed before the import, so a property failure replays.
3. Static checks (framework gate, forbidden-op scan of solution.py and every sidecar it loads)
   run before any solution code executes.
4. The solution is imported under a unique module name, its folder importable (sidecars).
5. One small case runs under the runtime recorder (every torch function and aten op dispatched,
   every module imported): a forbidden op reached indirectly fails.
6. Every shape x seed x (nominal + every numeric-stress case), one model pair per shape, every seed
   starting from its base state, then the property plan, then 11
   repeated calls and two in-place overwrites of the inputs keeping the data pointer (one that bumps
   the version counter, one that does not): the output must track the new data.

What decides correctness is not this process: the solution runs here, so it can patch anything
the comparison uses (`torch.Tensor.__int__`, `count_nonzero`, the grader's own functions). With
`record_dir`, every graded output of the shape x seed x case grid is written as raw bytes (dtype,
shape, contiguous storage) right after the solution returned and before the reference of that
case exists in this process; `verify_recorded` then rebuilds every case from the deck in a
process that never imports the solution and compares those bytes (graders.regrade runs it after
the solution's process is gone). The in-process comparison stays for its log lines and for fast
failure; a PASS here that the verifier refutes is a forged check.

Outputs must be plain `torch.Tensor` objects (exact type, no subclass or lazy wrapper) of the
reference's dtype, device and shape; NaN/inf fails; closeness is elementwise
|o - r| <= atol + rtol * |r|. Top-k indices are checked by gathering the input at them (ties are
allowed, duplicates are not).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import math
import os
import random
import secrets
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from graders import interp_fixes
from graders.callsite import as_script, script_path, trampoline
from graders.forbidden import ForbiddenHit, RuntimeRecord, record_ops, runtime_hits, scan
from graders.framework import FrameworkReport, detect, gate
from graders.logformat import check_fail_line, check_pass_line, property_seed_line
from graders.probes.cases import fresh_inputs
from graders.problem import (
    ProblemSpec,
    StressCase,
    Tolerance,
    build_solution_model,
    import_isolated,
    load_problem,
    shape_desc,
)
from graders.results import REFUTED_FORGED, REFUTED_REF_SHIFT, REFUTED_UNEXPLAINED, REFUTED_UNSTABLE
from graders.sources import add_loaded_modules, collect_sources

SMOKE_LINE = "smoke: cpu interpreter run, never publish-grade"
DEFAULT_SEEDS = (42, 123, 456)
REPEAT_CALLS = 11

# Captured before any solution code runs: a solution that rebinds torch.abs & co. at import time
# does not reach the comparisons below.
_abs, _sub, _isfinite, _gt, _amax, _argmax = torch.abs, torch.sub, torch.isfinite, torch.gt, torch.amax, torch.argmax
_isnan = torch.isnan
_to, _detach = torch.Tensor.to, torch.Tensor.detach
_logical_and, _logical_not, _logical_or = torch.logical_and, torch.logical_not, torch.logical_or
_count_nonzero, _gather, _where, _zeros_like = torch.count_nonzero, torch.gather, torch.where, torch.zeros_like
_sort = torch.sort
_eq = torch.eq
_full_like = torch.full_like
_Tensor = torch.Tensor
_fn_stack_len = torch._C._len_torch_function_stack
_dispatch_stack_len = torch._C._len_torch_dispatch_stack
# The raw-output recorder uses only these: C methods of the (immutable) TensorBase type, the
# torch-function switch and os-level file calls, bound before any solution code runs.
_TB = torch._C.TensorBase
_tb_detach, _tb_to, _tb_contiguous, _tb_reshape, _tb_view, _tb_numpy = (
    _TB.detach, _TB.to, _TB.contiguous, _TB.reshape, _TB.view, _TB.numpy)
_DisableTorchFunction = torch._C.DisableTorchFunction
_os_open, _os_write, _os_close, _json_dumps, _type, _str = os.open, os.write, os.close, json.dumps, type, str
_EMPTY = memoryview(b"")
_uint8 = torch.uint8
MAX_RECORD_BYTES = 1 << 31  # one recorded output file


class _GraderIntegrity:
    """Snapshot of every loaded `graders.*` module's namespace, taken before the solution runs.

    The solution runs in the grader's process, so it could rebind `graders.correctness.compare_output`
    (or any helper) to a no-op. Every solution call is followed by a comparison with the snapshot;
    a rebinding, or a function whose code object was swapped, fails the check as tampering.
    """

    def __init__(self) -> None:
        self.snap: dict[str, dict[str, tuple[int, int | None]]] = {}
        self.objects: dict[str, dict[str, Any]] = {}
        for name, mod in list(sys.modules.items()):
            if name == "graders" or name.startswith("graders."):
                items = {k: v for k, v in list(vars(mod).items()) if not k.startswith("__")}
                self.objects[name] = items
                self.snap[name] = {k: _fingerprint(v) for k, v in items.items()}

    def restore(self) -> None:
        """Put the snapshot back (a tampering solution must not poison later checks in this process)."""
        for name, items in self.objects.items():
            mod = sys.modules.get(name)
            if mod is not None:
                for k, v in items.items():
                    if k not in vars(mod) or vars(mod)[k] is not v:
                        setattr(mod, k, v)

    def changed(self) -> list[str]:
        bad: list[str] = []
        for name, entries in self.snap.items():
            mod = sys.modules.get(name)
            if mod is None:
                bad.append(f"{name} (unloaded)")
                continue
            now = vars(mod)
            for k, fp in entries.items():
                if k not in now or _fingerprint(now[k]) != fp:
                    bad.append(f"{name}.{k}")
        return bad


def _fingerprint(v: Any) -> tuple[int, int | None]:
    code = getattr(v, "__code__", None)
    return id(v), (id(code) if code is not None else None)


_INTEGRITY: list[_GraderIntegrity] = []  # the active snapshot (one check at a time per process)

# Where the check and the verifier report which stage they reached (advisory progress, never a
# result: the sandbox child forwards it so a lane log shows where a slow check spends its time).
_STAGE_SINK: list[Callable[[str], None]] = []


def set_stage_sink(sink: Callable[[str], None] | None) -> None:
    _STAGE_SINK[:] = [sink] if sink is not None else []


def _stage(name: str) -> None:
    for sink in _STAGE_SINK:
        try:
            sink(name)
        except Exception:  # a broken progress channel must not fail a check
            pass


class _Fail(Exception):
    """A check failure carrying its FAIL line."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line


@dataclass
class CheckOutcome:
    passed: bool
    lines: list[str]
    framework: FrameworkReport
    dispatched_ops: set[str]
    property_seed: int | None = None
    forbidden: list[ForbiddenHit] = field(default_factory=list)
    smoke: bool = False
    sources: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Where:
    shape_index: int
    shape: dict[str, Any]
    seed: int
    case: str
    prop: bool = False  # a property-stress failure (grammar: "... property stress: ...")

    def fail(self, detail: str) -> str:
        if self.prop:
            return check_fail_line(
                "property_stress", shape=self.shape_index, shape_desc=shape_desc(self.shape),
                seed=self.seed, case=self.case, detail=detail,
            )
        head = f"shape {self.shape_index} {_fmt_tuple(shape_desc(self.shape))} seed {self.seed} case {self.case}"
        return f"FAIL: {head}: {detail}"

    def tolerance_fail(self, stats: dict[str, Any]) -> str:
        if self.prop:
            return self.fail(_tolerance_detail(stats))
        return check_fail_line(
            "tolerance", shape=self.shape_index, shape_desc=shape_desc(self.shape), seed=self.seed,
            case=self.case, **stats,
        )


def _fmt_tuple(t: tuple[Any, ...]) -> str:
    return "(" + ",".join(str(x) for x in t) + ")"


def _tolerance_detail(stats: dict[str, Any]) -> str:
    return (
        f"tolerance exceeded: max_abs_diff={stats['max_abs_diff']:.6g} max_rel_diff={stats['max_rel_diff']:.6g} "
        f"bad={stats['bad']}/{stats['total']} worst_idx={_fmt_tuple(stats['worst_idx'])}"
    )


def _one_line(exc: BaseException) -> str:
    msg = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {msg[:400]}"


def _log_whole(exc: BaseException) -> None:
    """The whole text of a solution's exception on stderr (operator-only output, read by the
    regrade's infra classification): a check line keeps 400 characters, and a JIT build error puts
    its cause (`/usr/bin/nvcc: not found`) after a nvcc command line longer than that."""
    sys.stderr.write("".join(traceback.format_exception_only(type(exc), exc)))


# ---------------------------------------------------------------------------------------------
# Comparison


def _require_plain(out: Any, ref: _Tensor, where: _Where, what: str) -> _Tensor:
    if type(out) is not _Tensor:
        raise _Fail(where.fail(f"{what} is {type(out).__module__}.{type(out).__qualname__}, not a plain torch.Tensor"))
    if out.dtype != ref.dtype:
        raise _Fail(where.fail(f"{what} dtype {out.dtype} != reference {ref.dtype}"))
    if out.device != ref.device:
        raise _Fail(where.fail(f"{what} device {out.device} != reference {ref.device}"))
    if tuple(out.shape) != tuple(ref.shape):
        raise _Fail(where.fail(f"{what} shape {tuple(out.shape)} != reference {tuple(ref.shape)}"))
    return out


def _unravel(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    idx: list[int] = []
    for dim in reversed(list(shape)):
        idx.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return tuple(reversed(idx))


def _closeness(out: _Tensor, ref: _Tensor, tol: Tolerance) -> dict[str, Any] | None:
    """None when every element is within tolerance, else the failure statistics."""
    tol = tol.for_dtype(ref.dtype)  # a KBH deck's per-dtype tolerance, by the reference output's dtype
    o = _to(_detach(out), torch.float64)
    r = _to(_detach(ref), torch.float64)
    total = r.numel()
    if total == 0:
        return None
    r_fin = _isfinite(r)
    o_fin = _isfinite(o)
    diff = _abs(_sub(o, r))
    bound = tol.atol + tol.rtol * _abs(r)
    over = _logical_and(_gt(diff, bound), r_fin)
    nonfinite = _logical_and(_logical_not(o_fin), r_fin)
    # Where the reference itself is +-inf, the output must be the same infinity.
    inf_mismatch = _logical_and(_logical_not(r_fin), _logical_not(_eq(o, r)))
    inf_mismatch = _logical_and(inf_mismatch, _logical_not(_isnan(r)))
    bad = _logical_or(_logical_or(over, nonfinite), inf_mismatch)
    n_bad = int(_count_nonzero(bad))
    if n_bad == 0:
        return None
    # Ranking: the element furthest beyond its bound (non-finite outputs rank first).
    excess = _sub(diff, bound)
    excess = _where(_isfinite(excess), excess, _full_like(excess, math.inf))
    worst = int(_argmax(_where(bad, excess, _full_like(excess, -math.inf)).reshape(-1)))
    bad_diff = _where(bad, _where(_isfinite(diff), diff, _full_like(diff, math.inf)), _zeros_like(diff))
    max_abs = float(_amax(bad_diff))
    rel = bad_diff / _abs(r).clamp_min(1e-30)
    max_rel = float(_amax(_where(bad, rel, _zeros_like(rel))))
    return {
        "max_abs_diff": max_abs,
        "max_rel_diff": max_rel,
        "bad": n_bad,
        "total": total,
        "worst_idx": _unravel(worst, r.shape),
    }


def compare_output(
    out: Any, ref_out: Any, tol: Tolerance, kind: str, where: _Where, x_input: _Tensor | None = None
) -> None:
    """Raise _Fail with the grammar line when `out` does not match `ref_out`."""
    if kind == "topk":
        _compare_topk(out, ref_out, tol, where, x_input)
        return
    if isinstance(ref_out, (tuple, list)):
        if not isinstance(out, (tuple, list)) or len(out) != len(ref_out):
            raise _Fail(where.fail(f"output is {type(out).__name__}, expected a sequence of {len(ref_out)} tensors"))
        for i, (o, r) in enumerate(zip(out, ref_out, strict=True)):
            _require_plain(o, r, where, f"output[{i}]")
            stats = _closeness(o, r, tol)
            if stats is not None:
                raise _Fail(where.tolerance_fail(stats))
        return
    _require_plain(out, ref_out, where, "output")
    stats = _closeness(out, ref_out, tol)
    if stats is not None:
        raise _Fail(where.tolerance_fail(stats))


def _compare_topk(out: Any, ref_out: Any, tol: Tolerance, where: _Where, x: _Tensor | None) -> None:
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise _Fail(where.fail(f"output is {type(out).__name__}, expected (values, indices)"))
    values, indices = out
    ref_values, ref_indices = ref_out[0], ref_out[1]
    _require_plain(values, ref_values, where, "values")
    if type(indices) is not _Tensor:
        raise _Fail(where.fail(f"indices is {type(indices).__qualname__}, not a plain torch.Tensor"))
    if indices.dtype != torch.int64:
        raise _Fail(where.fail(f"indices dtype {indices.dtype} != torch.int64"))
    if indices.device != ref_indices.device or tuple(indices.shape) != tuple(ref_indices.shape):
        raise _Fail(where.fail(f"indices shape/device {tuple(indices.shape)}/{indices.device} != reference "
                               f"{tuple(ref_indices.shape)}/{ref_indices.device}"))
    stats = _closeness(values, ref_values, tol)
    if stats is not None:
        raise _Fail(where.tolerance_fail(stats))
    if x is None or indices.numel() == 0:
        return
    n = x.shape[-1]
    idx = indices.detach()
    out_of_range = int(_count_nonzero(_logical_or(idx < 0, idx >= n)))
    if out_of_range:
        raise _Fail(where.fail(f"topk indices out of range [0,{n}): bad={out_of_range}/{idx.numel()}"))
    srt = _sort(idx, dim=-1).values
    dups = int(_count_nonzero(_eq(srt[..., 1:], srt[..., :-1]))) if idx.shape[-1] > 1 else 0
    if dups:
        raise _Fail(where.fail(f"topk indices repeat within a row: duplicates={dups}"))
    gathered = _gather(x.detach().to(idx.device), -1, idx)
    stats = _closeness(gathered, ref_values, tol)
    if stats is not None:
        raise _Fail(where.fail("topk indices do not select the top values (gathered x[indices]): "
                               + _tolerance_detail(stats)))


# ---------------------------------------------------------------------------------------------
# Raw output records (written in the solution's process, judged in the verifier's)


class OutputRecorder:
    """Writes each graded output as `<key>.out`: one JSON header line, then the raw bytes."""

    def __init__(self, folder: Path) -> None:
        self.folder = _str(folder)

    def record(self, key: str, out: Any) -> None:
        header: dict[str, Any]
        blobs: list[memoryview] = []
        if _type(out) is _Tensor:
            tensors, kind = [out], "tensor"
        elif _type(out) in (tuple, list):
            tensors, kind = list(out), "sequence"
        else:
            tensors, kind = [], "other"
        metas = []
        with _DisableTorchFunction():
            for t in tensors:
                if _type(t) is not _Tensor:
                    kind = "other"
                    break
                flat = _tb_reshape(_tb_contiguous(_tb_to(_tb_detach(t), "cpu")), (-1,))
                # the host copy's own memory, written as is (no second copy: 06's outputs are 0.8-1.1 GB)
                data = _tb_numpy(_tb_view(flat, _uint8)).data if flat.numel() else _EMPTY
                metas.append({"dtype": _str(t.dtype), "shape": [int(d) for d in t.shape], "nbytes": data.nbytes})
                blobs.append(data)
        if kind == "other":
            header = {"kind": "other", "type": f"{_type(out).__module__}.{_type(out).__qualname__}"}
            blobs = []
        else:
            header = {"kind": kind, "tensors": metas}
        fd = _os_open(f"{self.folder}/{key}.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _os_write(fd, (_json_dumps(header) + "\n").encode())
            for view in blobs:
                while view.nbytes:
                    n = _os_write(fd, view)
                    view = view[n:]
        finally:
            _os_close(fd)


def _dtype_named(name: str) -> torch.dtype:
    dt = getattr(torch, name.removeprefix("torch."), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dt


def load_record(path: Path, expect_bytes: int) -> Any:
    """The output a record holds (a tensor, a list of tensors, or a description of what it was)."""
    if not path.is_file():
        raise _Fail(f"no recorded output {path.name}: the solution's process did not write it")
    size = path.stat().st_size
    if size > expect_bytes + (1 << 20):
        raise _Fail(f"recorded output {path.name} is larger than the reference output could be")
    with path.open("rb") as fh:
        head = fh.readline(1 << 20)
        header = json.loads(head)
        if not isinstance(header, dict):  # the solution's process wrote it: anything may be there
            raise _Fail(f"recorded output {path.name} is malformed (its header is not an object)")
        if header.get("kind") == "other":
            return f"<{header.get('type', '?')}>"
        out: list[torch.Tensor] = []
        left = size - len(head)
        for meta in header.get("tensors") or []:
            dt = _dtype_named(str(meta["dtype"]))
            shape = [int(d) for d in meta["shape"]]
            n = int(meta["nbytes"])
            numel = math.prod(shape)
            if n != numel * torch.empty((), dtype=dt).element_size() or n > left:
                raise _Fail(f"recorded output {path.name} is malformed (size does not match dtype x shape)")
            # read straight into the tensor's memory (06's records are 0.8-1.1 GB each)
            flat = torch.empty(n, dtype=torch.uint8)
            if n and fh.readinto(flat.numpy().data) != n:
                raise _Fail(f"recorded output {path.name} is malformed (truncated)")
            left -= n
            out.append(flat.view(dt).reshape(shape) if n else torch.empty(shape, dtype=dt))
        if left != 0 or fh.read(1):
            raise _Fail(f"recorded output {path.name} is malformed (trailing bytes)")
    return out[0] if header.get("kind") == "tensor" and len(out) == 1 else out


def _grid(spec: ProblemSpec, shapes: str, seeds: Sequence[int]) -> list[tuple[int, dict[str, Any], int,
                                                                              StressCase | None]]:
    cases: list[StressCase | None] = [None, *spec.numeric_stress]
    return [(si, shape, seed, case) for si, shape in enumerate(spec.shape_list(shapes)) for seed in seeds
            for case in cases]


REF_SUFFIX = ".ref"  # `<key>.ref.out`: the reference output as the solution's process computed it


def record_key(si: int, seed: int, case: StressCase | None) -> str:
    name = case.name if case else "nominal"
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)
    return f"check_s{si}_seed{seed}_{safe}"


def verify_recorded(problem_dir: Path, record_dir: Path, *, device: str, shapes: str,
                    seeds: Sequence[int] = DEFAULT_SEEDS) -> dict[str, Any]:
    """Trusted side of the check: every case rebuilt from the deck, its reference computed here,
    compared with the raw bytes the solution's process recorded. Never imports the solution."""
    spec = load_problem(Path(problem_dir))
    lines: list[str] = []
    n = 0
    cases: list[StressCase | None] = [None, *spec.numeric_stress]
    try:
        for si, shape in enumerate(spec.shape_list(shapes)):
            spec.apply_shape(shape)
            _stage(f"verify shape {si}")
            # one reference model per shape (seeded with the first seed) and one input draw per
            # (shape, seed), as the solution's process does (_import_and_run); every seed starts
            # from the base state, and a case that scales state gets the base back
            torch.manual_seed(seeds[0])
            init = list(spec.reference.get_init_inputs())
            with spec.draw_context(device):
                ref = spec.model_class(*init).to(device).eval()
            base = {k: v.detach().clone() for k, v in ref.state_dict().items()}
            for seed in seeds:
                _stage(f"verify shape {si} seed {seed}")  # the time from the last stage: the build or a seed's cases
                ref.load_state_dict(base, strict=True)
                draws = _Draws(spec, seed, device)
                for case in cases:
                    name = case.name if case else "nominal"
                    where = _Where(si, shape, seed, name)
                    inputs = draws.take()
                    if case is not None:
                        for pos, factor in case.scale_inputs.items():
                            _scale_(inputs[pos], factor)
                        for sname, factor in case.scale_state.items():
                            _scale_(_state_tensor(ref, sname), factor)
                    x0 = inputs[0].clone() if inputs and isinstance(inputs[0], torch.Tensor) else None
                    with torch.no_grad():
                        ref_out = ref(*inputs)
                    if case is not None and case.scale_state:
                        ref.load_state_dict(base, strict=True)
                    refs = list(ref_out) if isinstance(ref_out, (tuple, list)) else [ref_out]
                    expect = sum(r.numel() * r.element_size() for r in refs if isinstance(r, torch.Tensor))
                    try:
                        got = load_record(Path(record_dir) / f"{record_key(si, seed, case)}.out", expect)
                    except _Fail as f:
                        raise _Fail(where.fail(f.line)) from None
                    except (ValueError, KeyError, TypeError) as exc:
                        raise _Fail(where.fail(f"recorded output unreadable: {_one_line(exc)}")) from None
                    if isinstance(got, str):
                        raise _Fail(where.fail(f"output is {got.strip('<>')}, not a plain torch.Tensor"))
                    got = [g.to(r.device) if isinstance(r, torch.Tensor) else g
                           for g, r in zip(got, refs, strict=False)] if isinstance(got, list) else got.to(ref_out.device)
                    tol = case.tolerance if case else spec.tolerance
                    try:
                        compare_output(got, ref_out, tol, spec.output, where, x0)
                    except _Fail as f:
                        def again(_ref: Any = ref, _inputs: list[Any] = inputs) -> Any:
                            with torch.no_grad():
                                return _ref(*_clone(_inputs))

                        kind = _why_refuted(Path(record_dir) / f"{record_key(si, seed, case)}{REF_SUFFIX}.out",
                                            got, ref_out, refs, expect, tol, spec.output, where, x0, again)
                        return {"passed": False, "lines": [*lines, f.line], "cases": n, "refuted": kind}
                    n += 1
                    del inputs, ref_out, got
                del draws
            del ref, base
    except _Fail as f:
        lines.append(f.line)
        return {"passed": False, "lines": lines, "cases": n}
    lines.append(f"verifier: {n} recorded outputs match the reference (computed without the solution)")
    return {"passed": True, "lines": lines, "cases": n}


# ---------------------------------------------------------------------------------------------
# Model construction, inputs, stress


def _why_refuted(path: Path, got: Any, ref_out: Any, refs: list[Any], expect: int, tol: Tolerance, kind: str,
                 where: _Where, x0: torch.Tensor | None, recompute: Callable[[], Any]) -> str:
    """Why the solution's process said PASS over an output the verifier refutes, read from the
    reference that process recorded for the case (never trusted for the verdict itself).

    Its output out of tolerance of its own reference too: its comparison lied. Its reference out of
    tolerance of the verifier's: something in that process shifted the reference. The two references
    within tolerance of each other: the verifier computes its reference again; a reference that
    reproduces bit for bit here was still different there (a small deliberate shift, which let a
    marginal output through), and only one that does not reproduce is unstable."""
    try:
        theirs = load_record(path, expect)
    except (_Fail, ValueError, KeyError, TypeError, OSError):
        return REFUTED_UNEXPLAINED
    if isinstance(theirs, str):
        return REFUTED_UNEXPLAINED
    theirs = [t.to(r.device) if isinstance(r, torch.Tensor) else t for t, r in zip(theirs, refs, strict=False)] \
        if isinstance(theirs, list) else theirs.to(ref_out.device)
    try:
        compare_output(got, theirs, tol, kind, where, x0)
    except _Fail:
        return REFUTED_FORGED  # its own reference refutes the output too: its comparison lied
    try:
        compare_output(theirs, ref_out, tol, "tensor" if kind != "topk" else kind, where, x0)
    except _Fail:
        return REFUTED_REF_SHIFT  # something in that process changed what the reference computes
    if _bit_equal(recompute(), ref_out):
        return REFUTED_REF_SHIFT
    return REFUTED_UNSTABLE


def _bit_equal(a: Any, b: Any) -> bool:
    xs = list(a) if isinstance(a, (tuple, list)) else [a]
    ys = list(b) if isinstance(b, (tuple, list)) else [b]
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys, strict=True):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype:
                return False
            bx = x.contiguous().view(torch.uint8) if x.numel() else x
            by = y.contiguous().view(torch.uint8) if y.numel() else y
            if not torch.equal(bx, by):
                return False
        elif x != y:
            return False
    return True


def _to_device(inputs: Sequence[Any], device: str) -> list[Any]:
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def _clone(inputs: Sequence[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _scale_(t: torch.Tensor, factor: float) -> None:
    """In-place scale; fp8/int tensors go through a float round trip (same storage kept)."""
    with torch.no_grad():
        if t.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            t.mul_(factor)
        else:
            t.copy_((t.to(torch.float32) * factor).to(t.dtype))


def _state_tensor(model: torch.nn.Module, name: str) -> torch.Tensor:
    state = model.state_dict(keep_vars=True)
    if name not in state:
        raise KeyError(name)
    return state[name]


def _model_inputs(spec: ProblemSpec, seed: int, device: str) -> list[Any]:
    torch.manual_seed(seed)
    with spec.draw_context(device):
        inputs = list(spec.reference.get_inputs())
    return _to_device(inputs, device)


def _rng_state() -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    return torch.get_rng_state(), cuda


def _set_rng_state(state: tuple[torch.Tensor, list[torch.Tensor] | None]) -> None:
    torch.set_rng_state(state[0])
    if state[1] is not None:
        torch.cuda.set_rng_state_all(state[1])


def _clone_keeps_layout(t: torch.Tensor) -> bool:
    """A clone is the same tensor as a fresh draw: same strides, offset 0, storage exactly its data
    (a drawn view into a larger buffer, or an expanded tensor, is not cloned that way)."""
    return (t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size()
            and t.clone().stride() == t.stride())


class _Draws:
    """The inputs of one (shape, seed), drawn from the deck once.

    Every case of that (shape, seed) used to redraw them from the reseeded generator, which gives
    the same values each time and is the dominant cost where a deck draws big inputs on the CPU
    (a KBH deck, as its check.py does). `take()` gives each case a fresh clone of the pristine
    draw AND leaves the global generators where a fresh draw would have left them, so whatever the
    solution or the reference draws afterwards is bit for bit what it was. Inputs whose layout a
    clone would not keep (views into larger buffers) are redrawn per case, as before."""

    def __init__(self, spec: ProblemSpec, seed: int, device: str) -> None:
        self.spec, self.seed, self.device = spec, seed, device
        self.pristine: list[Any] | None = _model_inputs(spec, seed, device)
        self.rng = _rng_state()
        if not all(_clone_keeps_layout(x) for x in self.pristine if isinstance(x, torch.Tensor)):
            self.pristine = None

    def take(self) -> list[Any]:
        if self.pristine is None:
            return _model_inputs(self.spec, self.seed, self.device)
        _set_rng_state(self.rng)
        return _clone(self.pristine)



@contextlib.contextmanager
def _solution_stdout() -> Any:
    """The solution's prints go to stderr: check.log holds only the grader's lines."""
    with contextlib.redirect_stdout(sys.stderr):
        yield


def _check_modes(where: _Where) -> None:
    if _fn_stack_len() or _dispatch_stack_len():
        raise _Fail(where.fail("grader tampering: a torch function/dispatch mode is still active after the solution ran"))
    if _INTEGRITY:
        bad = _INTEGRITY[-1].changed()
        if bad:
            raise _Fail(where.fail(f"grader tampering: the solution rebound grader code: {', '.join(bad[:5])}"))


def _build_key(spec: ProblemSpec, init: Sequence[Any], seed: int) -> str:
    """What a reference Model's weights (or a deck's inputs) depend on: the constructor arguments,
    the shape globals set on the reference module, the seed."""
    keys = sorted({k for shape in spec.shapes for k in shape})
    shape = [(k, getattr(spec.reference, spec.shape_attrs.get(k, k), None)) for k in keys]
    return repr((list(init), shape, seed))


class _Runner:
    def __init__(self, spec: ProblemSpec, sol_model: type, device: str) -> None:
        self.spec = spec
        self.sol_model = sol_model
        self.device = device
        # every solution call comes from a frame of the deck's check.py, as under the real grader
        self.via = trampoline(script_path(getattr(spec, "problem_dir", None), "check.py"))
        # The last reference model built (with its base state) and the kept draw of one seed per
        # shape: the recorded pass, the shape's own cases and its repeat/overwrite stage all use
        # the same (shape, first seed), and a KBH deck draws those gigabytes on the CPU generator
        # (06: 1.6 G weights and 1.07 G input elements per build and draw, tens of seconds each).
        # One entry of each, so at most one shape's reference and inputs stay resident.
        self._ref: tuple[str, torch.nn.Module, dict[str, torch.Tensor]] | None = None
        self._kept: tuple[str, _Draws] | None = None

    def reference(self, seed: int) -> tuple[torch.nn.Module, dict[str, torch.Tensor], list[Any]]:
        """The reference Model of the shape now applied at `seed`, in its base state, with that base
        state and the constructor arguments; built once per (shape, seed) in a row, else restored."""
        spec = self.spec
        torch.manual_seed(seed)
        init = list(spec.reference.get_init_inputs())
        key = _build_key(spec, init, seed)
        if self._ref is not None and self._ref[0] == key:
            _, ref, base = self._ref
            ref.load_state_dict(base, strict=True)  # back to the base state (a stress case scaled it)
            return ref, base, init
        self._ref = None  # the previous shape's model goes before this one is built
        with spec.draw_context(self.device):
            ref = spec.model_class(*init).to(self.device).eval()
        base = {k: v.detach().clone() for k, v in ref.state_dict().items()}
        self._ref = (key, ref, base)
        return ref, base, init

    def draws(self, seed: int, keep: bool = False) -> _Draws:
        """The deck's inputs of the shape now applied at `seed` (`keep`: reused by the next call
        for the same shape and seed; one kept at a time)."""
        if not keep:
            return _Draws(self.spec, seed, self.device)
        torch.manual_seed(seed)
        key = _build_key(self.spec, list(self.spec.reference.get_init_inputs()), seed)
        if self._kept is not None and self._kept[0] == key:
            return self._kept[1]
        self._kept = None
        draws = _Draws(self.spec, seed, self.device)
        self._kept = (key, draws)
        return draws

    @property
    def base(self) -> dict[str, torch.Tensor]:
        """The base state of the reference last built or restored."""
        assert self._ref is not None
        return self._ref[2]

    def build(self, shape_index: int, seed: int, where: _Where) -> tuple[torch.nn.Module, torch.nn.Module]:
        ref, _base, init = self.reference(seed)
        torch.manual_seed(seed)
        try:
            with _solution_stdout():
                sol = build_solution_model(self.sol_model, init, self.device)
        except BaseException as exc:  # SystemExit from the solution too
            _log_whole(exc)
            raise _Fail(where.fail(f"runtime error: Model construction: {_one_line(exc)}")) from None
        try:
            with _solution_stdout():
                sol.load_state_dict(ref.state_dict(), strict=True)
        except BaseException as exc:  # SystemExit from the solution too
            raise _Fail(check_fail_line("state_dict_mismatch", shape=shape_index, detail=_one_line(exc))) from None
        return ref, sol

    def restore(self, ref: torch.nn.Module, sol: torch.nn.Module, base: dict[str, torch.Tensor]) -> None:
        """Both models back to the base state (a version-bumping write, as the deck's grader makes)."""
        ref.load_state_dict(base, strict=True)
        with _solution_stdout():
            sol.load_state_dict(base, strict=True)

    def run_pair(
        self, ref: torch.nn.Module, sol: torch.nn.Module, inputs: list[Any], where: _Where,
        record: Callable[[Any], None] | None = None, record_ref: Callable[[Any], None] | None = None,
    ) -> tuple[Any, Any, torch.Tensor | None]:
        ref_inputs = _clone(inputs)
        x0 = ref_inputs[0].clone() if ref_inputs and isinstance(ref_inputs[0], torch.Tensor) else None
        # the solution runs (and its output is recorded) before this case's reference output
        # exists in this process: nothing it could find in memory is the answer
        out = self.call(sol, inputs, where)
        if record is not None:
            record(out)
        with torch.no_grad():
            ref_out = ref(*ref_inputs)
        if record_ref is not None:
            # the reference as THIS process computed it: not trusted for the verdict (the verifier
            # computes its own), only to tell why the two processes disagree (verify_recorded)
            record_ref(ref_out)
        return out, ref_out, x0

    def call(self, sol: torch.nn.Module, inputs: list[Any], where: _Where) -> Any:
        try:
            if self.device.startswith("cuda"):
                # Every input is fully written when the solution gets it, as a deck's grader hands
                # inputs over (a blocking host-to-device copy; a reference call that syncs). The
                # case's clones and in-place rewrites are queued on the current stream; a solution
                # that reads them from its own stream without waiting would otherwise race them
                # (seen: a real clean paged-attention run whose capture launch uses a pool stream).
                torch.cuda.synchronize()
            with torch.no_grad(), _solution_stdout():
                out = self.via(sol, inputs)
            if self.device.startswith("cuda"):
                torch.cuda.synchronize()
        except BaseException as exc:  # SystemExit from the solution too
            raise _Fail(where.fail(f"runtime error: {_one_line(exc)}")) from None
        _check_modes(where)
        return out

    def scale_case(
        self, ref: torch.nn.Module, sol: torch.nn.Module, inputs: list[Any], case: StressCase, where: _Where
    ) -> None:
        for pos, factor in case.scale_inputs.items():
            if pos >= len(inputs) or not isinstance(inputs[pos], torch.Tensor):
                raise _Fail(where.fail(f"stress case {case.name}: no tensor input at position {pos}"))
            _scale_(inputs[pos], factor)
        for name, factor in case.scale_state.items():
            try:
                _scale_(_state_tensor(ref, name), factor)
                with _solution_stdout():
                    _scale_(_state_tensor(sol, name), factor)
            except KeyError:
                raise _Fail(where.fail(f"stress case {case.name}: no state entry {name!r}")) from None


def _recorded_pass(
    runner: _Runner, shape: dict[str, Any], seed: int, record: RuntimeRecord, forbidden: list[str]
) -> str | None:
    """One small nominal case with every dispatched op recorded (also checked for correctness).

    Returns an error note when the solution raised only while the recorder was active (some
    compilers refuse to run under a Python dispatch mode): the case is then re-run without the
    recorder, so an honest solution is not failed by the instrument, and the note goes to the log.
    """
    spec = runner.spec
    where = _Where(0, shape, seed, "recorded")
    spec.apply_shape(shape)
    ref, _base, init = runner.reference(seed)
    inputs = runner.draws(seed, keep=True).take()
    ref_inputs = _clone(inputs)
    with torch.no_grad():
        ref_out = ref(*ref_inputs)
    note: str | None = None
    out: Any = None
    torch.manual_seed(seed)
    try:
        with record_ops(record):
            with _solution_stdout():
                sol = runner.sol_model(*init).to(runner.device).eval()
            try:
                with _solution_stdout():
                    sol.load_state_dict(ref.state_dict(), strict=True)
            except BaseException as exc:  # SystemExit from the solution too
                raise _Fail(check_fail_line("state_dict_mismatch", shape=0, detail=_one_line(exc))) from None
            if runner.device.startswith("cuda"):
                torch.cuda.synchronize()  # inputs fully written before the solution reads them (_Runner.call)
            with torch.no_grad(), _solution_stdout():
                out = runner.via(sol, inputs)
            if runner.device.startswith("cuda"):
                torch.cuda.synchronize()
    except _Fail:
        raise
    except BaseException as exc:  # SystemExit from the solution too
        if forbidden and runtime_hits(record, forbidden):
            return None  # the forbidden op is the finding; the caller reports it
        # the re-run may only see this failure's leftovers (torch's JIT does not rebuild a failed
        # extension in the same process): its whole text is kept
        _log_whole(exc)
        note = f"runtime_recorder: error under the recorder ({_one_line(exc)}); case re-run without it"
        torch.manual_seed(seed)
        ref, sol = runner.build(0, seed, where)
        inputs = runner.draws(seed, keep=True).take()
        out = runner.call(sol, inputs, where)
    if forbidden and runtime_hits(record, forbidden):
        return note
    compare_output(out, ref_out, spec.tolerance, spec.output, where, ref_inputs[0] if ref_inputs else None)
    return note


def _property_case(spec: ProblemSpec, seed: int, small: bool) -> tuple[dict[str, Any], list[Any]]:
    fn = spec.reference.make_property_case
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}  # type: ignore[assignment]
    if "small" in params:
        shape, inputs = fn(seed, small=small)
    else:
        shape, inputs = fn(seed)
    return dict(shape), list(inputs)


# ---------------------------------------------------------------------------------------------
# Entry


def run_check(
    solution: Path,
    problem_dir: Path,
    *,
    device: str,
    shapes: str,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    emit: Callable[[str], None] = print,
    property_seed: int | None = None,
    enforce_forbidden: bool = True,
    record_dir: Path | None = None,
) -> CheckOutcome:
    """Check `solution` against the deck problem at `problem_dir`; every line goes to `emit`.

    `seeds` exists for fast CPU tests only; the CLI and the regrade never pass it.
    `enforce_forbidden=False` exists only for the deck self-test (the reference itself calls the
    ops its problem forbids, e.g. torch.topk); it is not reachable from any CLI flag.
    """
    folder = str(Path(solution).resolve().parent)
    # The solution's folder stays importable for the whole check (sidecars imported lazily in
    # forward), and its modules are dropped afterwards so a later check in this process starts clean.
    sys.path.insert(0, folder)
    try:
        # import and every call as under the deck's check.py (sys.argv, the caller's frame): graders.callsite
        with as_script(problem_dir, "check.py"):
            return _run_check(solution, problem_dir, device=device, shapes=shapes, seeds=seeds, emit=emit,
                              property_seed=property_seed, enforce_forbidden=enforce_forbidden,
                              record_dir=record_dir)
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
        for name, mod in list(sys.modules.items()):
            f = getattr(mod, "__file__", None) or ""
            if f and os.path.dirname(os.path.abspath(f)).startswith(folder):
                sys.modules.pop(name, None)


def _run_check(
    solution: Path,
    problem_dir: Path,
    *,
    device: str,
    shapes: str,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    emit: Callable[[str], None] = print,
    property_seed: int | None = None,
    enforce_forbidden: bool = True,
    record_dir: Path | None = None,
) -> CheckOutcome:
    lines: list[str] = []

    def out(line: str) -> None:
        lines.append(line)
        emit(line)

    solution = Path(solution).resolve()
    smoke = not device.startswith("cuda")
    if smoke:
        interp_fixes.use_interpreter()  # before the first @triton.jit the solution evaluates
    spec = load_problem(Path(problem_dir))  # trusted config, read before any solution code
    empty = FrameworkReport(framework="unknown")
    outcome = CheckOutcome(False, lines, empty, set(), smoke=smoke)
    if smoke:
        out(SMOKE_LINE)
    spec.shape_list(shapes)  # an unknown shape-set name fails before anything runs
    pseed: int | None = None
    if spec.has_property_cases:
        pseed = property_seed if property_seed is not None else secrets.randbelow(2**31)
        out(property_seed_line(pseed))
    outcome.property_seed = pseed

    # -- static, before any solution code runs ------------------------------------------------
    if not solution.is_file():
        out(check_fail_line("solution_import_error", error=f"FileNotFoundError: {solution.name} not found"))
        return outcome
    sources = collect_sources(solution)
    outcome.sources = sorted(sources)
    fw = detect(sources)
    outcome.framework = fw
    out(fw.log_line())
    why = gate(fw, spec.required_framework)
    if why:
        out(f"FAIL: framework not allowed: {why}")
        return outcome
    forbidden_list = spec.forbidden if enforce_forbidden else []
    hits = scan(sources, forbidden_list)
    if hits:
        outcome.forbidden = hits
        out(f"forbidden_evidence: {hits[0].describe()}")
        out(check_fail_line("forbidden_op", op=hits[0].op))
        return outcome

    # -- import -------------------------------------------------------------------------------
    integrity = _GraderIntegrity()
    _INTEGRITY.append(integrity)
    try:
        recorder = OutputRecorder(Path(record_dir)) if record_dir is not None else None
        return _import_and_run(solution, spec, device, shapes, seeds, pseed, forbidden_list, sources,
                               outcome, out, smoke, recorder)
    finally:
        _INTEGRITY.remove(integrity)
        integrity.restore()


def _import_and_run(
    solution: Path,
    spec: ProblemSpec,
    device: str,
    shapes: str,
    seeds: Sequence[int],
    pseed: int | None,
    forbidden_list: list[str],
    sources: dict[str, str],
    outcome: CheckOutcome,
    out: Callable[[str], None],
    smoke: bool,
    recorder: OutputRecorder | None = None,
) -> CheckOutcome:
    shape_list = spec.shape_list(shapes)
    from graders import kbh_property

    try:  # a KBH deck's own property cases: generated before the solution is imported, as its check.py does
        kbh_plan = kbh_property.plan(spec)
    except Exception as exc:
        out(f"FAIL: grader error: property stress unavailable: {_one_line(exc)}")
        return outcome
    before = set(sys.modules)
    try:
        with _solution_stdout():
            module = import_isolated(solution, "solution")
    except BaseException as exc:  # SystemExit/KeyboardInterrupt from import are failures too
        if isinstance(exc, KeyboardInterrupt):
            raise
        out(check_fail_line("solution_import_error", error=_one_line(exc)))
        return outcome
    imported = set(sys.modules) - before
    sol_model = getattr(module, "Model", None)
    if not isinstance(sol_model, type):
        out(check_fail_line("solution_import_error", error="solution.py defines no class Model"))
        return outcome
    runner = _Runner(spec, sol_model, device)

    try:
        # -- runtime recorder pass ------------------------------------------------------------
        _stage("recorded pass")
        record = RuntimeRecord(modules=set(imported))
        small = spec.shape_list("small")[0]
        note = _recorded_pass(runner, small, seeds[0], record, forbidden_list)
        if note:
            out(note)
        outcome.dispatched_ops = record.dispatched()
        # Sidecars imported at run time that the static walk missed are scanned too.
        module_files = [str(getattr(sys.modules.get(m), "__file__", "") or "") for m in record.modules]
        added = add_loaded_modules(sources, solution.parent, module_files)
        late = scan({k: sources[k] for k in added}, forbidden_list) if added else []
        rhits = late + runtime_hits(record, forbidden_list)
        if rhits:
            outcome.forbidden = rhits
            out(f"forbidden_evidence: {rhits[0].describe()}")
            raise _Fail(check_fail_line("forbidden_op", op=rhits[0].op))

        # -- shapes x seeds x (nominal + stress), then that shape's repeated calls and overwrites --
        cases: list[StressCase | None] = [None, *spec.numeric_stress]
        # repeated calls and in-place overwrites keeping the data pointer: on a GPU at every
        # graded shape (a benchmark-aware cache may key on the big shapes); under the CPU
        # interpreter at the cheapest shape only. Each right after its shape's cases, so that
        # shape's reference and first-seed inputs are reused, not drawn again.
        if smoke:
            repeat_at = set(sorted(range(len(shape_list)), key=lambda i: spec.bytes(shape_list[i]))[:1])
        else:
            repeat_at = set(range(len(shape_list)))
        for si, shape in enumerate(shape_list):
            spec.apply_shape(shape)
            _stage(f"shape {si}")
            # one model pair per shape, as the deck's own check.py builds them (a KBH deck's 06
            # draws gigabytes of expert weights on the CPU per build), seeded with the first seed
            # so the verifier rebuilds the same weights; every seed starts from the base state
            ref, sol = runner.build(si, seeds[0], _Where(si, shape, seeds[0], "nominal"))
            base = runner.base
            for seed in seeds:
                _stage(f"shape {si} seed {seed}")  # the time from the last stage: the build or a seed's cases
                if seed != seeds[0]:
                    runner.restore(ref, sol, base)
                draws = runner.draws(seed, keep=seed == seeds[0])
                for case in cases:
                    name = case.name if case else "nominal"
                    where = _Where(si, shape, seed, name)
                    if case is not None and case.scale_state:
                        runner.restore(ref, sol, base)
                    inputs = draws.take()
                    if case is not None:
                        runner.scale_case(ref, sol, inputs, case, where)
                    key = record_key(si, seed, case)
                    rec = (lambda o, _k=key: recorder.record(_k, o)) if recorder is not None else None  # type: ignore[union-attr]
                    rec_ref = (lambda o, _k=key: recorder.record(f"{_k}{REF_SUFFIX}", o)) \
                        if recorder is not None else None  # type: ignore[union-attr]
                    o, r, x0 = runner.run_pair(ref, sol, inputs, where, rec, rec_ref)
                    compare_output(o, r, case.tolerance if case else spec.tolerance, spec.output, where, x0)
                    if case is not None and case.scale_state:
                        runner.restore(ref, sol, base)
                del draws
            del sol
            if si in repeat_at:
                _stage(f"repeat and overwrite shape {si}")
                _repeat_and_overwrite(runner, si, shape, seeds[0])
            del ref, base

        # -- property plan ----------------------------------------------------------------------
        if spec.has_property_cases and pseed is not None:
            _stage("property plan")
            rng = random.Random(pseed)
            for j in range(spec.property_cases):
                cseed = rng.randrange(2**31)
                pshape, pinputs = _property_case(spec, cseed, small=(shapes == "small"))
                spec.apply_shape(pshape)
                where = _Where(j, pshape, cseed, f"property_{j}", prop=True)
                ref, sol = runner.build(j, cseed, where)
                o, r, x0 = runner.run_pair(ref, sol, _to_device(pinputs, device), where)
                compare_output(o, r, spec.tolerance, spec.output, where, x0)

        if kbh_plan is not None:
            _stage("kbh property stress")
            psi = spec.kbh_property_shape or 0
            pwhere = _Where(psi, spec.shapes[psi], kbh_property.PROPERTY_SEED, "kbh_property", prop=True)
            why = kbh_property.run(spec, kbh_plan, lambda i: runner.build(i, seeds[0], pwhere), device)
            if why is not None:
                raise _Fail(pwhere.fail(why))

    except _Fail as f:
        out(f.line)
        return outcome
    except (SystemExit, KeyboardInterrupt, GeneratorExit) as exc:  # only solution code raises these here
        out(f"FAIL: runtime error: {_one_line(exc)}")
        return outcome
    except Exception as exc:  # the reference or the grader itself failed: never a PASS, and said so
        out(f"FAIL: grader error: {_one_line(exc)}")
        return outcome

    bad = _INTEGRITY[-1].changed() if _INTEGRITY else []
    if bad:
        out(f"FAIL: grader tampering: the solution rebound grader code: {', '.join(bad[:5])}")
        return outcome
    out(check_pass_line())
    outcome.passed = True
    return outcome


def _repeat_and_overwrite(runner: _Runner, si: int, shape: dict[str, Any], seed: int) -> None:
    spec = runner.spec
    spec.apply_shape(shape)
    where = _Where(si, shape, seed, "repeat_call", prop=True)
    ref, sol = runner.build(si, seed, where)
    inputs = runner.draws(seed, keep=True).take()
    ref_inputs = _clone(inputs)
    with torch.no_grad():
        ref_out = ref(*ref_inputs)
    x0 = ref_inputs[0] if ref_inputs and isinstance(ref_inputs[0], torch.Tensor) else None
    for i in range(REPEAT_CALLS):
        w = _Where(si, shape, seed, f"repeat_call_{i + 1}", prop=True)
        compare_output(runner.call(sol, inputs, w), ref_out, spec.tolerance, spec.output, w, x0)

    float_positions = [
        i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.dtype.is_floating_point
    ]
    if not float_positions:
        return
    variants = [("overwrite_inplace", seed + 1)]
    if spec.raw_input_rewrites_in_contract:
        # behind the version counter only where the deck's own grader does it (see ProblemSpec);
        # elsewhere the same_storage_overwrite probe reports a version-keyed cache as FLAGGED
        variants.append(("overwrite_inplace_same_version", seed + 2))
    for variant, new_seed in variants:
        # kaudit's own rewrite, not a draw the deck's grader makes: on the device where the deck's
        # get_inputs() allows it (a KBH deck draws on the CPU generator: 1 G elements at 06)
        fresh = fresh_inputs(spec, shape, new_seed, runner.device)
        w = _Where(si, shape, seed, variant, prop=True)
        for i in float_positions:
            x = inputs[i]
            ptr, version = x.data_ptr(), x._version
            with torch.no_grad():
                if variant == "overwrite_inplace":
                    x.copy_(fresh[i])
                else:
                    # Through .data: same storage, same data_ptr, the version counter does NOT move:
                    # a cache keyed on (data_ptr, _version) is fooled, a live kernel is not.
                    x.data.copy_(fresh[i])
            if x.data_ptr() != ptr:
                raise _Fail(w.fail("grader error: overwrite moved the input"))
            if variant != "overwrite_inplace" and x._version != version:
                raise _Fail(w.fail("grader error: overwrite bumped the version counter"))
        ref_inputs = _clone(inputs)
        with torch.no_grad():
            ref_out = ref(*ref_inputs)
        x0 = ref_inputs[0] if isinstance(ref_inputs[0], torch.Tensor) else None
        compare_output(runner.call(sol, inputs, w), ref_out, spec.tolerance, spec.output, w, x0)
