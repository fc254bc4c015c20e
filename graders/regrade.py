"""Isolated sequential regrade: lock -> sandboxed check -> sandboxed benchmark -> probes -> provenance.

`regrade(...)` is what the worker, `kaudit regrade` and `kaudit audit --regrade` call. Every step
runs in a fresh sandboxed child (graders.sandbox); this process never imports the solution.

Failure classification (the seeds' rescue cases): an environment fault — ninja or nvcc missing, a
compiler missing, a driver/runtime mismatch, a full disk, the lock not obtained, an OOM while a
foreign process holds GPU memory, the sandbox failing to start, our own grader crashing — is an
`infra_failure` (retryable; the run is never failed for it). A genuine defect of the submitted
code — a FAIL line of the check, a crash or early exit of the solution's process, a timeout of the
check — is a `fail` with the log lines.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import graders
from graders import gpu_lock, official
from graders import probes as probe_names
from graders.decks import DeckTampered
from graders.gpu_lock import LockConfig, LockHandle, LockTimeout
from graders.hold import hold_kind
from graders.official import OfficialResult
from graders.outputmarks import BUILD_FAULT
from graders.results import (
    REFUTED_CAUSE,
    REFUTED_UNEXPLAINED,
    REFUTED_UNSTABLE,
    GradeResult,
    ProbeResult,
    ProbeStatus,
    Provenance,
    ShapeResult,
    last_fail_line,
    mode_summary,
)
from graders.sandbox import (
    SANDBOX_SUBPROCESS,
    Sandbox,
    SandboxConfig,
    SandboxSetupError,
    SandboxUnavailable,
    StepResult,
    Workspace,
    build_deps_from_env,
    parse_build_deps,
    prepare_workspace,
    unsafe_allowed_by_env,
)

Progress = Callable[[str, dict[str, Any]], None]

INFRA_PATTERNS: tuple[tuple[str, str], ...] = (
    ("ninja_missing", r"Ninja is required|ninja: (command )?not found|No module named '?ninja"),
    ("nvcc_missing", r"nvcc: (command )?not found|No such file or directory: '[^']*nvcc'|CUDA_HOME environment "
                     r"variable is not set|[Cc]ould not find nvcc|nvcc fatal"),
    ("compiler_missing", r"(gcc|g\+\+|c\+\+|cc|clang): (command )?not found|command '[^']*(g\+\+|gcc|c\+\+)' "
                         r"failed|No such file or directory: '(g\+\+|gcc|c\+\+|cc)'"),
    ("python_headers_missing", r"Python\.h: No such file or directory"),
    ("no_cuda_device", r"no CUDA-capable device is detected|Found no NVIDIA driver|cudaErrorNoDevice|"
                       r"No CUDA GPUs are available"),
    ("driver_mismatch", r"CUDA driver version is insufficient|driver/library version mismatch|CUDA driver "
                        r"initialization failed|cudaErrorInsufficientDriver|forward compatibility was attempted"),
    ("toolchain_missing", r"[Cc]annot find ptxas|ptxas: not found|libcuda\.so cannot found|failed to find libcuda"),
    ("disk_full", r"No space left on device"),
    ("grader_missing", r"No module named 'graders"),
)
OOM_PATTERN = r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"

# Text the solution controls (its exception messages) inside reader-facing lines: the type stays,
# the message goes to GradeResult.operator_output (a solution can raise with any file's content).
_SOLUTION_TEXT = re.compile(
    r"(solution import error: |runtime error: (?:Model construction: )?|state_dict mismatch at shape \d+ \(|"
    r"probe could not run: |solution raised: |grader error: )([A-Za-z_][\w.]*)(: [^\n]*)")
WITHHELD = "[message withheld: operator-only]"
OPERATOR_OUTPUT_BYTES = 16000  # per entry of GradeResult.operator_output
_OPERATOR_KEYS = ("traceback", "stderr_tail", "stdout_tail", "probe_error")


def withhold(text: str) -> str:
    """`text` with the solution's exception messages withheld (kept: the exception type)."""
    def sub(m: re.Match[str]) -> str:
        tail = ")" if m.group(1).endswith("(") else ""
        return f"{m.group(1)}{m.group(2)}: {WITHHELD}{tail}"

    return _SOLUTION_TEXT.sub(sub, text)


_MISSING_HEADER = re.compile(r"fatal error: [^\s:]+\.(?:h|hh|hpp|hxx|cuh|inl): No such file or directory")
_INCLUDE_DIR = re.compile(r"(?:^|\s)-I\s*(/[^\s'\"]+)")


def classify_infra(text: str) -> str | None:
    """The infra fault a log/traceback shows, if any (first match wins)."""
    for name, pattern in INFRA_PATTERNS:
        if re.search(pattern, text):
            return name
    # A build that includes headers from an absolute folder the original host had (a CUTLASS
    # checkout under /workspace/refs, say) and this host lacks: the archive does not carry a
    # dependency of the solution, so this host cannot rebuild it; not the solution's fault.
    if _MISSING_HEADER.search(text):
        absent = [d for d in _INCLUDE_DIR.findall(text) if not Path(d).is_dir()]
        if absent:
            return "build_dependency_missing"
    # Binaries built only for another GPU architecture (a run graded on an sm_120 board, regraded
    # on sm_90): not runnable here, which says nothing about the solution on its own hardware.
    if re.search(r"no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice", text):
        return "kernel_arch_mismatch"
    return None


