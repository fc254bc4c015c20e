"""What one regrade builds and draws, per phase, probe and shape: counted on the CPU at SMALL shapes.

The worker's regrade of one solution (graders.regrade) runs five phases, each a process of its own:
the hardened check (graders.correctness.run_check), its verifier (verify_recorded, only after a
PASS), the probe runner twice (graders.probes.runner, `fresh` then `warm`) and the probe verifier
(graders.probes.verify). This script runs those same functions in THIS process on the CPU at the
deck's SMALL shapes, with counters on every reference Model construction, solution Model
construction, reference get_inputs() draw, explicit CPU-generator draw (torch.randint/randperm with
a CPU `generator=`), output snapshot, saved output and CPU-side comparison, and prints:

1. the counts per phase x probe x shape, with WHERE each draw would run on CUDA: `device`
   (graders.problem.on_device), `ctx` (spec.draw_context: the device for a kaudit deck, the CPU
   generator for a KBH deck, as its check.py does) or `cpu` (no context, or an explicit CPU
   generator: single-threaded whatever the host);
2. an estimate of the CPU-side seconds at the FULL graded shapes: every element count scaled from
   the small shape to the full one by the role of the tensor it touches (weights, input i, a row
   of input i, output), sizes of the full shapes taken on the meta device, per-element rates from
   FIXED_RATES (or measured here: --measure-rates). Each small shape's events stand for every
   full shape (the code per shape is the same); the check's repeat/overwrite stage, which a CPU
   check runs at the cheapest shape only, counts at every full shape as on CUDA; the recorded pass
   and the property plan (small and property shapes on CUDA too) are left out of the estimate.

    PYTHONPATH=. .venv/bin/python bench/probe_cost.py kernels/hard/06_sonic_moe_swiglu \
        [--solution PATH | --solution reference] [--phases check,check_verify,fresh,warm,verify] [--json OUT]

`--solution reference` copies the deck's reference.py into a temporary folder and grades it (the
forbidden-op scan is then off: the reference calls the ops its problem forbids). A Triton solution
runs under TRITON_INTERPRET=1. CUDA-only probes (stream_escape, l2_policy) cannot run here: their
rows come from reading graders.probes.runner/verify (CUDA_ONLY_ROWS below) and are marked `*`.
Counts describe the code; the seconds are an estimate for reading, nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRITON_INTERPRET", "1")  # before any solution's @triton.jit is evaluated

import torch

PHASES = ("check", "check_verify", "fresh", "warm", "verify")
PHASE_NAMES = {"check": "hardened check", "check_verify": "check verifier", "fresh": "probes runner fresh",
               "warm": "probes runner warm", "verify": "probes verifier"}
_RUNNER_FNS = {"_same_storage": "same_storage_overwrite", "_weight_mutation": "weight_mutation",
               "_repeat_calls": "repeat_calls", "_aliasing": "output_aliasing", "_warm": "fresh_vs_warm",
               "_fresh": "fresh_vs_warm", "_checked_vs_timed": "checked_vs_timed",
               "_stream_escape": "stream_escape", "_l2_policy": "l2_policy"}
_VERIFIER_FNS = ("same_storage_overwrite", "weight_mutation", "repeat_calls", "output_aliasing", "fresh_vs_warm",
                 "stream_escape", "l2_policy", "checked_vs_timed")

# The CUDA-only probes, per shape, read from graders/probes/runner.py and verify.py (they cannot run
# on a CPU): (phase, probe, kind, where, role, count). Kept next to the code they describe.
CUDA_ONLY_ROWS = (
    ("warm", "stream_escape", "ref_model", "device", "state", 1),
    ("warm", "stream_escape", "get_inputs", "device", "inputs", 1),
    ("warm", "stream_escape", "sol_model", "device", "state", 1),
    ("warm", "stream_escape", "save", "d2h", "output", 2),
    ("warm", "l2_policy", "ref_model", "device", "state", 1),
    ("warm", "l2_policy", "get_inputs", "device", "inputs", 1),
    ("warm", "l2_policy", "sol_model", "device", "state", 1),
    ("verify", "stream_escape", "ref_model", "device", "state", 1),
    ("verify", "stream_escape", "get_inputs", "device", "inputs", 1),
    ("verify", "stream_escape", "snapshot", "on_device", "output", 1),  # the verifier compares on the GPU
    ("verify", "stream_escape", "load", "device", "output", 2),
    ("verify", "stream_escape", "cpu_compare", "device", "output", 2),
)


@dataclass
class Event:
    phase: str
    probe: str
    shape: int | None  # index into the phase's shape list (None: property cases, import)
    kind: str  # ref_model | sol_model | get_inputs | cpu_gen | snapshot | save | link | load | cpu_compare
    where: str  # device | ctx | cpu | d2h
    numel: int
    seed: int | None = None
    via: str = ""
    role: str = ""


@dataclass
class Ledger:
    events: list[Event] = field(default_factory=list)
    phase: str = ""
    probe: str = "-"
    shape: int | None = None
    draw_stack: list[str] = field(default_factory=list)
    via_stack: list[str] = field(default_factory=list)
    quiet: int = 0  # >0: inside the ledger's own helpers (nothing counted)

    def add(self, kind: str, numel: int, *, where: str | None = None, seed: int | None = None,
            what: str = "") -> None:
        if self.quiet or not self.phase:
            return
        via = self.via_stack[-1] if self.via_stack else ""
        self.events.append(Event(self.phase, self.probe, self.shape, kind, where or self.where(), int(numel), seed,
                                 f"{what}/{via}" if what else via))

    def where(self) -> str:
        if "ctx" in self.draw_stack:
            return "ctx"
        return "device" if "device" in self.draw_stack else "cpu"

    @contextlib.contextmanager
    def tag(self, stack: list[str], value: str) -> Iterator[None]:
        stack.append(value)
        try:
            yield
        finally:
            stack.pop()

    @contextlib.contextmanager
    def at(self, probe: str, shape: int | None) -> Iterator[None]:
        saved = (self.probe, self.shape)
        self.probe, self.shape = probe, shape
        try:
            yield
        finally:
            self.probe, self.shape = saved


def _numel(x: Any) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel()
    if isinstance(x, list | tuple):
        return sum(_numel(y) for y in x)
    return 0


def _state_numel(model: Any) -> int:
    try:
        return sum(t.numel() for t in model.state_dict().values() if isinstance(t, torch.Tensor))
    except Exception:
        return 0


# ---------------------------------------------------------------------------------------------
# Instrumentation (monkeypatching; undone on exit)


@contextlib.contextmanager
def instrument(ledger: Ledger, small: list[dict[str, Any]] | None = None) -> Iterator[None]:
    """Counters on everything a regrade builds, draws, copies and compares; `small` replaces the
    deck's SMALL_SHAPES (a KBH deck has none: its "small" set is its graded one)."""
    import graders.correctness as K
    import graders.problem as P
    from graders.probes import cases as C
    from graders.probes import runner as R
    from graders.probes import verify as V

    undo: list[Callable[[], None]] = []

    def patch(obj: Any, name: str, new: Any) -> None:
        old = getattr(obj, name)
        setattr(obj, name, new)
        undo.append(lambda: setattr(obj, name, old))

    def wrap_model(cls: type, kind: str) -> None:
        if getattr(cls, "_probe_cost_wrapped", False):
            return
        orig: Any = vars(cls).get("__init__") or getattr(cls, "__init__")  # noqa: B009

        def __init__(self: Any, *a: Any, **k: Any) -> None:
            orig(self, *a, **k)
            ledger.add(kind, _state_numel(self), seed=torch.initial_seed())

        setattr(cls, "__init__", __init__)  # noqa: B010
        setattr(cls, "_probe_cost_wrapped", True)  # noqa: B010

    def wrap_reference(mod: Any) -> Any:
        if isinstance(getattr(mod, "Model", None), type):
            wrap_model(mod.Model, "ref_model")
        gi = getattr(mod, "get_inputs", None)
        if callable(gi) and not getattr(gi, "_probe_cost_wrapped", False):
            def get_inputs(*a: Any, **k: Any) -> Any:
                out = gi(*a, **k)
                ledger.add("get_inputs", _numel(list(out)), seed=torch.initial_seed())
                return out

            get_inputs._probe_cost_wrapped = True  # type: ignore[attr-defined]
            mod.get_inputs = get_inputs
        return mod

    orig_load_modules = P._load_modules

    def load_modules(problem_dir: Path) -> Any:
        ref, shapes, deck_small = orig_load_modules(problem_dir)
        return wrap_reference(ref), shapes, [dict(s) for s in small] if small else deck_small

    patch(P, "_load_modules", load_modules)

    def import_solution(orig: Callable[..., Any]) -> Callable[..., Any]:
        def imp(path: Path, prefix: str) -> Any:
            mod = orig(path, prefix)
            if prefix == "solution" and isinstance(getattr(mod, "Model", None), type):
                wrap_model(mod.Model, "sol_model")
            return mod
        return imp

    patch(R, "import_isolated", import_solution(R.import_isolated))
    patch(K, "import_isolated", import_solution(K.import_isolated))

    # where a draw runs: graders.problem.on_device (device) / ProblemSpec.draw_context (ctx)
    def tagged_cm(orig: Callable[..., Any], label: str) -> Callable[..., Any]:
        @contextlib.contextmanager
        def cm(*a: Any, **k: Any) -> Iterator[Any]:
            with ledger.tag(ledger.draw_stack, label), orig(*a, **k) as v:
                yield v
        return cm

    patch(P, "on_device", tagged_cm(P.on_device, "device"))
    patch(C, "on_device", tagged_cm(C.on_device, "device"))
    patch(P.ProblemSpec, "draw_context", tagged_cm(P.ProblemSpec.draw_context, "ctx"))

    def via(obj: Any, name: str, label: str) -> None:
        orig = getattr(obj, name)

        def f(*a: Any, **k: Any) -> Any:
            with ledger.tag(ledger.via_stack, label):
                return orig(*a, **k)
        patch(obj, name, f)

    via(C, "build_case", "build_case")
    via(C, "reload_state", "reload_state")
    via(C, "fresh_inputs", "fresh_inputs")
    via(C, "apply_mutation", "apply_mutation")
    via(C, "overwrite_plan", "overwrite_plan")
    for name in ("_Draws", "_model_inputs"):
        if hasattr(K, name):
            via(K, name, "check_draw")
    via(K._Runner, "build", "check_build")
    if hasattr(K, "_ref_model"):
        via(K, "_ref_model", "check_build")

    # explicit CPU-generator draws (single-threaded, whatever the host)
    def gen_draw(orig: Callable[..., Any], name: str) -> Callable[..., Any]:
        def f(*a: Any, **k: Any) -> Any:
            out = orig(*a, **k)
            g = k.get("generator")
            if g is not None and getattr(g, "device", torch.device("cpu")).type == "cpu":
                ledger.add("cpu_gen", out.numel(), where="cpu", what=name)
            return out
        f.__name__ = name
        return f

    patch(torch, "randint", gen_draw(torch.randint, "randint"))
    patch(torch, "randperm", gen_draw(torch.randperm, "randperm"))

    # a rewrite's values: drawn and gathered on the tensor's own device on CUDA (cases._resample)
    orig_resample = C._resample

    def resample(*a: Any, **k: Any) -> Any:
        ledger.quiet += 1
        try:
            return orig_resample(*a, **k)
        finally:
            ledger.quiet -= 1

    patch(C, "_resample", resample)

    # what crosses to the host and is compared there
    orig_snapshot = C.snapshot

    def snapshot(out: Any, device: str = "cpu") -> Any:
        snaps = orig_snapshot(out, device)
        ledger.add("snapshot", _numel(snaps), where="d2h" if device == "cpu" else "on_device")
        return snaps

    patch(C, "snapshot", snapshot)
    orig_save = R.Recorder.save

    def save(self: Any, name: str, out: Any) -> None:
        ledger.quiet += 1
        try:
            orig_save(self, name, out)
        finally:
            ledger.quiet -= 1
        path = Path(self.out_dir) / f"{self.prefix}{name}.pt"
        linked = path.is_file() and path.stat().st_nlink > 1  # a second name for an identical save
        ledger.add("link" if linked else "save", _numel(C.outputs_as_list(out)), where="d2h")

    patch(R.Recorder, "save", save)
    orig_load = V.Verifier.load

    def load(self: Any, name: str) -> Any:
        data = orig_load(self, name)
        if data is not None:
            ledger.add("load", _numel(data), where="cpu")
        return data

    patch(V.Verifier, "load", load)
    for fname in ("compare", "max_change", "all_finite", "change_and_moved"):
        if not hasattr(C, fname):
            continue
        orig_f = getattr(C, fname)

        def cmp(*a: Any, _orig: Callable[..., Any] = orig_f, **k: Any) -> Any:
            ledger.add("cpu_compare", _numel(a[0]) if a else 0, where="cpu")
            ledger.quiet += 1
            try:
                return _orig(*a, **k)
            finally:
                ledger.quiet -= 1
        patch(C, fname, cmp)

    # the check's own comparisons and recorded outputs (graders.correctness)
    orig_compare_output = K.compare_output

    def compare_output(out: Any, ref: Any, *a: Any, **k: Any) -> Any:
        ledger.add("cpu_compare", _numel(list(ref) if isinstance(ref, list | tuple) else ref), where="device")
        return orig_compare_output(out, ref, *a, **k)

    patch(K, "compare_output", compare_output)
    orig_record = K.OutputRecorder.record

    def record(self: Any, key: str, out: Any) -> None:
        orig_record(self, key, out)
        ledger.add("save", _numel(list(out) if isinstance(out, list | tuple) else out), where="d2h")

    patch(K.OutputRecorder, "record", record)
    orig_load_record = K.load_record

    def load_record(path: Path, expect_bytes: int) -> Any:
        out = orig_load_record(path, expect_bytes)
        ledger.add("load", _numel(list(out) if isinstance(out, list | tuple) else out), where="cpu")
        return out

    patch(K, "load_record", load_record)

    # probe and shape of every event
    for fn, probe in _RUNNER_FNS.items():
        orig_fn = getattr(R, fn)

        def scenario(spec: Any, sol_mod: Any, shape: Any, si: int, *a: Any, _o: Any = orig_fn, _p: str = probe) -> Any:
            with ledger.at(_p, si):
                return _o(spec, sol_mod, shape, si, *a)
        patch(R, fn, scenario)
    for probe in _VERIFIER_FNS:
        orig_m = getattr(V.Verifier, probe)

        def method(self: Any, si: int, shape: Any, _o: Any = orig_m, _p: str = probe) -> Any:
            with ledger.at(_p, si):
                return _o(self, si, shape)
        patch(V.Verifier, probe, method)

    def stage(name: str) -> None:  # graders.correctness._stage: "shape 1", "verify shape 0 seed 42", ...
        m = re.search(r"\bshape (\d+)", name)
        si = int(m.group(1)) if m else None
        if name.startswith("recorded pass"):
            ledger.probe, ledger.shape = "recorded_pass", 0
        elif name.startswith("repeat and overwrite"):
            ledger.probe, ledger.shape = "repeat_overwrite", si
        elif name.startswith("property"):
            ledger.probe, ledger.shape = "property_plan", None
        elif name.startswith("kbh property"):
            ledger.probe, ledger.shape = "kbh_property", None
        else:
            ledger.probe, ledger.shape = "grid", si

    saved_sinks = list(K._STAGE_SINK)
    K.set_stage_sink(stage)
    undo.append(lambda: K._STAGE_SINK.__setitem__(slice(None), saved_sinks))
    try:
        yield
    finally:
        for u in reversed(undo):
            u()


