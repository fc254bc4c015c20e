"""A KBH deck's property stress, run by its registered harness inside kaudit's hardened check.

The harness's check.py generates the Hypothesis cases BEFORE importing solution.py (so the solution
cannot steer them), then, at `property_shape_index(name)`, calls check_tensor_properties (or
check_topk_properties for top-k) on freshly built models with inputs drawn under seed 0xC0DE, with
`tolerance_for_property(name, tolerance)`. kaudit does the same calls, in the same order, through
the same functions: nothing of the harness is restated here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from graders.problem import ProblemSpec

PROPERTY_SEED = 0xC0DE


def plan(spec: ProblemSpec) -> tuple[Any, ...] | None:
    """The property cases for this problem (generated now, before the solution is imported);
    None when the deck has no property stress for it."""
    if spec.schema != "kbh" or spec.kbh_property_shape is None or spec.harness_dir is None:
        return None
    from graders.kbh import harness_imports, load_harness

    harness = load_harness(spec.harness_dir)
    if harness.property_stress is None:
        raise RuntimeError(harness.property_error or "the harness has no property_stress module")
    harness_dir = spec.harness_dir
    if harness_dir is None:
        raise ValueError(f"{spec.id}: property stress needs the deck's registered harness")
    with harness_imports(harness_dir):
        _, cases = harness.property_stress.generate_property_cases(spec.id)
    return (harness, tuple(cases))


def run(spec: ProblemSpec, planned: tuple[Any, ...], build: Callable[[int], tuple[Any, Any]],
        device: str) -> str | None:
    """Run the planned cases; None when they pass, else the harness's failure message."""
    import torch

    from graders.kbh import harness_imports

    harness, cases = planned
    si = spec.kbh_property_shape
    assert si is not None
    shape = spec.shapes[si]
    spec.apply_shape(shape)
    ref, sol = build(si)
    torch.manual_seed(PROPERTY_SEED)
    if device.startswith("cuda"):
        torch.cuda.manual_seed_all(PROPERTY_SEED)
    base = [v.to(device) if isinstance(v, torch.Tensor) else v for v in spec.reference.get_inputs()]
    ps = harness.property_stress
    tol = ps.tolerance_for_property(spec.id, spec.raw.get("tolerance") or None)
    harness_dir = spec.harness_dir
    if harness_dir is None:
        raise ValueError(f"{spec.id}: property stress needs the deck's registered harness")
    with harness_imports(harness_dir):
        try:
            if spec.output == "topk":
                ps.check_topk_properties(ref, sol, base, k=shape["k"], tolerance=tol, cases=cases)
            else:
                ps.check_tensor_properties(spec.id, ref, sol, base, tolerance=tol, cases=cases)
        except Exception as exc:  # the harness reports a failing case by raising
            return f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
    return None