# the regrade steps whose output is the solution's (probes run it too, but on their own inputs)
_GRADED_STEPS = ("official_check", "official_benchmark", "check", "benchmark")


def survived_build_fault(outputs: dict[str, str]) -> tuple[dict[str, Any], str] | None:
    """({"reason", "steps", "note"}, the matching lines) when a graded run's step output shows a
    failed extension build; None otherwise. `outputs`: step name + ".stdout"/".stderr" -> text
    (the regrade's operator-only output). The note names kaudit's classification and the steps,
    never the solution's text, which stays operator-only."""
    steps: list[str] = []
    lines: list[str] = []
    reason: str | None = None
    for step in _GRADED_STEPS:
        # the bounded tails, and the matching lines kept from anywhere in the stream (graders.outputmarks)
        text = "\n".join(outputs.get(f"{step}.{stream}", "") for stream in ("stdout", "stderr", "marks"))
        hits: list[str] = []
        for m in BUILD_FAULT.finditer(text):
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            line = text[start:end if end >= 0 else len(text)][:600]
            if line not in hits:
                hits.append(line)
        if not hits:
            continue
        steps.append(step)
        lines += [f"{step}: {ln}" for ln in hits[:6]]
        reason = reason or classify_infra(text) or "extension_build_failed"
    if not steps:
        return None
    where = ", ".join(s.replace("_", " ") for s in steps)
    note = (f"the solution's own output in the {where} shows a failed extension build ({reason}) and the run "
            "still passed: it went on through another path (a fallback), so the measured peak_fraction may "
            "not be the submitted kernel's; regrade on a host that has the build's dependencies before "
            "publishing it")
    return {"reason": reason, "steps": steps, "note": note}, "\n".join(lines)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _nvidia_smi_facts(gpu: int | None) -> dict[str, Any]:
    if gpu is None or shutil.which("nvidia-smi") is None:
        return {}
    keys = ["index", "name", "uuid", "driver_version", "clocks.sm", "clocks.mem", "clocks.max.sm",
            "clocks.max.mem", "power.limit", "temperature.gpu", "persistence_mode", "compute_mode"]
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(keys)}", "--format=csv,noheader,nounits",
                              "-i", str(gpu)], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    values = [v.strip() for v in out.strip().splitlines()[0].split(",")] if out.strip() else []
    return dict(zip(keys, values, strict=False))


class _Run:
    """State of one regrade call (keeps regrade() itself readable)."""

    def __init__(self, solution_dir: Path, problem_dir: Path, device: str, gpu: int | None, progress: Progress | None,
                 smoke: bool) -> None:
        self.solution_dir = solution_dir
        self.problem_dir = problem_dir
        self.device = device
        self.gpu = gpu
        self.progress = progress
        self.smoke = smoke
        self.started_at = _now()
        self.t0 = time.monotonic()
        self.timings: dict[str, float] = {}
        self.env: dict[str, Any] = {}
        self.lock: LockHandle | None = None
        self.sandbox_mode = "none"
        self.allow_unsafe = False
        self.extra: dict[str, Any] = {}
        self.operator: dict[str, str] = {}  # operator-only output of the steps (bounded)
        self.deps: tuple[tuple[str, str], ...] = ()  # declared build dependencies (dest, src)
        self.hold = "sleep"  # the hardened timer's GPU-side hold (graders.hold), set by regrade()

    def keep(self, key: str, text: str) -> None:
        if text:
            self.operator[key] = text[-OPERATOR_OUTPUT_BYTES:]

    def emit(self, phase: str, **info: Any) -> None:
        if self.progress is not None:
            try:
                self.progress(phase, info)
            except Exception:  # a broken progress sink must not fail a regrade
                pass

    def provenance(self) -> Provenance:
        smi = _nvidia_smi_facts(self.gpu if self.device == "cuda" else None)
        clocks = {k: v for k, v in smi.items() if k.startswith(("clocks", "power", "temperature"))} or None
        return Provenance(
            host=socket.gethostname(),
            gpu_index=self.gpu if self.device == "cuda" else None,
            gpu_name=smi.get("name") or self.env.get("gpu_name"),
            gpu_uuid=smi.get("uuid") or self.env.get("gpu_uuid"),
            driver=smi.get("driver_version"),
            cuda=self.env.get("cuda"),
            torch=str(self.env.get("torch") or _local_version("torch")),
            triton=self.env.get("triton") or _local_version("triton"),
            clocks=clocks,
            lock_wait_s=round(self.lock.wait_s, 3) if self.lock else None,
            lock_hold_s=round(self.lock.hold_s, 3) if self.lock else None,
            started_at=self.started_at,
            finished_at=_now(),
            sandbox=self.sandbox_mode,
            grader_version=graders.GRADER_VERSION,
            device=self.device,
            smoke=self.smoke,
            extra={"timings_s": {k: round(v, 3) for k, v in self.timings.items()},
                   "wall_s": round(time.monotonic() - self.t0, 3), **self.extra},
        )


def _local_version(module: str) -> str | None:
    try:
        mod = __import__(module)
        return str(mod.__version__)
    except Exception:
        return None