# ---------------------------------------------------------------------------------------------
# The phases, in this process


def run_phases(problem_dir: Path, solution: Path, phases: tuple[str, ...] = PHASES, *, enforce_forbidden: bool = True,
               probes: list[str] | None = None,
               small: list[dict[str, Any]] | None = None) -> tuple[Ledger, dict[str, Any]]:
    import graders.correctness as K
    from graders import probes as probe_names
    from graders.probes import runner as R
    from graders.probes import verify as V

    try:  # what the sandbox children do under the interpreter (a bf16 tl.dot must not multiply bit patterns)
        from graders import interp_fixes

        interp_fixes.apply()
    except ImportError:
        pass
    ledger = Ledger()
    wanted = probe_names.normalise(probes, "cuda")  # the CUDA set; the CPU-only ones run here
    info: dict[str, Any] = {"probes": wanted, "wall_s": {}}
    with tempfile.TemporaryDirectory(prefix="probe_cost_") as tmp, instrument(ledger, small):
        record_dir, out_dir = Path(tmp) / "check", Path(tmp) / "out"
        record_dir.mkdir()
        base = {"problem_dir": str(problem_dir), "solution": str(solution), "device": "cpu", "probes": wanted,
                "out_dir": str(out_dir), "shapes": "small", "smoke": True}
        warm: dict[str, Any] = {}
        fresh: dict[str, Any] = {}
        for phase in phases:
            ledger.phase, ledger.probe, ledger.shape = phase, "-", None
            t0 = time.perf_counter()
            if phase == "check":
                outcome = K.run_check(solution, problem_dir, device="cpu", shapes="small", emit=lambda _l: None,
                                      record_dir=record_dir, enforce_forbidden=enforce_forbidden, property_seed=1)
                info["check_passed"] = bool(outcome.passed)
                info["check_last_line"] = outcome.lines[-1] if outcome.lines else ""
            elif phase == "check_verify":
                res = K.verify_recorded(problem_dir, record_dir, device="cpu", shapes="small")
                info["check_verify"] = {"passed": res.get("passed"), "cases": res.get("cases")}
            elif phase == "fresh":
                fresh = R.run_untrusted({**base, "mode": "fresh"})
            elif phase == "warm":
                warm = R.run_untrusted({**base, "mode": "warm"})
            elif phase == "verify":
                res = V.verify({**base, "warm_manifest": warm, "fresh_manifest": fresh})
                info["probe_results"] = res["probes"]
            info["wall_s"][phase] = round(time.perf_counter() - t0, 2)
        ledger.phase = ""
    return ledger, info


