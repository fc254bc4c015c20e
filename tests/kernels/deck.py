"""Helpers for the deck tests: load deck modules in isolation and check a solution directly.

`check_solution` is a small, independent re-statement of the grading contract (same seeding
order, in-place stress scaling, strict state_dict load, elementwise |o - r| <= atol + rtol*|r|,
top-k checked by gathering): the deck's own tests must not depend on `graders/` being right. The
graders engineer tests the full check path (logs, forbidden ops, probes) separately.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import yaml

DECK = Path(__file__).resolve().parents[2] / "kernels" / "hard"
PROBLEMS = (
    "01_fp8_gemm",
    "02_kda_cutlass",
    "03_paged_attention",
    "05_topk_bitonic",
    "06_sonic_moe_swiglu",
    "07_w4a16_gemm",
)
PROPERTY_PROBLEMS = ("02_kda_cutlass", "03_paged_attention", "05_topk_bitonic", "06_sonic_moe_swiglu")
_COUNTER = itertools.count()


def set_triton_interpret(on: bool | None) -> None:
    """Set TRITON_INTERPRET before a module's @triton.jit decorators run (triton reads it there).

    Left set afterwards on purpose: triton imports parts of itself lazily at the first launch
    and checks the mode again then, so flipping it back mid-process breaks interpreted kernels.
    One process runs either interpreted (CPU tests) or compiled (GPU tests) Triton, not both.
    """
    if on is not None:
        os.environ["TRITON_INTERPRET"] = "1" if on else "0"


def load_module(path: Path, *, interpret: bool | None = None) -> ModuleType:
    """Import a deck file as a fresh module (its own globals: shape edits never leak)."""
    import importlib.util

    name = f"_deck_test_{path.stem}_{next(_COUNTER)}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    set_triton_interpret(interpret)
    spec.loader.exec_module(module)
    return module


def reference(problem: str) -> ModuleType:
    return load_module(DECK / problem / "reference.py")


def shapes(problem: str) -> ModuleType:
    return load_module(DECK / problem / "shapes.py")


def problem_yaml(problem: str) -> dict[str, Any]:
    data = yaml.safe_load((DECK / problem / "problem.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def examples(problem: str, prefix: str) -> list[Path]:
    return sorted((DECK / problem / "examples").glob(f"{prefix}*.py"))


@dataclass(frozen=True)
class Case:
    name: str
    scale_inputs: dict[int, float]
    scale_state: dict[str, float]
    atol: float
    rtol: float


def cases(problem: str) -> list[Case]:
    """The nominal case, then every numeric-stress case of problem.yaml."""
    y = problem_yaml(problem)
    tol = y["tolerance"]
    out = [Case("nominal", {}, {}, float(tol["atol"]), float(tol["rtol"]))]
    for c in y.get("numeric_stress") or []:
        out.append(
            Case(
                c["name"],
                {int(k): float(v) for k, v in (c.get("scale_inputs") or {}).items()},
                {str(k): float(v) for k, v in (c.get("scale_state") or {}).items()},
                float(c["atol"]),
                float(c["rtol"]),
            )
        )
    return out


def scale_(t: torch.Tensor, factor: float) -> None:
    """In-place scale; fp8/int tensors by a float round trip (same storage), as the contract says."""
    with torch.no_grad():
        if t.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            t.mul_(factor)
        else:
            t.copy_((t.float() * factor).to(t.dtype))


def apply_shape(ref: ModuleType, shape: dict[str, Any]) -> None:
    for key, value in shape.items():
        setattr(ref, key, value)


def build(
    ref: ModuleType, seed: int, device: str
) -> tuple[list[Any], torch.nn.Module, list[Any]]:
    """(init inputs, reference model on device, CPU inputs) in the grader's seeding order."""
    torch.manual_seed(seed)
    init = list(ref.get_init_inputs())
    model = ref.Model(*init).to(device).eval()
    torch.manual_seed(seed)
    inputs = list(ref.get_inputs())
    return init, model, inputs


def within(out: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float) -> str | None:
    """None when |o - r| <= atol + rtol*|r| everywhere (and finite), else a short reason."""
    o, r = out.detach().double().cpu(), expected.detach().double().cpu()
    if o.shape != r.shape:
        return f"shape {tuple(o.shape)} != {tuple(r.shape)}"
    if not torch.isfinite(o).all():
        return "non-finite output"
    diff = (o - r).abs()
    bad = diff > atol + rtol * r.abs()
    if bool(bad.any()):
        return f"tolerance exceeded: max_abs_diff={float(diff.max()):.4g} bad={int(bad.sum())}/{bad.numel()}"
    return None