def regrade(
    solution_dir: Path,
    problem: str,
    deck_root: Path,
    *,
    device: str = "cuda",
    probes: Sequence[str] | None = None,
    lock: LockConfig | None = None,
    timeout_s: float = 3600.0,
    progress: Progress | None = None,
    gpu: int = 0,
    shapes: str | None = None,
    sandbox_mode: str = "auto",
    mem_limit_mib: int | None = None,
    run_dir: str = "",
    scratch_dir: Path | None = None,
    mode: str | None = None,
    allow_unsafe_sandbox: bool | None = None,
    build_deps: str | Sequence[tuple[str, str]] | None = None,
) -> GradeResult:
    """Grade one solution on an idle locked GPU, in `mode`, then probe it.

    `mode`: `hardened` (kaudit's own check, cold-L2 benchmark and probes), `official` (the
    registered deck's own check.py/benchmark.py, graders.official) or `both` (one record; the
    official outcome decides when it ran, the hardened one is kept beside it, disagreements are
    listed). None: `both` when the deck is a registered deck with a harness, else `hardened`.

    `solution_dir` is an unpacked run archive (solution.py + scratch/ sidecars) or a folder/file
    holding solution.py. `probes=None` runs every probe meaningful on `device`; `[]` runs none.
    `timeout_s` bounds each sandboxed step. On `device="cpu"` the run is a smoke run (small shapes,
    Triton interpreter) and never publish-grade; no GPU lock is taken.
    ValueError: an unknown problem or mode, or a mode asked for explicitly that this deck/device
    cannot run (the message says why).

    Untrusted code runs under bubblewrap only (graders.sandbox): without a usable bubblewrap the
    regrade is an infra failure `sandbox_unavailable`, unless `allow_unsafe_sandbox` (default: the
    KAUDIT_ALLOW_UNSAFE_SANDBOX environment flag) lets it run as a plain subprocess, recorded in
    the provenance. `mem_limit_mib` is clamped to a share of the host's memory (None: that share).
    `build_deps` (`DEST=SRC,...` or (dest, src) pairs; None: the KAUDIT_BUILD_DEPS environment
    variable): build dependencies the runs' original hosts had at DEST (a CUTLASS checkout), bound
    read-only from SRC at DEST in every sandboxed step of both modes (graders.sandbox.parse_build_deps;
    ValueError when one is malformed or missing).
    """
    problem_dir = (Path(deck_root) / problem).resolve()
    if not (problem_dir / "problem.yaml").is_file():
        raise ValueError(f"problem {problem!r} is not in the deck at {deck_root}")
    chosen = official.check_mode(mode) or official.default_mode(problem_dir)
    if mode == "hardened" and (why := official.hardened_support(problem_dir)):
        raise ValueError(f"--mode hardened cannot grade {problem}: {why}")
    if mode == "official":
        try:
            _, why_not = official.official_support(problem_dir, device)
        except DeckTampered:
            why_not = None  # refused inside the locked run, recorded as infra with the tamper message
        if why_not:
            raise ValueError(f"--mode official cannot grade {problem}: {why_not}")
    smoke = device != "cuda"
    shape_set = shapes or ("small" if smoke else "all")
    wanted = probe_names.normalise(probes, device)
    run = _Run(Path(solution_dir), problem_dir, device, gpu if device == "cuda" else None, progress, smoke)
    run.extra["mode"] = chosen
    run.allow_unsafe = unsafe_allowed_by_env() if allow_unsafe_sandbox is None else bool(allow_unsafe_sandbox)
    if build_deps is None:
        run.deps = build_deps_from_env()
    elif isinstance(build_deps, str):
        run.deps = parse_build_deps(build_deps)
    else:
        run.deps = parse_build_deps(",".join(f"{d}={s}" for d, s in build_deps))
    if run.deps:
        run.extra["build_deps"] = [{"dest": d, "src": s} for d, s in run.deps]
    # the hardened timer's GPU-side hold, chosen on this trusted side (KAUDIT_TIMING_HOLD; ValueError
    # before anything runs when the value is unknown) and handed to the benchmark step as a parameter
    run.hold = hold_kind()
    if run.hold != "sleep":
        run.extra["timing_hold"] = run.hold
    tmp = Path(tempfile.mkdtemp(prefix="kaudit-regrade-", dir=scratch_dir))
    try:
        grade = _regrade(run, tmp, shape_set, wanted, lock, timeout_s, sandbox_mode, mem_limit_mib, run_dir, chosen)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _for_readers(run, grade)


def _for_readers(run: _Run, grade: GradeResult) -> GradeResult:
    """Move the solution-controlled text out of every reader-facing field into operator_output."""
    grade.check_lines = _withheld_lines(run, "check_lines", grade.check_lines)
    if grade.detail:
        grade.detail = _withheld(run, "detail", grade.detail)
    for p in grade.probes:
        for key in _OPERATOR_KEYS:
            if key in p.numbers:
                run.keep(f"probe.{p.probe}.{key}", str(p.numbers.pop(key)))
        for row in p.numbers.get("shapes") or []:
            if isinstance(row, dict):
                for key in _OPERATOR_KEYS:
                    if key in row:
                        run.keep(f"probe.{p.probe}.s{row.get('shape_index')}.{key}", str(row.pop(key)))
                if isinstance(row.get("summary"), str):
                    row["summary"] = withhold(row["summary"])
        p.summary = withhold(p.summary)
    # The hardened mode's own summary, kept beside an official outcome in mode `both`, carries the
    # same kaudit lines (its FAIL line, detail, check lines): the same text is withheld there.
    # The official record is the deck's own scripts' output, shown as it ran (docs/regrade.md).
    h = grade.hardened
    if isinstance(h, dict):
        for key in ("fail_line", "detail"):
            if isinstance(h.get(key), str):
                h[key] = _withheld(run, f"hardened.{key}", h[key])
        if isinstance(h.get("check_lines"), list):
            h["check_lines"] = _withheld_lines(run, "hardened.check_lines", [str(ln) for ln in h["check_lines"]])
    grade.operator_output = dict(run.operator)
    return grade


