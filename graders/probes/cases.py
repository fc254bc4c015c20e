"""Deterministic probe cases shared by the untrusted runner and the trusted verifier.

Both sides rebuild the same case from (problem, shape, seed, device) and apply the same mutation
plan (pure data: which input, which rows/positions, which RNG seed, bump the version counter or
not), so the trusted side never has to believe inputs the solution's process hands back: it only
loads the solution's OUTPUTS (plain tensors, `torch.load(weights_only=True)`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from graders.problem import ProblemSpec, on_device

_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


@dataclass
class Case:
    shape: dict[str, Any]
    seed: int
    init_inputs: list[Any]
    ref_model: torch.nn.Module
    inputs: list[Any]


def is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and (t.is_floating_point() or "float8" in str(t.dtype))


def _to_device(x: Any, device: str) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _drawn(spec: ProblemSpec, device: str, seed: int, exact: bool, draw: Callable[[], Any]) -> Any:
    """`draw()` after seeding, where a probe's case is drawn.

    A probe compares the solution with a reference that the untrusted runner and the trusted
    verifier each build from the same seed by the same code, so it needs a deterministic draw, not
    the official grader's own values: on CUDA every probe case draws on the device (a KBH deck's
    check.py draws on the CPU generator; at the 06 MoE shape that is 3.2 GB of weights and 2 GB of
    input per case, seconds each, for every probe and shape, twice). `exact` keeps the deck's own
    draw (checked_vs_timed reproduces the benchmark's inputs). A deck whose draw cannot run under a
    device context (a CPU generator passed explicitly) falls back to its own draw, in both
    processes alike."""
    if not exact:
        torch.manual_seed(seed)
        try:
            with on_device(device):
                return draw()
        except Exception:  # the deck's code needs its own draw: take it (same in runner and verifier)
            torch.manual_seed(seed)
    with spec.draw_context(device):
        return draw()


def build_case(spec: ProblemSpec, shape: dict[str, Any], seed: int, device: str, *, exact: bool = False) -> Case:
    """Reference model and inputs for one shape and seed (the graders' order and reseeding)."""
    spec.apply_shape(shape)
    torch.manual_seed(seed)
    init = list(spec.reference.get_init_inputs())
    ref = _drawn(spec, device, seed, exact, lambda: spec.reference.Model(*init).to(device).eval())
    torch.manual_seed(seed)  # inputs reseeded as graders.correctness / graders.timing draw them
    raw = _drawn(spec, device, seed, exact, lambda: list(spec.reference.get_inputs()))
    inputs = [_to_device(x, device) for x in raw]
    return Case(dict(shape), seed, init, ref, inputs)


def fresh_inputs(spec: ProblemSpec, shape: dict[str, Any], seed: int, device: str) -> list[Any]:
    spec.apply_shape(shape)
    torch.manual_seed(seed)
    raw = _drawn(spec, device, seed, False, lambda: list(spec.reference.get_inputs()))
    return [_to_device(x, device) for x in raw]


def outputs_as_list(out: Any) -> list[torch.Tensor]:
    """Normalise a forward result to a list of tensors (tuple outputs such as top-k)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple) and all(isinstance(o, torch.Tensor) for o in out):
        return list(out)
    raise TypeError(f"forward returned {type(out).__name__}, not a tensor or a tuple of tensors")


def snapshot(out: Any, device: str = "cpu") -> list[torch.Tensor]:
    """Plain copies of an output on `device` (CPU unless said; never a subclass: `torch.Tensor(...)`
    strips nothing silently)."""
    snaps = []
    for t in outputs_as_list(out):
        if type(t) is not torch.Tensor:
            raise TypeError(f"output is a {type(t).__name__}, not a plain torch.Tensor")
        snaps.append(t.detach().to(device, copy=True).contiguous().clone())
    return snaps


# ---------------------------------------------------------------------------------------------
# Writes that keep data_ptr: bumping the version counter (normal in-place ops) or not (a second
# tensor aliasing the same storage through `set_`, which has its own version counter).


def raw_alias(t: torch.Tensor) -> torch.Tensor:
    alias = torch.empty(0, dtype=t.dtype, device=t.device)
    alias.set_(t.untyped_storage(), t.storage_offset(), t.size(), t.stride())
    return alias


def _target(t: torch.Tensor, bump: bool) -> torch.Tensor:
    return t if bump else raw_alias(t)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(_INT_VIEW[t.element_size()]) if t.element_size() in _INT_VIEW else t


def _dtype_max(dtype: torch.dtype) -> float:
    try:
        return float(torch.finfo(dtype).max)
    except TypeError:
        return 3.0e38


_POOL_MAX = 1 << 20


def _pool_of(t: torch.Tensor) -> torch.Tensor:
    """The input's own values (finite ones, float64 on the CPU): what every rewrite draws from.

    A rewrite must stay inside the deck's input domain: a log-decay gate kept small and mostly
    negative, a sigmoid-ed beta kept in (0, 1), a softmax-ed router kept non-negative. Gaussian noise at the
    input's scale leaves such domains (positive gates make KDA's cumulative decay overflow, and a
    comparison of two astronomically large outputs says nothing about staleness); values resampled
    from the tensor itself keep its range and its distribution, element for element."""
    flat = t.detach().reshape(-1)
    if flat.numel() > _POOL_MAX:  # a fixed random subsample: the same on both sides, bounded memory
        g = torch.Generator(device="cpu").manual_seed(_POOL_MAX)
        idx = torch.randint(0, flat.numel(), (_POOL_MAX,), generator=g).to(flat.device)
        flat = _bits(flat)[idx].view(flat.dtype)  # through the bit view: fp8 has no index kernel
    flat = flat.to("cpu").float().double()
    flat = flat[torch.isfinite(flat)]
    return flat if flat.numel() else torch.zeros(1, dtype=torch.float64)


_RESAMPLE_CHUNK = 1 << 27  # elements per device draw: 1 GiB of int64 indices at most


def _resample(pool: torch.Tensor, shape: Sequence[int], dtype: torch.dtype, seed: int,
              device: torch.device | str) -> torch.Tensor:
    """`shape` values drawn with replacement from `pool`, by a generator seeded with `seed` on the
    tensor's own device (the runner and the verifier draw the same values on the same device kind).

    On an accelerator the indices are drawn and gathered there, in chunks: a full rewrite of the
    06 MoE hidden states is 1 G elements, which a CPU generator draws and gathers in about twenty
    seconds, three times per probe pass and shape."""
    n = math.prod(shape) if len(shape) else 1
    dev = torch.device(device)
    if dev.type == "cpu":
        g = torch.Generator(device="cpu").manual_seed(seed)
        idx = torch.randint(0, pool.numel(), (n,), generator=g)
        return pool[idx].reshape(tuple(shape)).to(dtype)
    g = torch.Generator(device=dev).manual_seed(seed)
    src = pool.to(dev)  # float64: every value of the input's own dtype, exactly
    out = torch.empty(n, dtype=dtype, device=dev)
    for start in range(0, n, _RESAMPLE_CHUNK):
        stop = min(n, start + _RESAMPLE_CHUNK)
        idx = torch.randint(0, src.numel(), (stop - start,), generator=g, device=dev)
        out[start:stop] = src[idx].to(dtype)
    return out.reshape(tuple(shape))


def _extremes(pool: torch.Tensor, count: int, seed: int) -> torch.Tensor:
    """`count` of the input's own largest-magnitude values (sign kept), picked at random."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    top = pool.abs().topk(min(pool.numel(), max(64, count))).indices
    return pool[top[torch.randint(0, top.numel(), (count,), generator=g)]]


def _write(t: torch.Tensor, index: Any, values: torch.Tensor, bump: bool) -> None:
    dst = _target(t, bump)
    with torch.no_grad():
        if index is None:
            dst.copy_(values)
        else:
            _bits(dst)[index] = _bits(values.to(dst.dtype))


def overwrite_plan(inputs: Sequence[Any], base_seed: int) -> list[dict[str, Any]]:
    """The input half of the grader's contract (docs/regrade.md, "The grader's contract").

    Same-storage rewrites of the input objects the solution has already seen: (a) new data
    everywhere, (b) one row (first and last), (c) a few scattered elements set to the input's own
    extreme values; each once through an ordinary in-place op that bumps `_version` and once
    through a raw alias (same storage, same data_ptr, version NOT bumped: the field's property
    stress does this). Last, (d) fresh tensors: the inputs replaced by new tensor objects (new
    storage) holding new data. Every new value is resampled from the input's own values as the
    deck drew them (`_pool_of`), so no rewrite leaves the deck's input domain."""
    float_idx = [i for i, t in enumerate(inputs) if is_float(t) and t.numel() > 0]
    if not float_idx:
        return []
    pools = {i: _pool_of(inputs[i]) for i in float_idx}  # taken once, before any rewrite
    first = float_idx[0]
    rows = inputs[first].shape[0] if inputs[first].dim() >= 1 else 1
    steps: list[dict[str, Any]] = []
    seed = base_seed
    for bump in (True, False):
        seed += 1
        steps.append({"name": f"full_{'bump' if bump else 'raw'}", "kind": "full", "inputs": float_idx,
                      "seed": seed, "bump": bump, "pools": pools})
    for row in sorted({0, rows - 1}):
        for bump in (True, False):
            seed += 1
            steps.append({"name": f"row{row}_{'bump' if bump else 'raw'}", "kind": "row", "input": first,
                          "row": row, "seed": seed, "bump": bump, "pools": pools})
    for bump in (True, False):
        seed += 1
        steps.append({"name": f"scatter_{'bump' if bump else 'raw'}", "kind": "scatter", "inputs": float_idx,
                      "count": 8, "seed": seed, "bump": bump, "pools": pools})
    seed += 1
    steps.append({"name": "fresh_tensor", "kind": "fresh", "inputs": float_idx, "seed": seed, "bump": True,
                  "pools": pools})
    return steps


RANDPERM_FORWARD_MAX = 0xFFFFFFFF // 20  # torch's CPU randperm: forward Fisher-Yates below this n


def scatter_positions(numel: int, count: int, g: torch.Generator) -> torch.Tensor:
    """`count` distinct flat positions out of `numel`, uniformly: the first `count` entries of a
    forward Fisher-Yates shuffle driven by `g`, in O(count) draws and memory.

    The first `count` swaps of a forward shuffle fix its first `count` entries, so only those are
    made (the swapped-out positions kept in a dict). torch's CPU `randperm` runs exactly this
    shuffle for n < 2**32 // 20 (`z = random() % (n - i)`, which is what `randint(0, n - i)` draws),
    so below that size the positions are bit for bit `torch.randperm(numel, generator=g)[:count]`,
    as the scatter steps drew them before; above it randperm switches to an inside-out shuffle
    whose first entries depend on all n draws (a 1 G-element permutation, 8 GB and a minute of
    one CPU core, per scatter step, in each of the runner and the verifier, to pick 8 positions),
    and these positions are another uniform sample, the same in both processes."""
    swapped: dict[int, int] = {}
    out: list[int] = []
    for i in range(min(count, numel)):
        j = i + (int(torch.randint(0, numel - i, (1,), generator=g).item()) if i < numel - 1 else 0)
        vi, vj = swapped.get(i, i), swapped.get(j, j)
        swapped[i], swapped[j] = vj, vi
        out.append(vj)
    return torch.tensor(out, dtype=torch.int64)


def apply_mutation(inputs: list[Any], step: dict[str, Any]) -> dict[str, Any]:
    """Apply one plan step in place; returns what it touched (data_ptr/version before and after)."""
    kind = step["kind"]
    touched = step["inputs"] if "inputs" in step else [step["input"]]
    before = {i: (inputs[i].data_ptr(), inputs[i]._version) for i in touched}
    for n, i in enumerate(touched):
        t: torch.Tensor = inputs[i]
        pool: torch.Tensor = step["pools"][i]
        seed = int(step["seed"]) * 131 + n
        if kind == "fresh":  # a new tensor object on new storage: nothing of the old one survives
            inputs[i] = _resample(pool, t.shape, t.dtype, seed, t.device).contiguous()
        elif kind == "full":
            _write(t, None, _resample(pool, t.shape, t.dtype, seed, t.device), step["bump"])
        elif kind == "row":
            if t.dim() == 0:
                _write(t, None, _resample(pool, (), t.dtype, seed, t.device), step["bump"])
            else:
                row = int(step["row"])
                vals = _resample(pool, t.shape[1:], t.dtype, seed, t.device)
                _write(t, (torch.tensor([row], device=t.device),), vals.unsqueeze(0), step["bump"])
        elif kind == "scatter":
            g = torch.Generator(device="cpu").manual_seed(seed)
            count = min(int(step["count"]), t.numel())
            flat = scatter_positions(t.numel(), count, g)
            idx = tuple(ix.to(t.device) for ix in torch.unravel_index(flat, t.shape)) if t.dim() else None
            vals = _extremes(pool, count, seed).to(t.dtype).to(t.device)
            _write(t, idx, vals if idx is not None else vals[0], step["bump"])
        else:
            raise ValueError(f"unknown mutation kind {kind}")
    after = {i: (inputs[i].data_ptr(), inputs[i]._version) for i in touched}
    if kind == "fresh":
        return {"same_data_ptr": False, "version_bumped": None, "fresh_tensor": True}
    return {
        "same_data_ptr": all(before[i][0] == after[i][0] for i in touched),
        "version_bumped": any(after[i][1] != before[i][1] for i in touched),
    }


# ---------------------------------------------------------------------------------------------
# Weight / buffer mutation: the weight half of the grader's contract (docs/regrade.md).
#
# Real graders change a model's weights and buffers only through ordinary in-place ops (which
# bump the tensor's `_version`) or `load_state_dict` (a `copy_` under no_grad: bumps too). They
# never rewrite a weight behind its version counter, so a repack cache keyed on (data_ptr,
# _version, shape) is legitimate and must pass; a cache keyed on identity or pointer alone must
# fail. Every write here goes through the state tensor itself (never `.data`, whose in-place
# writes do NOT bump a Parameter's counter) and the step records that the counter moved.


def weight_plan(spec: ProblemSpec, state_names: Sequence[str]) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = [
        {"name": "all_x0.5_bump", "kind": "scale", "scale": {n: 0.5 for n in state_names}},
        {"name": "all_x3_bump", "kind": "scale", "scale": {n: 3.0 for n in state_names}},
        {"name": "load_state_dict", "kind": "load_state", "seed": WEIGHT_RELOAD_SEED},
    ]
    for case in spec.numeric_stress:
        if case.scale_state:
            steps.append({"name": f"stress_{case.name}_bump", "kind": "scale", "scale": dict(case.scale_state),
                          "atol": case.tolerance.atol, "rtol": case.tolerance.rtol})
    return steps


WEIGHT_RELOAD_SEED = 1209  # the `load_state_dict` step's fresh weights (runner and verifier alike)


def reload_state(spec: ProblemSpec, shape: dict[str, Any], seed: int, device: str) -> dict[str, torch.Tensor]:
    """A second reference model's state at `seed`: what a grader's `load_state_dict` brings in."""
    spec.apply_shape(shape)
    torch.manual_seed(seed)
    init = list(spec.reference.get_init_inputs())
    other = _drawn(spec, device, seed, False, lambda: spec.reference.Model(*init).to(device))
    return {k: v.detach().clone() for k, v in other.state_dict().items()}


def float_state_names(model: torch.nn.Module) -> list[str]:
    return [n for n, t in model.state_dict().items() if is_float(t) and t.numel() > 0]


def apply_state_mutation(model: torch.nn.Module, step: dict[str, Any],
                         fresh_state: dict[str, torch.Tensor] | None = None) -> dict[str, Any]:
    """Apply one weight step in place through version-bumping writes; returns what moved."""
    state = model.state_dict(keep_vars=True)
    before = {n: (t.data_ptr(), t._version) for n, t in state.items() if isinstance(t, torch.Tensor)}
    changed = []
    if step.get("kind") == "load_state":
        if fresh_state is None:
            raise ValueError("a load_state step needs the fresh state (reload_state)")
        with torch.no_grad():
            model.load_state_dict(fresh_state, strict=True)
        names = list(fresh_state)
    else:
        names = []
        for name, factor in step["scale"].items():
            t = state.get(name)
            if not is_float(t):
                continue
            assert isinstance(t, torch.Tensor)
            new = (t.detach().float() * float(factor)).clamp(-_dtype_max(t.dtype), _dtype_max(t.dtype)).to(t.dtype)
            with torch.no_grad():
                t.copy_(new)  # the tensor itself (a Parameter too): bumps its version counter
            names.append(name)
    after = model.state_dict(keep_vars=True)
    for name in names:
        t = after.get(name)
        if isinstance(t, torch.Tensor) and name in before:
            changed.append({"name": name, "version_bumped": t._version != before[name][1],
                            "same_data_ptr": t.data_ptr() == before[name][0]})
    return {"changed": changed, "all_versions_bumped": all(c["version_bumped"] for c in changed)}


# ---------------------------------------------------------------------------------------------
# Comparison


def compare(
    sol: Sequence[torch.Tensor],
    ref: Sequence[torch.Tensor],
    *,
    atol: float,
    rtol: float,
    output_kind: str = "tensor",
    inputs: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Tolerance comparison in the check grammar's terms (max_abs_diff, bad/total, worst index)."""
    if output_kind == "topk" and len(ref) >= 2 and len(sol) >= 2 and inputs:
        values = sol[0].float()
        x = inputs[0].detach().to(values.device).float()
        try:
            gathered = torch.gather(x, -1, sol[1].to(torch.int64).clamp(0, x.shape[-1] - 1))
        except RuntimeError:
            return _mismatch(ref[0], "indices have the wrong shape")
        res = _close(values, ref[0].float(), atol, rtol)
        res_idx = _close(gathered, ref[0].float(), atol, rtol)
        res["bad"] += res_idx["bad"]
        res["max_abs_diff"] = max(res["max_abs_diff"], res_idx["max_abs_diff"])
        res["ok"] = res["ok"] and res_idx["ok"]
        return res
    if len(sol) != len(ref):
        return _mismatch(ref[0] if ref else torch.zeros(1), f"{len(sol)} outputs, reference has {len(ref)}")
    total: dict[str, Any] = {"ok": True, "max_abs_diff": 0.0, "bad": 0, "total": 0, "worst_idx": None, "note": ""}
    for s, r in zip(sol, ref, strict=True):
        if s.shape != r.shape:
            return _mismatch(r, f"shape {tuple(s.shape)} != reference {tuple(r.shape)}")
        if s.dtype != r.dtype:
            return _mismatch(r, f"dtype {s.dtype} != reference {r.dtype}")
        part = _close(s.float() if s.is_floating_point() or "float8" in str(s.dtype) else s.double(),
                      r.float() if r.is_floating_point() or "float8" in str(r.dtype) else r.double(), atol, rtol)
        total["ok"] = total["ok"] and part["ok"]
        total["bad"] += part["bad"]
        total["total"] += part["total"]
        if part["max_abs_diff"] >= total["max_abs_diff"]:
            total["max_abs_diff"], total["worst_idx"] = part["max_abs_diff"], part["worst_idx"]
    return total


def _mismatch(ref: torch.Tensor, note: str) -> dict[str, Any]:
    return {"ok": False, "max_abs_diff": float("inf"), "bad": ref.numel(), "total": ref.numel(),
            "worst_idx": None, "note": note}


def _close(s: torch.Tensor, r: torch.Tensor, atol: float, rtol: float) -> dict[str, Any]:
    diff = (s - r).abs()
    bad_mask = ~(diff <= atol + rtol * r.abs())  # NaN/inf compare False -> bad
    bad = int(bad_mask.sum().item())
    finite = torch.nan_to_num(diff, nan=float("inf"))
    flat_idx = int(finite.reshape(-1).argmax().item()) if finite.numel() else 0
    max_abs = float(finite.reshape(-1)[flat_idx].item()) if finite.numel() else 0.0
    worst = [int(i) for i in torch.unravel_index(torch.tensor(flat_idx), diff.shape)] if diff.dim() else []
    return {"ok": bad == 0, "max_abs_diff": max_abs, "bad": bad, "total": int(diff.numel()), "worst_idx": worst,
            "note": ""}


def bit_identical(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Same length, dtypes, shapes, devices and bits (NaN payloads and signed zeros included): two
    outputs any comparison treats alike (graders.probes.verify reuses a result for such an output,
    the runner links a saved file instead of writing it again)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if type(x) is not torch.Tensor or type(y) is not torch.Tensor:
            return False
        if x.dtype != y.dtype or x.shape != y.shape or x.device != y.device:
            return False
        if not x.numel():
            continue
        if x.is_complex():
            return False  # never assumed identical
        xc, yc = x.contiguous(), y.contiguous()
        if is_float(x):  # compared through the bits: NaN == NaN, -0.0 != 0.0
            if xc.element_size() not in _INT_VIEW:
                return False
            xc, yc = _bits(xc), _bits(yc)
        if not torch.equal(xc, yc):
            return False
    return True


def max_change(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> float:
    """Largest absolute element change between two outputs (inf on shape mismatch)."""
    worst = 0.0
    for x, y in zip(a, b, strict=False):
        if x.shape != y.shape:
            return float("inf")
        if x.numel():
            d = (x.double() - y.double()).abs()
            worst = max(worst, float(torch.nan_to_num(d, nan=float("inf")).max().item()))
    return worst


def change_and_moved(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], atol: float,
                     rtol: float) -> tuple[float, int]:
    """(max_change(a, b), how many elements of b moved beyond tolerance relative to a) from one
    float64 difference per pair (is a mutation informative?); shape-mismatched pairs count no moves."""
    worst, n, mismatch = 0.0, 0, False
    for x, y in zip(a, b, strict=False):
        if x.shape != y.shape:
            mismatch = True  # the change is inf; the pair counts no moves
            continue
        if x.numel():
            xd = x.double()
            d = (xd - y.double()).abs()
            if not mismatch:
                worst = max(worst, float(torch.nan_to_num(d, nan=float("inf")).max().item()))
            n += int((~(d <= atol + rtol * xd.abs())).sum().item())
    return (float("inf") if mismatch else worst), n


def all_finite(outs: Sequence[torch.Tensor]) -> bool:
    """Every floating element of every output is finite."""
    return all(bool(torch.isfinite(o.float()).all()) for o in outs
               if o.numel() and (o.is_floating_point() or "float8" in str(o.dtype)))