# ---------------------------------------------------------------------------------------------
# Sizes of every role at the small and the full shapes; the estimate


def _shape_sizes(spec: Any, shape: dict[str, Any], meta: bool) -> dict[str, int]:
    """numel of the model state, each input, one row of each input and the output at `shape`."""
    spec.apply_shape(shape)
    torch.manual_seed(0)
    init = list(spec.reference.get_init_inputs())
    dev = torch.device("meta") if meta else torch.device("cpu")
    with dev:
        model = spec.reference.Model(*init)
        inputs = list(spec.reference.get_inputs())
    sizes = {"state": _state_numel(model), "inputs": _numel(inputs)}
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor):
            sizes[f"input{i}"] = x.numel()
            if x.dim() >= 1 and x.shape[0]:
                sizes[f"row{i}"] = x.numel() // x.shape[0]
    run_in = []
    for x in inputs:  # small meta tensors become real zeros (offsets read by .tolist()), big ones stay meta
        if isinstance(x, torch.Tensor) and x.device.type == "meta" and x.numel() <= (1 << 16):
            x = torch.zeros(x.shape, dtype=x.dtype)
        run_in.append(x)
    try:
        with torch.no_grad():
            out = model(*run_in)
        sizes["output"] = _numel(list(out) if isinstance(out, list | tuple) else out)
    except Exception:
        sizes["output"] = -1  # unknown: scaled like input 0
    return sizes