def _withheld(run: _Run, key: str, text: str) -> str:
    """`text` with the solution's messages withheld; the original kept operator-only under `key`."""
    if _SOLUTION_TEXT.search(text):
        run.keep(key, text)
    return withhold(text)


def _withheld_lines(run: _Run, key: str, lines: list[str]) -> list[str]:
    """Each line withheld as `_withheld` does; the original lines kept together under `key`."""
    if any(_SOLUTION_TEXT.search(ln) for ln in lines):
        run.keep(key, "\n".join(lines))
    return [withhold(ln) for ln in lines]


def _infra(run: _Run, reason: str, detail: str, check_lines: list[str] | None = None) -> GradeResult:
    run.extra["infra_reason"] = reason
    run.emit("done", outcome="infra_failure", reason=reason)
    return GradeResult(correct=None, check_lines=check_lines or [], benchmark_lines=[], peak_fraction=None, shapes=[],
                       failure_reason="harness_error", infra_failure=True, framework=None,
                       provenance=run.provenance(), detail=f"{reason}: {detail}")


def _regrade(run: _Run, tmp: Path, shape_set: str, wanted: list[str], lock: LockConfig | None, timeout_s: float,
             sandbox_mode: str, mem_limit_mib: int | None, run_dir: str, mode: str = "hardened") -> GradeResult:
    try:
        ws = prepare_workspace(run.solution_dir, tmp)
    except FileNotFoundError as exc:
        run.emit("done", outcome="no_solution")
        return GradeResult(correct=False, check_lines=[], benchmark_lines=[], peak_fraction=None, shapes=[],
                           failure_reason="no_solution", infra_failure=False, framework=None,
                           provenance=run.provenance(), detail=str(exc))
    except (SandboxSetupError, OSError) as exc:
        return _infra(run, "sandbox_setup", str(exc))

    if run.device == "cuda":
        cfg = lock or LockConfig()
        run.emit("lock", gpu=run.gpu, path=str(cfg.path_for(run.gpu or 0)))
        t = time.monotonic()
        try:
            run.lock = gpu_lock.acquire(run.gpu or 0, cfg, run_dir=run_dir,
                                        on_wait=lambda msg: run.emit("lock", waiting=msg))
        except LockTimeout as exc:
            run.timings["lock_wait"] = time.monotonic() - t
            return _infra(run, "lock_timeout", str(exc))
        run.extra["foreign_processes_waited_out"] = [a.__dict__ for a in run.lock.foreign_seen]
        run.extra["nvidia_smi_available"] = run.lock.nvidia_smi_available
    try:
        return _modes(run, ws, tmp, mode, shape_set, wanted, timeout_s, sandbox_mode, mem_limit_mib)
    finally:
        if run.lock is not None:
            gpu_lock.release(run.lock)


def _modes(run: _Run, ws: Any, tmp: Path, mode: str, shape_set: str, wanted: list[str], timeout_s: float,
           sandbox_mode: str, mem_limit_mib: int | None) -> GradeResult:
    """The official and/or hardened grading under the one lock, combined into one record."""
    off: OfficialResult | None = None
    hard: GradeResult | None = None
    hard_skip: str | None = None
    if mode in ("official", "both"):
        off = _official(run, ws, tmp, timeout_s, sandbox_mode, mem_limit_mib)
        run.emit("official", status=off.status, correct=off.correct, peak_fraction=off.peak_fraction,
                 fail_line=off.fail_line)
    if mode in ("hardened", "both"):
        hard_skip = official.hardened_support(run.problem_dir)
        if hard_skip is None:
            hard = _locked(run, ws, shape_set, wanted, timeout_s, sandbox_mode, mem_limit_mib)
    g = _combine(run, mode, off, hard, hard_skip)
    _note_build_fallback(run, g, off)
    return g