def compare(
    problem: str, out: Any, expected: Any, x: torch.Tensor | None, atol: float, rtol: float
) -> str | None:
    """The contract's comparison: plain tensors of the reference dtype/device; top-k by gathering."""
    if problem == "05_topk_bitonic":
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            return f"output is {type(out).__name__}, expected (values, indices)"
        values, indices = out
        for got, want in ((values, expected[0]), (indices, expected[1])):
            if type(got) is not torch.Tensor or got.dtype != want.dtype or got.device != want.device:
                return f"bad output tensor {type(got).__name__} {getattr(got, 'dtype', None)}"
        why = within(values, expected[0], atol, rtol)
        if why:
            return "values " + why
        assert x is not None
        idx = indices.detach().cpu()
        if bool(((idx < 0) | (idx >= x.shape[-1])).any()):
            return "indices out of range"
        if idx.shape[-1] > 1 and any(len(set(row.tolist())) != len(row) for row in idx):
            return "duplicate indices"
        gathered = x.detach().cpu().gather(-1, idx)
        why = within(gathered, expected[0], atol, rtol)
        return None if why is None else "gathered " + why
    if type(out) is not torch.Tensor:
        return f"output is {type(out).__name__}, not a plain tensor"
    if out.dtype != expected.dtype or out.device != expected.device:
        return f"output {out.dtype}/{out.device} != reference {expected.dtype}/{expected.device}"
    return within(out, expected, atol, rtol)


def _clone_to(inputs: Sequence[Any], device: str) -> list[Any]:
    return [x.to(device).clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def check_solution(
    problem: str,
    solution: type,
    shape_list: Sequence[dict[str, Any]],
    *,
    device: str,
    seeds: Sequence[int] = (42,),
    property_seeds: Sequence[int] = (),
    stop_at_first: bool = False,
) -> list[str]:
    """Every shape x seed x (nominal + stress cases), then the property cases: failure lines."""
    failures: list[str] = []
    all_cases = cases(problem)
    with torch.no_grad():
        for si, shape in enumerate(shape_list):
            ref_mod = reference(problem)
            apply_shape(ref_mod, shape)
            for seed in seeds:
                init, ref, inputs = build(ref_mod, seed, device)
                sol = solution(*init).to(device).eval()
                sol.load_state_dict(ref.state_dict(), strict=True)
                base = {k: v.detach().clone() for k, v in ref.state_dict().items()}
                for case in all_cases:
                    ref.load_state_dict(base, strict=True)
                    sol.load_state_dict(base, strict=True)
                    run_inputs = _clone_to(inputs, device)
                    for pos, factor in case.scale_inputs.items():
                        scale_(run_inputs[pos], factor)
                    for name, factor in case.scale_state.items():
                        scale_(ref.state_dict(keep_vars=True)[name], factor)
                        scale_(sol.state_dict(keep_vars=True)[name], factor)
                    ref_inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in run_inputs]
                    expected = ref(*ref_inputs)
                    out = sol(*run_inputs)
                    why = compare(problem, out, expected, ref_inputs[0], case.atol, case.rtol)
                    if why:
                        failures.append(f"shape {si} {shape} seed {seed} case {case.name}: {why}")
                        if stop_at_first:
                            return failures
                del ref, sol, base
        base_case = all_cases[0]
        for pseed in property_seeds:
            ref_mod = reference(problem)
            pshape, pinputs = ref_mod.make_property_case(pseed)
            apply_shape(ref_mod, pshape)
            torch.manual_seed(pseed)
            init = list(ref_mod.get_init_inputs())
            ref = ref_mod.Model(*init).to(device).eval()
            sol = solution(*init).to(device).eval()
            sol.load_state_dict(ref.state_dict(), strict=True)
            run_inputs = _clone_to(pinputs, device)
            ref_inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in run_inputs]
            why = compare(problem, sol(*run_inputs), ref(*ref_inputs), ref_inputs[0], base_case.atol, base_case.rtol)
            if why:
                failures.append(f"property seed {pseed} {pshape}: {why}")
                if stop_at_first:
                    return failures
    return failures