ROLE_ORDER = ("output", "state", "inputs", "input0", "input1", "input2", "input3", "row0", "row1", "row2")


def size_tables(problem_dir: Path, small_shapes: list[dict[str, Any]] | None = None,
                ) -> tuple[list[dict[str, int]], list[dict[str, int]], Any]:
    from graders.problem import load_problem

    spec = load_problem(problem_dir)
    small = [_shape_sizes(spec, s, meta=False) for s in (small_shapes or spec.shape_list("small"))]
    full = [_shape_sizes(spec, s, meta=True) for s in spec.shape_list("all")]
    for f in full:
        if f.get("output", -1) < 0:
            f["output"] = f.get("input0", 0)
    return small, full, spec


def role_of(numel: int, sizes: dict[str, int], kind: str = "") -> str:
    """The tensor an element count stands for (inputs first for draws, the output first for what is
    compared or saved: two roles can have the same size at a small shape)."""
    order = ROLE_ORDER if kind in ("snapshot", "save", "link", "load", "cpu_compare") else \
        tuple(r for r in ROLE_ORDER if r != "output") + ("output",)
    for role in order:
        if sizes.get(role) == numel:
            return role
    return "const"


# ns per element, measured on the 2-core CPU host this script was written on (quiet, 64 M elements;
# bench/probe_cost.py --measure-rates measures them again here). Generators are single-threaded
# on every host; the comparisons use every core (a 16-core GPU host runs them several times faster).
FIXED_RATES = {
    "draw_cpu": 7.7,  # torch.randn / nn.init.normal_ bf16, the global CPU generator
    "randint": 18.5,  # _resample: randint(0, 1M pool) int64 + gather float64 + cast (explicit generator)
    "randperm": 50.0,  # torch.randperm at n >= 2**32 // 20 (inside-out path; 41 below it)
    "cpu_compare": 25.0,  # one comparison pass (float upcast, diff, tolerance mask, reductions) per element
    "d2h": 0.4,  # device-to-host snapshot, ASSUMED 5 GB/s pageable for bf16 elements
    "save_load": 1.0,  # torch.save / torch.load, ASSUMED 2 GB/s for bf16 elements
}