def _official(run: _Run, ws: Any, tmp: Path, timeout_s: float, sandbox_mode: str,
              mem_limit_mib: int | None) -> OfficialResult:
    try:
        loc, why = official.official_support(run.problem_dir, run.device)
    except DeckTampered as exc:
        return official.OfficialResult(status="infra_failure", correct=None, peak_fraction=None,
                                       failure_reason="harness_error", infra_reason="deck_tampered", detail=str(exc))
    if loc is None or why:
        return official.not_run(why or "no registered deck", official.deck_facts(loc, run.problem_dir.name)
                                if loc is not None else None)
    problem = run.problem_dir.name
    mode = sandbox_mode
    for attempt in (0, 1):
        root = tmp / f"official{attempt}"
        # one compile cache for the whole regrade: the deck's check.py builds the solution's
        # Triton kernels and load_inline extensions once, and kaudit's hardened steps (same
        # solution, same lock) reuse them instead of compiling everything a second time
        tree, cache = root / "tree", ws.cache
        try:
            official.stage_tree(ws.work, list(ws.files), loc, problem, tree)
        except DeckTampered as exc:
            return official.OfficialResult(status="infra_failure", correct=None, peak_fraction=None,
                                           failure_reason="harness_error", infra_reason="deck_tampered",
                                           detail=str(exc), deck=official.deck_facts(loc, problem))
        ows = Workspace(root=root, work=tree, cache=cache, out=root / "out", clean=root / "clean")
        for d in (cache / "triton", cache / "torch_extensions", cache / "cuda", cache / "tmp", ows.out, ows.clean):
            d.mkdir(parents=True, exist_ok=True)
        config = SandboxConfig(device=run.device, gpu=run.gpu, timeout_s=timeout_s + 60.0,
                               mem_limit_mib=mem_limit_mib, mode=mode, allow_unsafe=run.allow_unsafe,
                               dep_binds=run.deps)
        try:
            sb = Sandbox(ows, config, [loc.root.parent])
        except SandboxSetupError as exc:
            return official.OfficialResult(status="infra_failure", correct=None, peak_fraction=None,
                                           failure_reason="harness_error", infra_reason="sandbox_setup",
                                           detail=str(exc), deck=official.deck_facts(loc, problem))
        run.extra["official_sandbox"] = sb.mode

        def step(sb: Sandbox, name: str, kind: str, params: dict[str, Any], timeout_s: float | None = None) -> StepResult:
            return _step(run, sb, name, kind, params, timeout_s=timeout_s)

        res = official.run_official(sb, step, loc, problem, tree, cache, run.device, timeout_s,
                                    classify=lambda text: classify_infra(text) or _oom_infra(run, text))
        bwrap_failed = sb.mode != SANDBOX_SUBPROCESS and sandbox_mode == "auto" and (
            (res.check is not None and res.check.error == "no_start")
            or (run.device == "cuda" and res.infra_reason == "no_cuda_device"))
        if attempt == 0 and bwrap_failed:
            # same fallback as the hardened path: bwrap passed its probe but cannot run this here
            run.extra["official_sandbox_reason"] = f"bwrap could not run the deck's check.py ({res.infra_reason or 'no_start'})"
            mode = "subprocess"
            continue
        return res
    raise AssertionError("unreachable")


def _from_official(off: OfficialResult, prov: Provenance) -> GradeResult:
    def lines(step: Any) -> list[str]:
        return step.output.splitlines() if step is not None else []

    shapes = [ShapeResult(shape_index=int(s["shape"]), shape={}, ms=s.get("ms"), tflops=s.get("tflops"),
                          gbps=s.get("gbps"), fraction=s.get("fraction")) for s in off.shapes]
    return GradeResult(correct=off.correct, check_lines=lines(off.check), benchmark_lines=lines(off.benchmark),
                       peak_fraction=off.peak_fraction, shapes=shapes, failure_reason=off.failure_reason,
                       infra_failure=off.status == "infra_failure", framework=None, provenance=prov,
                       detail=off.detail if off.status != "infra_failure" else f"{off.infra_reason}: {off.detail}")


PEAK_DISAGREEMENT = 0.20  # relative gap between the modes' peak_fraction worth listing


def disagreements(off: OfficialResult | None, hard: GradeResult | None) -> list[str]:
    """Where the two modes' outcomes differ (both must have graded)."""
    if off is None or hard is None or off.status not in ("graded", "fail") or hard.infra_failure or hard.correct is None:
        return []
    out: list[str] = []
    if bool(off.correct) != bool(hard.correct):
        if off.correct:
            out.append("correctness: the official check PASSED but the hardened check FAILED: "
                       + (last_fail_line(hard.check_lines) or hard.detail or str(hard.failure_reason)))
        else:
            out.append("correctness: the official check FAILED but the hardened check PASSED: "
                       + (off.fail_line or off.detail or ""))
    po, ph = off.peak_fraction, hard.peak_fraction
    if po is not None and ph is not None and po > 0 and abs(ph - po) / po > PEAK_DISAGREEMENT:
        out.append(f"peak_fraction: official {po:.4f} vs hardened {ph:.4f} ({(ph - po) / po:+.1%}; the hardened "
                   "timer counts the call's device work alone, the deck's benchmark.py also its host launch latency)")
    return out


# Infra reasons that say the solution cannot be built or run on THIS host (it needs a toolchain
# path, a header folder or a GPU architecture the original host had): a construction failure of
# the hardened check after one of these is the same fault, not a verdict on the solution.
BUILD_ENV_REASONS = frozenset({"ninja_missing", "nvcc_missing", "compiler_missing", "python_headers_missing",
                               "toolchain_missing", "build_dependency_missing", "kernel_arch_mismatch"})
_BEFORE_ANY_OUTPUT = re.compile(r"solution import error: |runtime error: Model construction: ")


def _same_build_fault(off: OfficialResult, hard: GradeResult | None) -> bool:
    if hard is None or off.status != "infra_failure" or off.infra_reason not in BUILD_ENV_REASONS:
        return False
    if hard.infra_failure or hard.correct is not False:
        return False
    text = "\n".join([*(hard.check_lines or []), hard.detail or ""])
    return bool(_BEFORE_ANY_OUTPUT.search(text))