def measure_rates(n: int = 1 << 24) -> dict[str, float]:
    """FIXED_RATES' CPU entries measured on THIS host (the d2h and save/load assumptions kept)."""
    g = torch.Generator().manual_seed(0)
    pool = torch.randn(1 << 20, dtype=torch.float64)
    x = torch.randn(n, dtype=torch.bfloat16)
    y = x.clone()

    def ns(f: Callable[[], Any]) -> float:
        t0 = time.perf_counter()
        f()
        return (time.perf_counter() - t0) / n * 1e9

    return {
        **FIXED_RATES,
        "draw_cpu": ns(lambda: torch.empty(n, dtype=torch.bfloat16).normal_()),
        "randint": ns(lambda: pool[torch.randint(0, pool.numel(), (n,), generator=g)].to(torch.bfloat16)),
        "randperm": ns(lambda: torch.randperm(n, generator=g)) * 1.2,  # the inside-out path is ~1.2x slower
        "cpu_compare": ns(lambda: int((~((x.float() - y.float()).abs() <= 0.02 + 0.02 * y.float().abs())).sum())),
    }


def estimate(ledger: Ledger, small: list[dict[str, int]], full: list[dict[str, int]], schema: str,
             rates: dict[str, float]) -> list[dict[str, Any]]:
    """Per (phase, probe, full shape): counts and CPU-side seconds at the full graded shapes.

    On CUDA the probes and the check run at every graded shape (the CPU run: the small ones, the
    check's repeat/overwrite stage at the cheapest only); each small shape's events stand for every
    full shape (the code is the same per shape), scaled by role."""
    rows: dict[tuple[str, str, int], dict[str, Any]] = {}
    events = [e for e in ledger.events if e.shape is not None and e.probe not in ("recorded_pass",)]
    template_shape: dict[tuple[str, str], int] = {}
    for e in events:
        template_shape.setdefault((e.phase, e.probe), e.shape)  # type: ignore[arg-type]
    for (phase, probe), s0 in template_shape.items():
        evs = [e for e in events if e.phase == phase and e.probe == probe and e.shape == s0]
        for fi, fsz in enumerate(full):
            row = rows.setdefault((phase, probe, fi), defaultdict(float))  # type: ignore[arg-type]
            for e in evs:
                role = role_of(e.numel, small[s0], e.kind)
                scale = (fsz.get(role, 0) / small[s0][role]) if role != "const" and small[s0].get(role) else 1.0
                n_full = e.numel * scale
                on_cpu = e.where == "cpu" or (e.where == "ctx" and schema == "kbh")
                row[f"n_{e.kind}"] += 1
                if e.kind in ("ref_model", "sol_model", "get_inputs"):
                    row[f"{e.kind}_{'cpu' if on_cpu else 'device'}"] += 1
                    if on_cpu and e.kind != "sol_model":
                        row["s_draw_cpu"] += n_full * rates["draw_cpu"] * 1e-9
                elif e.kind == "cpu_gen":
                    row["cpu_gen_elems"] += n_full
                    rate = rates["randperm"] if e.via.startswith("randperm") else rates["randint"]
                    row["s_cpu_gen"] += n_full * rate * 1e-9
                elif e.kind in ("snapshot", "save", "link"):
                    row["d2h_elems"] += n_full
                    row["s_d2h_save"] += n_full * (rates["d2h"] + (rates["save_load"] if e.kind == "save" else 0)) * 1e-9
                elif e.kind == "load":
                    row["s_d2h_save"] += n_full * rates["save_load"] * 1e-9
                elif e.kind == "cpu_compare" and e.where == "device":  # the check compares on the device
                    row["n_dev_compare"] += 1
                elif e.kind == "cpu_compare":
                    row["cmp_elems"] += n_full
                    row["s_cmp"] += n_full * rates["cpu_compare"] * 1e-9
    # a KBH deck's property stage runs at its graded property shape even on the CPU: counted as is
    for e in ledger.events:
        if e.probe != "kbh_property":
            continue
        row = rows.setdefault((e.phase, e.probe, -1), defaultdict(float))  # type: ignore[arg-type]
        on_cpu = e.where == "cpu" or (e.where == "ctx" and schema == "kbh")
        row[f"n_{e.kind}"] += 1
        if e.kind in ("ref_model", "sol_model", "get_inputs"):
            row[f"{e.kind}_{'cpu' if on_cpu else 'device'}"] += 1
            if on_cpu and e.kind != "sol_model":
                row["s_draw_cpu"] += e.numel * rates["draw_cpu"] * 1e-9
    for phase, probe, kind, where, role, count in CUDA_ONLY_ROWS:
        if phase not in {e.phase for e in ledger.events}:
            continue
        for fi, fsz in enumerate(full):
            row = rows.setdefault((phase, probe, fi), defaultdict(float))  # type: ignore[arg-type]
            row["from_code"] = 1
            n_full = fsz.get(role, 0) * count
            row[f"n_{kind}"] += count
            if kind in ("ref_model", "sol_model", "get_inputs"):
                row[f"{kind}_device"] += count
            elif kind in ("snapshot", "save") and where == "d2h":
                row["d2h_elems"] += n_full
                row["s_d2h_save"] += n_full * (rates["d2h"] + (rates["save_load"] if kind == "save" else 0)) * 1e-9
            elif kind == "load":
                row["s_d2h_save"] += n_full * rates["save_load"] * 1e-9
            elif kind == "cpu_compare" and where == "device":
                row["n_dev_compare"] += count
            elif kind == "cpu_compare":
                row["cmp_elems"] += n_full
                row["s_cmp"] += n_full * rates["cpu_compare"] * 1e-9
    out = []
    for (phase, probe, fi), row in sorted(rows.items(), key=lambda kv: (PHASES.index(kv[0][0]), kv[0][1], kv[0][2])):
        r = dict(row)
        r["s_total"] = sum(v for k, v in r.items() if k.startswith("s_"))
        out.append({"phase": phase, "probe": probe, "shape": fi, **r})
    return out