def _combine(run: _Run, mode: str, off: OfficialResult | None, hard: GradeResult | None,
             hard_skip: str | None) -> GradeResult:
    prov = run.provenance()
    hard_summary = mode_summary(hard) if hard is not None else (
        {"status": "not_run", "detail": hard_skip} if hard_skip else None)
    if mode == "hardened":
        assert hard is not None
        hard.mode, hard.decided_by = "hardened", "hardened"
        hard.provenance = prov
        return hard
    assert off is not None
    if off.status in ("graded", "fail") or hard is None:
        g = _from_official(off, prov) if off.status != "not_run" else GradeResult(
            correct=None, check_lines=[], benchmark_lines=[], peak_fraction=None, shapes=[],
            failure_reason="harness_error", infra_failure=True, framework=None, provenance=prov,
            detail=f"nothing could grade this run: official: {off.detail}; hardened: {hard_skip}")
        g.decided_by = "official"
        if hard is not None:
            g.probes, g.framework = hard.probes, hard.framework
    elif _same_build_fault(off, hard):
        # the deck's check could not build the solution on this host (its toolchain or its
        # architecture) and kaudit's check failed at the same point, before any output was
        # compared: one cause, not a wrong answer; the host's fault decides, both are shown
        g = _from_official(off, prov)
        g.decided_by = "official"
        g.detail = f"{g.detail} (hardened: the solution could not be built or imported either: {hard.detail})"
        g.probes, g.framework = hard.probes, hard.framework
    else:
        g = hard  # the official mode did not run or hit infra: the hardened outcome decides
        g.provenance = prov
        g.decided_by = "hardened"
    g.mode = mode
    g.official = off.to_dict()
    g.hardened = hard_summary
    g.disagreements = disagreements(off, hard)
    return g


def _note_build_fallback(run: _Run, g: GradeResult, off: OfficialResult | None = None) -> None:
    if g.correct is not True:
        return
    outputs = dict(run.operator)
    if off is not None:  # the deck scripts' merged output is kept on their records, not as step output
        for name, rec in (("official_check", off.check), ("official_benchmark", off.benchmark)):
            if rec is not None and rec.output:
                outputs[f"{name}.stdout"] = rec.output
            if rec is not None and rec.marks:
                outputs[f"{name}.marks"] = "\n".join(rec.marks)
    found = survived_build_fault(outputs)
    if found is not None:
        g.build_fallback, lines = found
        run.keep("build_fallback", lines)


def _deck_dirs(problem_dir: Path) -> list[Path]:
    """Read-only binds of the hardened children: the problem folder, and the harness library a
    KBH deck's problem.yaml is read with (graders.kbh: `<problem>/../../src`)."""
    from graders.kbh import harness_dir_for

    harness = harness_dir_for(problem_dir)
    return [problem_dir, *([harness] if harness is not None else [])]


def _step(run: _Run, sb: Sandbox, name: str, step: str, params: dict[str, Any], *, trusted: bool = False,
          timeout_s: float | None = None) -> StepResult:
    run.emit(name, state="start")
    t = time.monotonic()

    def forward(data: dict[str, Any]) -> None:
        run.emit(name, **data)

    res = sb.run(step, params, trusted=trusted, timeout_s=timeout_s, on_progress=forward)
    run.timings[name] = run.timings.get(name, 0.0) + (time.monotonic() - t)
    run.keep(f"{name}.stdout", res.stdout_tail)
    run.keep(f"{name}.stderr", res.stderr_tail)
    run.keep(f"{name}.marks", "\n".join([*res.stdout_marks, *res.stderr_marks]))
    run.keep(f"{name}.traceback", str((res.result or {}).get("traceback") or ""))
    return res