def tag_roles(ledger: Ledger, small: list[dict[str, int]]) -> None:
    """Each event's role at its small shape (for the JSON: which tensor a count stands for)."""
    for e in ledger.events:
        if e.shape is not None and e.shape < len(small):
            e.role = role_of(e.numel, small[e.shape], e.kind)


# ---------------------------------------------------------------------------------------------
# Tables


def count_table(ledger: Ledger) -> list[dict[str, Any]]:
    """Per (phase, probe, small shape): builds and draws with their location and seeds."""
    rows: dict[tuple[str, str, Any], dict[str, Any]] = {}
    for e in ledger.events:
        key = (e.phase, e.probe, e.shape)
        row = rows.setdefault(key, {"phase": e.phase, "probe": e.probe, "shape": e.shape, "ref_model": [],
                                    "sol_model": [], "get_inputs": [], "cpu_gen": 0, "cpu_gen_elems": 0,
                                    "snapshot_elems": 0, "save_elems": 0, "linked": 0, "cmp_calls": 0})
        if e.kind in ("ref_model", "sol_model", "get_inputs"):
            row[e.kind].append(f"{e.seed}@{e.where}" + (f"/{e.via}" if e.via else ""))
        elif e.kind == "cpu_gen":
            row["cpu_gen"] += 1
            row["cpu_gen_elems"] += e.numel
        elif e.kind == "snapshot":
            row["snapshot_elems"] += e.numel
        elif e.kind == "save":
            row["save_elems"] += e.numel
        elif e.kind == "link":
            row["linked"] += 1
        elif e.kind == "cpu_compare":
            row["cmp_calls"] += 1
    order = {p: i for i, p in enumerate(PHASES)}
    return sorted(rows.values(), key=lambda r: (order.get(r["phase"], 9), str(r["probe"]),
                                                -1 if r["shape"] is None else r["shape"]))