def _locked(run: _Run, ws: Any, shape_set: str, wanted: list[str], timeout_s: float, sandbox_mode: str,
            mem_limit_mib: int | None) -> GradeResult:
    # The hardened steps (check, benchmark, probes) keep the solution's Triton autotune results in
    # the regrade's private cache: the benchmark and the probes time the configs the check's
    # autotune chose instead of re-running every config in each step. Official mode does not:
    # the deck's own scripts autotune afresh, as the benchmark's regrade does.
    config = SandboxConfig(device=run.device, gpu=run.gpu, timeout_s=timeout_s, mem_limit_mib=mem_limit_mib,
                           mode=sandbox_mode, allow_unsafe=run.allow_unsafe, dep_binds=run.deps,
                           extra_env=(("TRITON_CACHE_AUTOTUNING", "1"),))
    try:
        sb = Sandbox(ws, config, _deck_dirs(run.problem_dir))
    except SandboxUnavailable as exc:
        run.extra["sandbox_refused"] = str(exc)
        return _infra(run, "sandbox_unavailable", str(exc))
    except SandboxSetupError as exc:
        return _infra(run, "sandbox_setup", str(exc))
    run.sandbox_mode = sb.mode
    run.extra["sandbox"] = sb.facts()
    if sb.mode == SANDBOX_SUBPROCESS:
        run.extra["sandbox_reason"] = sb.mode_reason

    common = {"solution": str(ws.solution), "problem_dir": str(run.problem_dir), "device": run.device,
              "shapes": shape_set}
    record_dir = ws.out / "check"
    check_params = {**common, "record_dir": str(record_dir)}
    sb.fresh_dir(record_dir)
    check = _step(run, sb, "check", "check", check_params)
    env_seen = dict((check.result or {}).get("env") or {})
    no_gpu_inside = run.device == "cuda" and check.ok and not env_seen.get("cuda_available")
    if (check.error == "no_start" or no_gpu_inside) and sb.mode != SANDBOX_SUBPROCESS and sandbox_mode == "auto":
        # bwrap passed its probe run but cannot start this interpreter (or hides the GPU) here:
        # only the operator's unsafe flag allows the plain subprocess, and the provenance says so
        why = "hid the GPU from torch" if no_gpu_inside else f"failed to start the check: {check.detail[:300]}"
        if no_gpu_inside and not any(Path("/dev").glob("nvidia[0-9]*")):
            return _infra(run, "no_cuda_device", "no NVIDIA device on this host (torch in the sandbox sees none)")
        if not run.allow_unsafe:
            return _infra(run, "sandbox_unavailable", f"bwrap {why}; refusing to run without it (no unsafe flag)")
        run.extra["sandbox_reason"] = f"bwrap {why}"
        sb = Sandbox(ws, SandboxConfig(**{**config.__dict__, "mode": "subprocess"}), _deck_dirs(run.problem_dir))
        run.sandbox_mode = sb.mode
        run.extra["sandbox"] = sb.facts()
        sb.fresh_dir(record_dir)
        check = _step(run, sb, "check", "check", check_params)
    run.env = dict((check.result or {}).get("env") or {})
    if check.ok and run.device == "cuda" and not run.env.get("cuda_available"):
        return _infra(run, "no_cuda_device", "torch in the sandbox sees no CUDA device")
    verdict = _classify_check(run, check)
    if verdict is not None:
        if not verdict.infra_failure and verdict.failure_reason == "check_failed" and wanted:
            # Probes run even when the check failed: the verdict then has the check's own FAIL
            # line AND the probe numbers (a memo the check caught shows which probe exposes it).
            # Not after a timeout: each probe step could only time out again.
            verdict.probes = _run_probes(run, sb, ws, wanted, shape_set, timeout_s)
            verdict.provenance = run.provenance()
        return verdict
    assert check.result is not None
    check_lines = list(check.result.get("lines") or [])
    framework = check.result.get("framework")
    forged = _verify_check(run, sb, check_params, check_lines, framework, wanted, shape_set, ws, timeout_s)
    if forged is not None:
        return forged

    bench = _step(run, sb, "benchmark", "bench", {**common, "hold": run.hold})
    bench_lines: list[str] = []
    shapes: list[ShapeResult] = []
    peak: float | None = None
    failure_reason: str | None = "pass"
    detail = None
    if bench.ok and bench.result is not None:
        bench_lines = list(bench.result.get("lines") or [])
        shapes = [_shape(s) for s in bench.result.get("shapes") or []]
        peak = bench.result.get("peak_fraction")
        run.extra["sku"] = bench.result.get("sku")
    else:
        text = f"{bench.detail}\n{bench.stderr_tail}\n{(bench.result or {}).get('traceback', '')}"
        infra = classify_infra(text) or _oom_infra(run, text) or _sandbox_infra(bench)
        if infra:
            return _infra(run, infra, bench.detail, check_lines)
        failure_reason = "benchmark_timeout" if bench.timed_out else "benchmark_failed"
        detail = bench.detail

    probe_results = _run_probes(run, sb, ws, wanted, shape_set, timeout_s) if wanted else []
    run.emit("done", outcome="graded", correct=True, peak_fraction=peak)
    return GradeResult(correct=True, check_lines=check_lines, benchmark_lines=bench_lines, peak_fraction=peak,
                       shapes=shapes, failure_reason=failure_reason, infra_failure=False, framework=framework,
                       provenance=run.provenance(), probes=probe_results, detail=detail)


def _verify_check(run: _Run, sb: Sandbox, params: dict[str, Any], check_lines: list[str], framework: Any,
                  wanted: list[str], shape_set: str, ws: Any, timeout_s: float) -> GradeResult | None:
    """The check's PASS stands only if the verifier (a child that never imported the solution, run
    after the solution's process is gone) finds every recorded output equal to its reference."""
    res = _step(run, sb, "check_verify", "check_verify", params, trusted=True)
    if res.ok and res.result is not None and res.result.get("passed"):
        run.extra["check_verified"] = {"cases": res.result.get("cases")}
        return None
    if not res.ok or res.result is None:
        text = f"{res.detail}\n{res.stderr_tail}\n{(res.result or {}).get('traceback', '')}"
        return _infra(run, classify_infra(text) or "grader_error", f"check verifier: {res.error}: {res.detail}",
                      check_lines)
    lines = list(res.result.get("lines") or [])
    why = str(res.result.get("refuted") or REFUTED_UNEXPLAINED)
    run.extra["check_verified"] = {"cases": res.result.get("cases"), "refuted": lines[-1] if lines else "",
                                   "refuted_kind": why}
    if why == REFUTED_UNSTABLE:
        # both references agree within tolerance and the output lies between them: the deck's
        # reference is not reproducible across processes at this output's margin. Neither a
        # forgery nor a fault kaudit can pin on the solution: the regrade says it could not decide.
        return _infra(run, "reference_unstable",
                      "the solution's output matched its own process's reference but not the verifier's, and the "
                      f"two references differ by less than the tolerance: {lines[-1] if lines else '?'}", check_lines)
    run.extra["check_forged"] = True
    cause = REFUTED_CAUSE.get(why, why)
    detail = ("the solution's process reported PASS but the verifier (reference computed in a process that never "
              f"imported the solution) refutes it ({cause}): {lines[-1] if lines else '?'}")
    run.emit("done", outcome="fail", reason="check_forged")
    grade = GradeResult(correct=False, check_lines=[*[ln for ln in check_lines if ln != "PASS"], *lines],
                        benchmark_lines=[], peak_fraction=None, shapes=[], failure_reason="check_failed",
                        infra_failure=False, framework=framework, provenance=run.provenance(), detail=detail)
    if wanted:
        grade.probes = _run_probes(run, sb, ws, wanted, shape_set, timeout_s)
        grade.provenance = run.provenance()
    return grade