def summary(ledger: Ledger) -> dict[str, Any]:
    """Per phase and small shape: distinct (seed, where) of reference builds and how many builds."""
    out: dict[str, Any] = {}
    for e in ledger.events:
        if e.kind not in ("ref_model", "get_inputs", "sol_model"):
            continue
        d = out.setdefault(e.phase, {}).setdefault(str(e.shape), {"ref_model": 0, "get_inputs": 0, "sol_model": 0,
                                                                  "ref_seeds": set(), "input_seeds": set()})
        d[e.kind] += 1
        if e.kind == "ref_model":
            d["ref_seeds"].add(e.seed)
        if e.kind == "get_inputs":
            d["input_seeds"].add(e.seed)
    for per in out.values():
        for d in per.values():
            d["ref_seeds"], d["input_seeds"] = sorted(d["ref_seeds"]), sorted(d["input_seeds"])
    return out


def _fmt_counts(items: list[str]) -> str:
    """`n: seed@where/via ...` (identical entries folded as xN; more than 4 distinct: their count)."""
    if not items:
        return "0"
    agg: dict[str, int] = defaultdict(int)
    for it in items:
        agg[it] += 1
    if len(agg) > 4:
        wheres = sorted({k.split("@", 1)[1] for k in agg})
        return f"{len(items)}: {len(agg)} seeds@{','.join(wheres)}"
    return f"{len(items)}: " + " ".join(f"{k}" + (f"x{v}" if v > 1 else "") for k, v in agg.items())


def print_report(ledger: Ledger, info: dict[str, Any], est: list[dict[str, Any]], schema: str,
                 full: list[dict[str, int]], rates: dict[str, float]) -> None:
    print(f"# deck schema: {schema}  (ctx = spec.draw_context: {'CPU generator' if schema == 'kbh' else 'device'} on CUDA)")
    print(f"# phases run here (wall s, CPU, small shapes): {info['wall_s']}")
    if "check_passed" in info:
        print(f"# check passed={info['check_passed']} last={info['check_last_line']!r}")
    print("\n## counts at the SMALL shapes: n: seed@where/via  (where on CUDA: device = on_device, ctx = "
          "spec.draw_context, cpu = CPU generator)")
    print(f"{'phase':<13}{'probe':<23}{'sh':>3}  {'reference Model builds':<50}{'sol':>4}  {'get_inputs draws':<60}"
          f"{'cpugen':>7}{'cpugen_el':>10}{'d2h_el':>8}{'saved_el':>9}{'link':>5}{'cmp':>5}")
    for r in count_table(ledger):
        print(f"{r['phase']:<13}{r['probe']:<23}{'-' if r['shape'] is None else r['shape']:>3}  "
              f"{_fmt_counts(r['ref_model']):<50}{len(r['sol_model']):>4}  {_fmt_counts(r['get_inputs']):<60}"
              f"{r['cpu_gen']:>7}{r['cpu_gen_elems']:>10}{r['snapshot_elems']:>8}{r['save_elems']:>9}{r['linked']:>5}"
              f"{r['cmp_calls']:>5}")
    print("\n## estimate at the FULL shapes (CPU-side seconds at this host's rates; device draws counted, not timed)")
    print(f"# rates ns/elem: {', '.join(f'{k}={v:.2f}' for k, v in rates.items())}")
    print(f"# full sizes: {full}")
    print(f"{'phase':<13}{'probe':<24}{'sh':>3}{'ref d/c':>9}{'sol':>5}{'inp d/c':>9}{'cpu_gen_Gel':>12}{'s_gen':>8}"
          f"{'s_draw':>8}{'d2h_Gel':>9}{'s_d2h+io':>9}{'cmp_Gel':>9}{'s_cmp':>8}{'s_total':>9}")
    tot: dict[str, float] = defaultdict(float)
    for r in est:
        def g(k: str, r: dict[str, Any] = r) -> float:
            return float(r.get(k, 0))

        ref_dc = f"{int(g('ref_model_device'))}/{int(g('ref_model_cpu'))}"
        inp_dc = f"{int(g('get_inputs_device'))}/{int(g('get_inputs_cpu'))}"
        sh = "p" if r["shape"] < 0 else str(r["shape"])  # p: the KBH property shape
        print(f"{r['phase']:<13}{r['probe'] + ('*' if g('from_code') else ''):<24}{sh:>3}{ref_dc:>9}"
              f"{int(g('n_sol_model')):>5}{inp_dc:>9}{g('cpu_gen_elems') / 1e9:>12.3f}{g('s_cpu_gen'):>8.1f}"
              f"{g('s_draw_cpu'):>8.1f}{g('d2h_elems') / 1e9:>9.2f}{g('s_d2h_save'):>9.1f}{g('cmp_elems') / 1e9:>9.2f}"
              f"{g('s_cmp'):>8.1f}{g('s_total'):>9.1f}")
        tot[r["phase"]] += g("s_total")
    print("# * rows of CUDA-only probes come from the code (CUDA_ONLY_ROWS), not from a run")
    print("# per phase (s, full shapes, this host's rates): " + ", ".join(f"{PHASE_NAMES[p]}={v:.0f}" for p, v in tot.items())
          + f"; total={sum(tot.values()):.0f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("problem", type=Path, help="deck problem folder, e.g. kernels/hard/06_sonic_moe_swiglu")
    ap.add_argument("--solution", default="reference", help="solution.py, or 'reference' (the deck's reference)")
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--json", type=Path, default=None, help="also write events, tables and the estimate here")
    ap.add_argument("--measure-rates", action="store_true", help="measure the CPU rates here (default: FIXED_RATES)")
    ap.add_argument("--small", default=None,
                    help="JSON list of shape dicts replacing the deck's SMALL_SHAPES (a KBH deck has none)")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    problem = args.problem.resolve()
    phases = tuple(p for p in args.phases.split(",") if p)
    with tempfile.TemporaryDirectory(prefix="probe_cost_sol_") as sol_dir:
        if args.solution == "reference":
            solution = Path(sol_dir) / "solution.py"
            shutil.copy(problem / "reference.py", solution)
            enforce = False
        else:
            solution, enforce = Path(args.solution).resolve(), True
        small_shapes = json.loads(args.small) if args.small else None
        ledger, info = run_phases(problem, solution, phases, enforce_forbidden=enforce, small=small_shapes)
    small, full, spec = size_tables(problem, small_shapes)
    tag_roles(ledger, small)
    rates = measure_rates() if args.measure_rates else dict(FIXED_RATES)
    est = estimate(ledger, small, full, spec.schema, rates)
    print_report(ledger, info, est, spec.schema, full, rates)
    if args.json:
        args.json.write_text(json.dumps({"info": info, "summary": summary(ledger), "counts": count_table(ledger),
                                         "estimate": est, "rates": rates, "full_sizes": full, "small_sizes": small,
                                         "events": [e.__dict__ for e in ledger.events]}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