def _shape(raw: dict[str, Any]) -> ShapeResult:
    names = {f.name for f in fields(ShapeResult)}
    return ShapeResult(**{k: v for k, v in raw.items() if k in names})


def _oom_infra(run: _Run, text: str) -> str | None:
    """An OOM counts as infra only when another process holds memory on our GPU right now."""
    if not re.search(OOM_PATTERN, text) or run.device != "cuda":
        return None
    foreign = gpu_lock.foreign_compute_apps(run.gpu or 0, LockConfig())
    return "oom_neighbour" if foreign else None


def _sandbox_infra(res: StepResult) -> str | None:
    if res.error in ("no_start", "setup"):
        return "sandbox_setup"
    if res.error == "grader_error":
        return "grader_error"  # our harness crashed: not the model's fault, retry and look
    return None


def _classify_check(run: _Run, check: StepResult) -> GradeResult | None:
    """None when the check passed; otherwise the finished GradeResult (fail or infra)."""
    lines = list((check.result or {}).get("lines") or [])
    if check.ok and check.result is not None and check.result.get("passed"):
        return None
    text = "\n".join(lines) + f"\n{check.detail}\n{check.stderr_tail}\n{(check.result or {}).get('traceback', '')}"
    infra = classify_infra(text) or _oom_infra(run, text) or _sandbox_infra(check)
    if infra:
        return _infra(run, infra, check.detail or (lines[-1] if lines else ""), lines)
    if check.timed_out:
        reason, detail = "check_timeout", check.detail
    elif check.error == "channel_tampered":
        reason, detail = "check_failed", f"grader result channel tampered with: {check.detail}"
    elif check.error in ("no_result", "memory", "solution_exit"):
        reason, detail = "check_failed", check.detail
    else:
        reason, detail = "check_failed", lines[-1] if lines else check.detail
    run.emit("done", outcome="fail", reason=reason)
    return GradeResult(correct=False, check_lines=lines, benchmark_lines=[], peak_fraction=None, shapes=[],
                       failure_reason=reason, infra_failure=False,
                       framework=(check.result or {}).get("framework"), provenance=run.provenance(), detail=detail)


def _run_probes(run: _Run, sb: Sandbox, ws: Any, wanted: list[str], shape_set: str,
                timeout_s: float) -> list[ProbeResult]:
    base = {"problem_dir": str(run.problem_dir), "solution": str(ws.solution), "device": run.device,
            "probes": wanted, "out_dir": str(ws.out), "shapes": shape_set, "smoke": run.smoke}
    # nothing an earlier step (the check/benchmark child) planted may pass for a probe output
    sb.fresh_dir(ws.out)
    fresh: StepResult | None = None
    if "fresh_vs_warm" in wanted:
        fresh = _step(run, sb, "probes_fresh", "probe_run", {**base, "mode": "fresh"})
    warm = _step(run, sb, "probes", "probe_run", {**base, "mode": "warm"})
    if not warm.ok:
        # the solution's process died or the probes could not run: say so per probe
        status = ProbeStatus.FAILED if warm.error in ("no_result", "channel_tampered", "solution_exit") \
            else ProbeStatus.ERROR
        return [ProbeResult(p, status, f"probe process: {warm.error}: {warm.detail[:300]}",
                            {}, run.device, run.smoke) for p in wanted]
    verify = _step(run, sb, "probes_verify", "probe_verify",
                   {**base, "warm_manifest": warm.result, "fresh_manifest": fresh.result if fresh and fresh.ok else {}},
                   trusted=True)
    if not verify.ok or verify.result is None:
        return [ProbeResult(p, ProbeStatus.ERROR, f"verifier: {verify.error}: {verify.detail[:300]}",
                            {}, run.device, run.smoke) for p in wanted]
    out = []
    for d in verify.result.get("probes") or []:
        out.append(ProbeResult(probe=d["probe"], status=ProbeStatus(d["status"]), summary=d["summary"],
                               numbers=d.get("numbers") or {}, device=d.get("device", run.device),
                               smoke=bool(d.get("smoke", run.smoke)), shape_index=d.get("shape_index")))
    if fresh is not None and not fresh.ok:
        for r in out:
            if r.probe == "fresh_vs_warm":
                r.status = ProbeStatus.FAILED if fresh.error == "no_result" else ProbeStatus.ERROR
                r.summary = f"fresh process: {fresh.error}: {fresh.detail[:300]}"
    return out
